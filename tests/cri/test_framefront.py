"""The frame relay's front: callers paired with backend connections of their own, diverted calls written into the
same connection, callers served alone while no backend answers and paired again once one does."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import h2.config
import h2.connection
import pytest

from rplab.cri import metadata_limit_options, open_channel
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend
from runtimeproxy.activation import InheritedSockets, PassedSocket
from runtimeproxy.app import Proxy
from runtimeproxy.cri import h2frames as wire
from runtimeproxy.cri.framefront import FrameRelay
from runtimeproxy.greeting import SERVER_PREFACE, Greeting, greet_inherited
from runtimeproxy.listener import SocketInUseError, lock_socket_path
from runtimeproxy.options import ProxyOptions
from tests.kits.h2caller import RawCaller

VERSION = "/runtime.v1.RuntimeService/Version"
LIST_CONTAINERS = "/runtime.v1.RuntimeService/ListContainers"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
MiB = 1024 * 1024
ProxyFactory = Callable[..., Proxy]


def _relay(proxy: Proxy) -> FrameRelay:
    relay = proxy.frontend._front  # type: ignore[attr-defined]
    assert isinstance(relay, FrameRelay)
    return relay


def _small_window_channel(path: Path) -> grpc.Channel:
    """A caller that never grows its windows past HTTP/2's 64 KiB: every answer runs into them."""
    return grpc.insecure_channel(f"unix://{path}", options=[
        ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
        ("grpc.http2.bdp_probe", 0), *metadata_limit_options()])


