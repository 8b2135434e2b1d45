"""The liveness probe's hand-framed call (runtimeproxy.cri.probe) against a real gRPC server, a silent socket
and no socket at all."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest

from rplab.loop import LoopThread
from runtimeproxy.cri import probe
from runtimeproxy.cri.backend import PROBE_METADATA_KEY, PROBE_PATH

REQUEST = probe.probe_request(PROBE_PATH, ((PROBE_METADATA_KEY, "1"),))


class _Version(grpc.GenericRpcHandler):
    """Answers Version with `code`, recording each call's metadata and request."""

    def __init__(self, code: grpc.StatusCode = grpc.StatusCode.OK) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.code = code

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        async def version(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            self.calls.append((dict(context.invocation_metadata() or ()), request))
            if self.code is not grpc.StatusCode.OK:
                await context.abort(self.code, "no")
            return b"\x0a\x020.1"
        return grpc.unary_unary_rpc_method_handler(version) if details.method == PROBE_PATH else None


async def _served(path: Path, handler: _Version) -> bool:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    try:
        return await probe.answers(path, REQUEST, timeout=5)
    finally:
        await server.stop(0)


@pytest.mark.parametrize("code", [grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED])
def test_a_grpc_server_runs_the_call_and_any_answer_counts(
    loop_thread: LoopThread, tmp_path: Path, code: grpc.StatusCode
) -> None:
    handler = _Version(code)
    assert loop_thread.run(_served(tmp_path / "b.sock", handler)) is True
    [(metadata, request)] = handler.calls
    assert metadata[PROBE_METADATA_KEY] == "1" and request == b""


def test_a_socket_that_never_answers_is_no_answer(loop_thread: LoopThread, tmp_path: Path) -> None:
    path = tmp_path / "frozen.sock"
    with socket.socket(socket.AF_UNIX) as listening:  # accepted by the kernel, never read: like SIGSTOP
        listening.bind(str(path))
        listening.listen()
        assert loop_thread.run(probe.answers(path, REQUEST, timeout=0.2)) is False


def test_no_backend_is_a_connection_error(loop_thread: LoopThread, tmp_path: Path) -> None:
    with pytest.raises(OSError):
        loop_thread.run(probe.answers(tmp_path / "none.sock", REQUEST, timeout=5))


def test_a_backend_that_hangs_up_is_a_connection_error(loop_thread: LoopThread, tmp_path: Path) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def run() -> None:
        server = await asyncio.start_unix_server(hang_up, str(tmp_path / "b.sock"))
        async with server:
            await probe.answers(tmp_path / "b.sock", REQUEST, timeout=5)

    with pytest.raises(ConnectionError):
        loop_thread.run(run())
