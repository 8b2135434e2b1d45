"""runtimeproxy.greeting: a thread greets every connection on a listening unix socket with the HTTP/2 server preface
and keeps it unread until the frame relay takes it over or the start fails (real sockets, raw clients)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy.activation import ActivationError, InheritedSockets, PassedSocket
from runtimeproxy.cri import h2frames as wire
from runtimeproxy.greeting import SERVER_PREFACE, Greeting, greet_inherited
from runtimeproxy.options import ProxyOptions

# A gRPC client's first bytes: the connection preface and its SETTINGS.
CLIENT_FIRST_BYTES = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[socket.socket]:
    """A listening socket as systemd passes it (the proxy's copy is non-blocking, as activation adopts it)."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o755)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(directory / "rp.sock"))
    os.chmod(directory / "rp.sock", 0o660)
    sock.listen()
    sock.setblocking(False)
    yield sock
    sock.close()


def caller(listening: socket.socket) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(listening.getsockname())
    return client


def greeting_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "early-greeting"]


def test_a_caller_gets_the_servers_settings_at_once_waiting_or_new(listening: socket.socket) -> None:
    waiting = caller(listening)  # in the backlog before the greeting began
    greeting = Greeting(listening)
    greeting.start()
    try:
        started = time.monotonic()
        new = caller(listening)
        assert waiting.recv(64) == SERVER_PREFACE == new.recv(64)
        assert time.monotonic() - started < 1
        assert SERVER_PREFACE == wire.frame(wire.SETTINGS, 0, 0)  # an empty SETTINGS frame, as the relay writes it
    finally:
        greeting.close()
    waiting.close()
    new.close()


def test_handover_stops_the_thread_and_gives_the_connections_unread(listening: socket.socket) -> None:
    greeting = Greeting(listening)
    greeting.start()
    first, second = caller(listening), caller(listening)
    first.sendall(CLIENT_FIRST_BYTES)
    assert first.recv(64) == SERVER_PREFACE == second.recv(64)
    greeted = greeting.handover()
    assert not greeting_threads()
    assert len(greeted) == 2 and all(not each.getblocking() for each in greeted)
    assert [each.recv(64) for each in greeted if _peer_sent(each)] == [CLIENT_FIRST_BYTES]  # nothing was read
    later = caller(listening)  # nobody greets it: it waits for the relay's accept
    later.settimeout(0.3)
    with pytest.raises(TimeoutError):
        later.recv(64)
    assert greeting.handover() == []  # a second handover has nothing: the connections are the relay's
    for each in (*greeted, first, second, later):
        each.close()


def _peer_sent(connection: socket.socket) -> bool:
    try:
        return bool(connection.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False


def test_close_ends_the_greeted_connections_and_the_thread(listening: socket.socket) -> None:
    greeting = Greeting(listening)
    greeting.start()
    waiting = caller(listening)
    assert waiting.recv(64) == SERVER_PREFACE
    greeting.close()
    assert not greeting_threads()
    assert waiting.recv(64) == b""  # EOF, as at the caller's own deadline
    greeting.close()  # again: nothing left
    waiting.close()


def test_a_caller_that_left_before_its_greeting_is_dropped(listening: socket.socket) -> None:
    gone = caller(listening)
    gone.close()
    greeting = Greeting(listening)
    greeting.start()
    stays = caller(listening)
    assert stays.recv(64) == SERVER_PREFACE
    greeted = greeting.handover()
    assert len(greeted) == 1  # its greeting found the peer gone (EPIPE)
    for each in (*greeted, stays):
        each.close()


def _passed(listening: socket.socket) -> InheritedSockets:
    return InheritedSockets([PassedSocket(os.dup(listening.fileno()), "cri")])


def test_only_the_frame_relays_passed_socket_is_greeted(listening: socket.socket) -> None:
    path = Path(listening.getsockname())
    for options in (ProxyOptions(listen_path=path, backend_mode="Docker"),
                    ProxyOptions(listen_path=path, frame_relay=False)):
        inherited = _passed(listening)
        assert greet_inherited(options, inherited) is None
        assert inherited  # left for the frontend to take, as before
    assert greet_inherited(ProxyOptions(listen_path=path), InheritedSockets.none()) is None
    greeting = greet_inherited(ProxyOptions(listen_path=path), inherited := _passed(listening))
    assert greeting is not None and not inherited
    try:
        waiting = caller(listening)
        assert waiting.recv(64) == SERVER_PREFACE
    finally:
        greeting.close()
        greeting.listening.close()
    waiting.close()


def test_a_passed_socket_the_proxy_would_refuse_is_never_greeted(listening: socket.socket) -> None:
    path = Path(listening.getsockname())
    os.chmod(path, 0o666)
    with pytest.raises(ActivationError, match="more open than 0660"):
        greet_inherited(ProxyOptions(listen_path=path), _passed(listening))
    assert not greeting_threads()