def test_diverted_and_relayed_answers_share_the_callers_window(
    start_proxy: ProxyFactory, synthetic: SyntheticBackend, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """Image calls to another socket are diverted (h2 legs), runtime calls relayed on the pair: large answers of
    both at once on one connection keep within its window, each arriving whole."""
    images = SyntheticBackend(tmp_path / "images.sock")
    containers, image_list = os.urandom(3 * MiB), os.urandom(3 * MiB)

    async def many_containers(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return containers

    async def many_images(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return image_list

    synthetic.unary[LIST_CONTAINERS] = many_containers
    images.unary[LIST_IMAGES] = many_images
    loop_thread.run(images.start())
    try:
        proxy = start_proxy(runtime_path=synthetic.path, image_path=images.path, frame_relay=True)
        with _small_window_channel(proxy.options.listen_path) as channel, ThreadPoolExecutor(8) as pool:
            calls = [pool.submit(channel.unary_unary(path), b"", timeout=60)
                     for _ in range(6) for path in (LIST_CONTAINERS, LIST_IMAGES)]
            answers = [call.result() for call in calls]
            front, = _relay(proxy)._fronts  # all through one connection, now idle
            assert front.pairs_with_backend and front.held_data == 0 and not front.held
        assert answers == [containers, image_list] * 6
        assert len(images.calls_to(LIST_IMAGES)) >= 6 and len(synthetic.calls_to(LIST_CONTAINERS)) >= 6  # and the store's
    finally:
        loop_thread.run(images.stop(0))


def test_a_caller_served_alone_is_paired_once_the_backend_answers(
    start_proxy: ProxyFactory, loop_thread: LoopThread, tmp_path: Path
) -> None:
    path = tmp_path / "late.sock"
    proxy = start_proxy(runtime_path=path, frame_relay=True)
    backend = SyntheticBackend(path)
    with _small_window_channel(proxy.options.listen_path) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            channel.unary_unary(VERSION)(b"", timeout=10)
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
        assert f"runtime backend unix://{path} is unreachable" in (raised.value.details() or "")
        assert not any(front.pairs_with_backend for front in _relay(proxy)._fronts)
        loop_thread.run(backend.start())
        try:
            deadline = time.monotonic() + 20
            while not any(front.pairs_with_backend for front in _relay(proxy)._fronts):
                assert time.monotonic() < deadline, "the caller was never paired"
                try:
                    channel.unary_unary(VERSION)(b"v", timeout=10)
                except grpc.RpcError:
                    pass  # UNAVAILABLE while the proxy's own channel reconnects
                time.sleep(0.1)
            assert channel.unary_unary(VERSION)(b"paired", timeout=10) == b"paired"
        finally:
            loop_thread.run(backend.stop(0))
    assert [call.request for call in backend.calls_to(VERSION)][-1] == b"paired"


def _first_frames(path: Path, method: str) -> list[tuple[int, int]]:
    """(type, flags) of the frames a raw HTTP/2 caller gets for one call, until the call ends."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", method), (":authority", "x"),
                          ("content-type", "application/grpc"), ("te", "trailers")])
    conn.send_data(1, b"\x00\x00\x00\x00\x00", end_stream=True)
    received, seen = bytearray(), []
    with socket.socket(socket.AF_UNIX) as caller:
        caller.settimeout(10)
        caller.connect(str(path))
        caller.sendall(conn.data_to_send())
        while not any(kind == wire.HEADERS and flags & wire.END_STREAM for kind, flags in seen):
            chunk = caller.recv(65536)
            assert chunk, f"closed after {seen}"
            received += chunk
            seen = [(kind, flags) for kind, flags, *_ in wire.frames(received, wire.MAX_FRAME_PAYLOAD)]
    return seen


def test_a_diverted_answer_waits_for_the_backends_settings(
    start_proxy: ProxyFactory, synthetic: SyntheticBackend, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """The server's first frame must be SETTINGS: with the paired backend slow to send its own, a diverted call's
    answer (the health service's, here the caller's first call) and its window updates wait for them."""
    slow = tmp_path / "slow.sock"

    async def serve() -> asyncio.Server:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        async def delayed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(0.5)
            up_reader, up_writer = await asyncio.open_unix_connection(str(synthetic.path))
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

        return await asyncio.start_unix_server(delayed, str(slow))

    server = loop_thread.run(serve())
    try:
        proxy = start_proxy(runtime_path=slow, frame_relay=True)
        assert _first_frames(proxy.options.listen_path, "/grpc.health.v1.Health/Check")[0] == (wire.SETTINGS, 0)
        with _small_window_channel(proxy.options.listen_path) as channel:
            assert channel.unary_unary(VERSION)(b"after", timeout=10) == b"after"
            assert any(front.pairs_with_backend for front in _relay(proxy)._fronts)
    finally:
        server.close()


def test_pings_are_answered_here_and_never_reach_the_backend(
    start_proxy: ProxyFactory, synthetic: SyntheticBackend, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """A caller's PING (grpc clients send one after every DATA they get, diverted answers' too) is answered by the
    relay: a grpc-go backend that sees pings after none of its own DATA sends the connection away
    (ENHANCE_YOUR_CALM, too_many_pings)."""
    spying = tmp_path / "spying.sock"
    to_backend = bytearray()

    async def serve() -> asyncio.Server:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: bytearray | None) -> None:
            while data := await reader.read(65536):
                if seen is not None:
                    seen += data
                writer.write(data)
                await writer.drain()
            writer.close()

        async def spy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_unix_connection(str(synthetic.path))
            await asyncio.gather(pipe(reader, up_writer, to_backend), pipe(up_reader, writer, None),
                                 return_exceptions=True)

        return await asyncio.start_unix_server(spy, str(spying))

    server = loop_thread.run(serve())
    try:
        proxy = start_proxy(runtime_path=spying, frame_relay=True)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.ping(b"12345678")
        received = bytearray()
        with socket.socket(socket.AF_UNIX) as caller:
            caller.settimeout(10)
            caller.connect(str(proxy.options.listen_path))
            caller.sendall(conn.data_to_send())
            while (wire.PING, wire.ACK) not in [(kind, flags) for kind, flags, *_ in
                                                wire.frames(received, wire.MAX_FRAME_PAYLOAD)]:
                chunk = caller.recv(65536)
                assert chunk
                received += chunk
        frames = list(wire.frames(received, wire.MAX_FRAME_PAYLOAD))
        ack = next((start, end) for kind, flags, _, start, end in frames if kind == wire.PING)
        assert received[ack[0]:ack[1]] == b"12345678"
        deadline = time.monotonic() + 10
        while len(to_backend) <= len(wire.PREFACE) and time.monotonic() < deadline:  # the caller's SETTINGS passed
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(to_backend) > len(wire.PREFACE)
        # Every connection to the backend is recorded, the proxy's own gRPC channel too (its pings are its own):
        # the caller's PING is told by its payload.
        assert b"12345678" not in to_backend
    finally:
        server.close()


def test_a_backend_that_accepts_but_never_speaks_leaves_the_caller_served_alone(
    start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    """containerd frozen by SIGSTOP: the kernel takes the connection, no SETTINGS ever come. The caller gets ours
    after BACKEND_SETTINGS_TIMEOUT_SECONDS, its own settings acknowledged, and the health service answers."""
    silent = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX) as listening:  # listens, never accepts
        listening.bind(str(silent))
        listening.listen(16)
        proxy = start_proxy(runtime_path=silent, frame_relay=True)
        started = time.monotonic()
        frames = _first_frames(proxy.options.listen_path, "/grpc.health.v1.Health/Check")
        assert frames[0] == (wire.SETTINGS, 0) and (wire.SETTINGS, wire.ACK) in frames
        assert time.monotonic() - started < 10
        with grpc.insecure_channel(f"unix://{proxy.options.listen_path}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            assert check(b"", timeout=10) is not None  # NOT_SERVING, answered by the gRPC server


def _passed_socket(path: Path) -> tuple[socket.socket, InheritedSockets]:
    """systemd's listening socket at `path`, and the copy it passes."""
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(str(path))
    os.chmod(path, 0o660)
    held.listen()
    return held, InheritedSockets([PassedSocket(os.dup(held.fileno()), "cri")])


def test_a_connection_greeted_before_the_relay_served_is_answered_and_told_to_pair_later(
    loop_thread: LoopThread, synthetic: SyntheticBackend, tmp_path: Path
) -> None:
    """runtimeproxy.greeting sent the caller our SETTINGS before the proxy started: the relay serves it alone (no
    second SETTINGS, no backend's), answers its calls, and once the backend answers sends it away (GOAWAY) to be
    paired on its next connection."""
    path = tmp_path / "rp.sock"
    held, inherited = _passed_socket(path)
    options = ProxyOptions(listen_path=path, runtime_path=synthetic.path, hook_config_dir=tmp_path / "hooks")
    greeting = greet_inherited(options, inherited)
    assert greeting is not None
    caller = RawCaller(path)
    assert caller.handshake() is not None
    caller.call(1, VERSION, b"early")  # waits unread in the socket while the proxy starts
    proxy = Proxy(options, inherited=inherited, greeting=greeting)
    loop_thread.run(proxy.start())
    try:
        caller.read_until((wire.HEADERS, wire.END_STREAM, 1))
        assert caller.answer(1) == (b"early", "0")
        relay = _relay(proxy)
        front, = [each for each in relay._fronts if not each.pairs_with_backend]
        caller.call(3, VERSION, b"again")  # the backend answers now: this call is answered, the caller sent away
        caller.read_until((wire.GOAWAY, 0, 0))
        caller.read_until((wire.HEADERS, wire.END_STREAM, 3))
        assert caller.answer(3) == (b"again", "0")
        assert bytes(caller.received[:len(SERVER_PREFACE)]) == SERVER_PREFACE
        assert caller.server_settings() == [(wire.SETTINGS, 0, 0)]  # ours, once: no backend's followed
        assert not front.usable
        with open_channel(path) as channel:  # the next connection is paired
            assert channel.unary_unary(VERSION)(b"paired", timeout=10) == b"paired"
            assert any(each.pairs_with_backend for each in relay._fronts)
        assert [call.request for call in synthetic.calls_to(VERSION)][-3:] == [b"early", b"again", b"paired"]
    finally:
        caller.close()
        loop_thread.run(proxy.stop(1))
        held.close()


def test_a_start_that_fails_closes_the_greeted_connections(
    loop_thread: LoopThread, synthetic: SyntheticBackend, tmp_path: Path
) -> None:
    path = tmp_path / "rp.sock"
    held, inherited = _passed_socket(path)
    options = ProxyOptions(listen_path=path, runtime_path=synthetic.path, hook_config_dir=tmp_path / "hooks")
    greeting = greet_inherited(options, inherited)
    assert isinstance(greeting, Greeting)
    caller = RawCaller(path)
    assert caller.handshake() is not None
    other = lock_socket_path(path)  # another proxy serves this socket: the start fails
    proxy = Proxy(options, inherited=inherited, greeting=greeting)
    try:
        with pytest.raises(SocketInUseError):
            loop_thread.run(proxy.start())
        loop_thread.run(proxy.stop(0))  # as runtimeproxy.lifecycle does after a failed start
        assert caller.sock.recv(65536) == b""  # EOF, as at the caller's own deadline
        assert not [thread for thread in threading.enumerate() if thread.name == "early-greeting"]
    finally:
        caller.close()
        other.release()
        held.close()
