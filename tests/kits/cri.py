"""The hooked CRI calls without a transport: `CriHooks` driven with a fake gRPC context and a recording relay.

What the gRPC server and the relay add (framing, deadlines, metadata, the backend's channel) is tested where they
live (tests/cri/test_forwarding.py, test_server.py, the e2e suites); here a call is its hook (if the method is
hooked) over `RecordingBackend.relay`, so a test of the hook policy sees exactly the bytes the runtime would get and
the error the kubelet would. An abort raises `Aborted`, a `grpc.RpcError` with the code, details and trailing
metadata a client would read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from rplab.loop import LoopThread
from runtimeproxy.cri.forwarding import FailureWatch
from runtimeproxy.cri.hooks import CriHooks
from runtimeproxy.hooks.service import HookService
from runtimeproxy.options import ProxyOptions
from tests.kits.hooks import StubRuntime

Metadata = Sequence[tuple[str, str | bytes]]


class Aborted(grpc.RpcError):
    """What a client reads of an aborted call."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details, self._trailing = code, details, tuple(trailing)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Metadata:
        return self._trailing


class FakeContext:
    """The part of a grpc.aio.ServicerContext a hooked call uses."""

    def __init__(self, time_remaining: float = 10.0) -> None:
        self._time_remaining = time_remaining

    def time_remaining(self) -> float:
        return self._time_remaining

    def invocation_metadata(self) -> Metadata:
        return ()

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()) -> None:
        raise Aborted(code, details, trailing_metadata)


@dataclass
class Received:
    path: str
    request: bytes


Answer = Callable[[bytes, Any], Awaitable[bytes]]


@dataclass
class RecordingBackend:
    """The runtime behind the relay: records each request's bytes and answers by `unary` (path -> an answer taking
    the request and the context, which may abort), else with the request's own bytes (as rplab.synthetic does)."""

    unary: dict[str, Answer] = field(default_factory=dict)
    calls: list[Received] = field(default_factory=list)

    def calls_to(self, path: str) -> list[Received]:
        return [call for call in self.calls if call.path == path]

    async def relay(self, path: str, data: bytes, context: Any) -> bytes:
        self.calls.append(Received(path, data))
        answer = self.unary.get(path)
        return data if answer is None else await answer(data, context)


class HookedCalls:
    """A hook service and its CRI hooks over a recording backend; `call` runs one CRI call as the proxy would."""

    def __init__(self, loop: LoopThread, base: Path, backend: RecordingBackend) -> None:
        self.loop = loop
        self.backend = backend
        options = ProxyOptions(listen_path=base / "rp.sock", runtime_path=base / "absent-containerd.sock",
                               hook_config_dir=base / "hookserver.d")
        self.service = HookService(options)
        self.runtime = StubRuntime()
        self._hooks = CriHooks(self.service, self.runtime).interceptors()

    def call(self, path: str, data: bytes) -> bytes:
        """The answer the kubelet gets (an abort raises Aborted)."""
        async def relay(request: bytes, context: Any, failing: FailureWatch | None = None) -> bytes:
            try:
                return await self.backend.relay(path, request, context)
            except Aborted as error:  # the relay lets the hook see the runtime's code before the kubelet does
                if failing is not None:
                    await failing(error.code())
                raise

        hook, context = self._hooks.get(path), FakeContext()
        return self.loop.run(hook(data, context, relay) if hook is not None else relay(data, context))  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.run(self.service.stop())
