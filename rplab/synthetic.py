"""A synthetic raw-bytes CRI backend: answers at once with whatever it is told to.

It stands in for containerd where the real one cannot show something (server
streaming, mid-stream errors, cancellation, huge messages, instant answers) and lets
the tests and the benchmark see exactly what the proxy sent upstream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from runtimeproxy.cri.backend import PROBE_METADATA_KEY
from runtimeproxy.endpoints import grpc_target
from runtimeproxy.cri.limits import burst_options, metadata_limit_options
from runtimeproxy.cri.methods import Kind, cri_method_table, unknown_method

UnaryBehaviour = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]
StreamBehaviour = Callable[[bytes, grpc.aio.ServicerContext], AsyncIterator[bytes]]

MAX_MESSAGE_BYTES = 512 * 1024 * 1024


@dataclass
class RecordedCall:
    path: str
    request: bytes
    metadata: dict[str, str | bytes]
    time_remaining: float | None


@dataclass
class SyntheticBackend:
    path: Path
    # Per-method behaviours; a method without one echoes its request (streams echo once).
    unary: dict[str, UnaryBehaviour] = field(default_factory=dict)
    streams: dict[str, StreamBehaviour] = field(default_factory=dict)
    record: bool = True
    calls: list[RecordedCall] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    cancel_seen: threading.Event = field(default_factory=threading.Event)
    _server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server(options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            *metadata_limit_options(),
            *burst_options(),
        ])
        server.add_generic_rpc_handlers((_Handler(self),))
        server.add_insecure_port(grpc_target(self.path))
        await server.start()
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    def calls_to(self, path: str) -> list[RecordedCall]:
        return [call for call in self.calls if call.path == path]

    def _remember(self, path: str, request: bytes, context: grpc.aio.ServicerContext) -> None:
        if self.record and not _is_probe(context):
            metadata = dict(context.invocation_metadata() or ())
            self.calls.append(RecordedCall(path, request, metadata, context.time_remaining()))

    def _note_cancel(self, path: str, context: grpc.aio.ServicerContext) -> None:
        if not _is_probe(context):
            self.cancelled.append(path)
            self.cancel_seen.set()


def _is_probe(context: grpc.aio.ServicerContext) -> bool:
    """The proxy's liveness probes are not calls a test made."""
    return any(key == PROBE_METADATA_KEY for key, _ in context.invocation_metadata() or ())


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, backend: SyntheticBackend) -> None:
        self._backend = backend
        self._table = cri_method_table()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = self._table.get(details.method) or unknown_method(details.method)
        if method is None:
            return None
        if method.kind is Kind.UNARY_UNARY:
            return grpc.unary_unary_rpc_method_handler(self._unary(method.path))
        if method.kind is Kind.UNARY_STREAM:
            return grpc.unary_stream_rpc_method_handler(self._stream(method.path))
        return grpc.stream_stream_rpc_method_handler(self._bidi(method.path))

    def _unary(self, path: str) -> UnaryBehaviour:
        backend = self._backend

        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            backend._remember(path, request, context)
            behaviour = backend.unary.get(path)
            try:
                return await behaviour(request, context) if behaviour else request
            except asyncio.CancelledError:
                backend._note_cancel(path, context)
                raise

        return answer

    def _stream(self, path: str) -> StreamBehaviour:
        backend = self._backend

        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            backend._remember(path, request, context)
            behaviour = backend.streams.get(path)
            try:
                if behaviour is None:
                    yield request
                    return
                async for message in behaviour(request, context):
                    yield message
            except asyncio.CancelledError:
                backend._note_cancel(path, context)
                raise

        return answer

    def _bidi(self, path: str) -> Callable[..., AsyncIterator[bytes]]:
        backend = self._backend

        async def answer(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            async for request in requests:
                backend._remember(path, request, context)
                yield request

        return answer


# --- canned CRI answers, for the benchmark -------------------------------------------------

RESPONSE_BYTES_KEY = "x-response-bytes"  # ListContainers: about this many bytes back
EVENT_COUNT_KEY = "x-events"  # GetContainerEvents: this many events, then the end


def list_containers_response(size: int) -> bytes:
    """A valid runtime.v1 ListContainersResponse of about `size` bytes."""
    from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

    container = cri.Container(
        id="c" * 64, pod_sandbox_id="p" * 64, metadata=cri.ContainerMetadata(name="app"),
        image=cri.ImageSpec(image="localhost/runtimeproxy/busybox:1.0"), state=cri.CONTAINER_RUNNING,
        labels={f"label-{n}": "x" * 40 for n in range(8)}, annotations={"note": "y" * 200},
    )
    one = len(container.SerializeToString()) + 4
    response = cri.ListContainersResponse(containers=[container] * max(1, -(-size // one)))
    return response.SerializeToString()


def _metadata_int(context: grpc.aio.ServicerContext, key: str, default: int) -> int:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return int(value)
    return default


def install_benchmark_answers(backend: SyntheticBackend) -> None:
    from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

    version = cri.VersionResponse(
        version="0.1.0", runtime_name="synthetic", runtime_version="1.0", runtime_api_version="v1"
    ).SerializeToString()
    status = cri.StatusResponse(status=cri.RuntimeStatus(conditions=[
        cri.RuntimeCondition(type="RuntimeReady", status=True),
        cri.RuntimeCondition(type="NetworkReady", status=True),
    ])).SerializeToString()
    event = cri.ContainerEventResponse(
        container_id="c" * 64, container_event_type=cri.CONTAINER_STARTED_EVENT, created_at=1
    ).SerializeToString()
    lists: dict[int, bytes] = {}

    async def answer_version(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return version

    async def answer_status(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return status

    async def answer_list(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        size = _metadata_int(context, RESPONSE_BYTES_KEY, 1024)
        if size not in lists:
            lists[size] = list_containers_response(size)
        return lists[size]

    async def answer_events(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(_metadata_int(context, EVENT_COUNT_KEY, 1000)):
            yield event

    for version_name in ("runtime.v1", "runtime.v1alpha2"):
        backend.unary[f"/{version_name}.RuntimeService/Version"] = answer_version
        backend.unary[f"/{version_name}.RuntimeService/Status"] = answer_status
        backend.unary[f"/{version_name}.RuntimeService/ListContainers"] = answer_list
    backend.streams["/runtime.v1.RuntimeService/GetContainerEvents"] = answer_events


async def _serve(path: Path) -> None:
    import signal

    backend = SyntheticBackend(path, record=False)
    install_benchmark_answers(backend)
    await backend.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await backend.stop(0)


def main(argv: list[str] | None = None) -> int:
    """`python -m rplab.synthetic --socket PATH`: the benchmark's instant backend."""
    from runtimeproxy.usage import OneLineParser

    parser = OneLineParser(prog="python -m rplab.synthetic")
    parser.add_argument("--socket", type=Path, required=True)
    asyncio.run(_serve(parser.parse_args(argv).socket))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
