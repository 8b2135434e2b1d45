"""The HTTP/2 frame relay (--cri-frame-relay, on by default): its parts alone and what only it does. The forwarding
and server tests run through it (the default) and again without it (test_grpc_only.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import h2.connection
import pytest
from rplab.cri import open_channel
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend
from runtimeproxy.activation import InheritedSockets, PassedSocket
from runtimeproxy.app import Proxy
from runtimeproxy.cri.backend import Backend
from runtimeproxy.cri.calls import CriCallRecorder
from runtimeproxy.cri.framerelay import (
    RESOURCE_EXHAUSTED, Upstream, _GracefulStates, _new_connection, _Pipe, _Side, status_trailers,
)
from runtimeproxy.cri.methods import cri_method_table
from runtimeproxy.cri.routes import relayed_routes
from runtimeproxy.options import ProxyOptions
from runtimeproxy.relay import relay_path_for

VERSION = "/runtime.v1.RuntimeService/Version"
RUN_POD = "/runtime.v1.RuntimeService/RunPodSandbox"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
ProxyFactory = Callable[..., Proxy]


def _message(length: int) -> bytes:
    return b"\x00" + length.to_bytes(4, "big")


def _pipe(limit: int | None) -> _Pipe:
    return _Pipe(_Side(client_side=False, on_lost=lambda side: None), 1, limit)


def test_the_limit_is_read_from_prefixes_split_across_frames() -> None:
    pipe = _pipe(limit=10)
    assert pipe.push(_message(10)[:3], 3, False) is None
    assert pipe.push(_message(10)[3:] + b"x" * 10, 12, False) is None  # one message at the limit
    assert pipe.push(_message(3) + b"abc" + _message(11)[:2], 10, False) is None
    assert pipe.push(_message(11)[2:], 3, False) == 11


def test_without_a_limit_nothing_is_measured() -> None:
    assert _pipe(limit=None).push(_message(2**31) + b"x", 6, False) is None


def test_status_trailers_percent_encode_the_message() -> None:
    assert status_trailers(RESOURCE_EXHAUSTED, "50% over\nmax") == [
        (b"grpc-status", b"8"), (b"grpc-message", b"50%25 over%0Amax")]


def test_a_goaway_either_way_leaves_the_connection_open_for_the_streams_in_flight() -> None:
    conn = _new_connection(client_side=False)
    assert isinstance(conn.state_machine, _GracefulStates)
    conn.close_connection(last_stream_id=0)
    assert conn.state_machine.state is not h2.connection.ConnectionState.CLOSED


def test_hooked_and_unknown_paths_go_to_the_grpc_server_image_calls_to_the_image_backend(tmp_path: Path) -> None:
    async def check() -> None:
        backend = Backend(tmp_path / "runtime.sock", tmp_path / "image.sock", 1024)  # channels need a loop
        router = relayed_routes(backend, cri_method_table(), {RUN_POD}, None)
        assert router(RUN_POD.encode()) is None
        assert router(b"/runtime.v1.RuntimeService/NoSuchMethod") is None
        assert router(b"/grpc.health.v1.Health/Check") is None
        version, images = router(VERSION.encode()), router(LIST_IMAGES.encode())
        assert version is not None and version.upstream.path == tmp_path / "runtime.sock"
        assert images is not None and images.upstream.path == tmp_path / "image.sock"
        assert "runtime backend" in version.unreachable("gone")
        await backend.close()

    asyncio.run(check())


def test_a_relayed_call_is_counted_and_lets_the_probe_rest(tmp_path: Path) -> None:
    async def check() -> None:
        backend = Backend(tmp_path / "runtime.sock", tmp_path / "runtime.sock", 1024)
        recorder = CriCallRecorder()
        route = relayed_routes(backend, cri_method_table(), set(), recorder)(VERSION.encode())
        assert route is not None
        before = backend.runtime.answered_at
        route.ended(VERSION.encode(), 0, 0.001)
        assert backend.runtime.answered_at > before
        recorder.fold()
        assert recorder.calls[("runtime.v1.RuntimeService", "Version", "OK")] == 1
        await backend.close()

    asyncio.run(check())


def test_upstream_connect_answers_none_when_nothing_serves(tmp_path: Path) -> None:
    assert asyncio.run(Upstream(tmp_path / "nothing.sock").connect()) is None


def test_relayed_calls_reach_the_backend_and_the_grpc_server_stays_private(
    start_proxy: ProxyFactory, synthetic: SyntheticBackend
) -> None:
    proxy = start_proxy(runtime_path=synthetic.path)
    listen = proxy.options.listen_path
    with open_channel(listen) as channel:
        assert channel.unary_unary(VERSION)(b"v", timeout=10) == b"v"
    private = relay_path_for(listen)
    assert private.exists() and private.stat().st_mode & 0o777 == 0o600
    assert listen.stat().st_mode & 0o777 == 0o660
    assert proxy.frontend.calls_started >= 1  # type: ignore[attr-defined]


def test_under_socket_activation_the_frame_relay_serves_the_inherited_socket(
    loop_thread: LoopThread, synthetic: SyntheticBackend, tmp_path: Path
) -> None:
    path = tmp_path / "rp.sock"
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # systemd's copy
    held.bind(str(path))
    held.listen()
    options = ProxyOptions(listen_path=path, runtime_path=synthetic.path, hook_config_dir=tmp_path / "hooks",
                           frame_relay=True)
    proxy = Proxy(options, inherited=InheritedSockets([PassedSocket(os.dup(held.fileno()), "cri")]))
    loop_thread.run(proxy.start())
    try:
        with open_channel(path) as channel:
            assert channel.unary_unary(VERSION)(b"a", timeout=10) == b"a"
            health = channel.unary_unary("/grpc.health.v1.Health/Check")
            assert health(b"", timeout=10) is not None  # the gRPC server's own service, behind the relay
    finally:
        loop_thread.run(proxy.stop(1))
    assert path.exists()  # systemd's socket stays
    held.close()


def test_the_backend_lost_mid_call_ends_it_unavailable_in_the_grpc_servers_words(
    start_proxy: ProxyFactory, loop_thread: LoopThread, tmp_path: Path
) -> None:
    backend_path = tmp_path / "vanishing.sock"

    async def serve() -> asyncio.Server:
        async def read_then_vanish(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)  # the preface and the first frames, then the connection is lost
            writer.close()

        return await asyncio.start_unix_server(read_then_vanish, str(backend_path))

    server = loop_thread.run(serve())
    try:
        proxy = start_proxy(runtime_path=backend_path)
        with open_channel(proxy.options.listen_path) as channel, pytest.raises(grpc.RpcError) as raised:
            channel.unary_unary(VERSION)(b"", timeout=10)
    finally:
        server.close()
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert f"runtime backend unix://{backend_path} is unreachable" in (raised.value.details() or "")
