"""runtimeproxy.relay: a gRPC server fed from an inherited socket, and two servers taking turns on one socket."""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rplab.cri import open_channel
from rplab.loop import LoopThread
from runtimeproxy.relay import GrpcListenSocket, relay_path_for


@pytest.fixture
def inherited(tmp_path: Path) -> Iterator[tuple[Path, socket.socket]]:
    """What systemd holds: a listening socket at the public path, outliving every server."""
    path = tmp_path / "rp.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(128)
    yield path, sock
    sock.close()


class HealthServer:
    """A gRPC health server on the inherited socket (a proxy process's life, in small)."""

    def __init__(self, loop_thread: LoopThread, path: Path, sock: socket.socket) -> None:
        self._loop_thread = loop_thread
        self.listen = GrpcListenSocket(path, 0o660, socket.socket(fileno=os.dup(sock.fileno())))
        self.server = loop_thread.run(self._start())

    async def _start(self) -> grpc.aio.Server:
        self.server = grpc.aio.server()  # made on the loop it runs on
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), self.server)
        self.listen.bind(self.server)
        await self.server.start()
        await self.listen.start()
        return self.server

    def stop(self) -> None:
        self._loop_thread.run(self._stop())

    async def _stop(self) -> None:
        await self.listen.stop_accepting()
        await self.server.stop(1)
        self.listen.release()


def check(path: Path, timeout: float = 10) -> int:
    with open_channel(path) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status


def test_a_grpc_server_serves_the_inherited_socket_through_a_private_one(
        loop_thread: LoopThread, inherited: tuple[Path, socket.socket]) -> None:
    path, sock = inherited
    server = HealthServer(loop_thread, path, sock)
    private = relay_path_for(path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert check(path) == health_pb2.HealthCheckResponse.SERVING
    server.stop()
    assert not private.exists() and path.exists()  # the public socket is systemd's: left in place


def test_a_call_made_between_two_servers_waits_and_is_answered_by_the_second(
        loop_thread: LoopThread, inherited: tuple[Path, socket.socket]) -> None:
    path, sock = inherited
    HealthServer(loop_thread, path, sock).stop()
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(check(path)))
    caller.start()  # no server: the connection waits in the inherited socket's backlog
    caller.join(0.5)
    assert caller.is_alive() and not answers
    second = HealthServer(loop_thread, path, sock)
    caller.join(10)
    assert answers == [health_pb2.HealthCheckResponse.SERVING]
    second.stop()
