"""The websocket client that follows streaming URLs, against a scripted server on a local socket."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from rplab.streaming import CHANNEL_PROTOCOL, StreamingError, WebSocket, open_attach, run_exec

UPGRADE = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Protocol: " + CHANNEL_PROTOCOL.encode() + b"\r\n\r\n")


def frame(payload: bytes, opcode: int = 0x2) -> bytes:
    header = bytes([0x80 | opcode])
    if len(payload) < 126:
        return header + bytes([len(payload)]) + payload
    return header + bytes([126]) + struct.pack("!H", len(payload)) + payload


@pytest.fixture
def server() -> Iterator[Callable[[bytes], str]]:
    """serve(script) -> URL: the next connection gets ``script`` once its request head arrived."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve(script: bytes) -> str:
        def run() -> None:
            connection, _ = listener.accept()
            with connection:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += connection.recv(4096)
                requests.append(head)
                connection.sendall(script)
                connection.recv(4096)  # the client's close frame (or EOF)

        threading.Thread(target=run, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}/exec/token"

    yield serve
    listener.close()
    for head in requests:
        assert b"Sec-WebSocket-Protocol: " + CHANNEL_PROTOCOL.encode() in head


def test_exec_collects_each_channel_until_close(server: Callable[[bytes], str]) -> None:
    script = UPGRADE + frame(b"\x01") + frame(b"\x01out\n") + frame(b"\x02" + b"e" * 300) + frame(b"\x03{}") + frame(b"", 0x8)
    session = run_exec(server(script))
    assert session.handshake.status == 101
    assert session.channels == {1: b"out\n", 2: b"e" * 300, 3: b"{}"}


def test_a_refused_upgrade_is_an_answer_with_its_body(server: Callable[[bytes], str]) -> None:
    script = b"HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\n\r\n404 page not found\n"
    session = open_attach(server(script))
    assert (session.handshake.status, session.handshake.body) == (404, b"404 page not found\n")


def test_fragmented_messages_are_a_protocol_error(server: Callable[[bytes], str]) -> None:
    with WebSocket(server(UPGRADE + b"\x02\x01\x01")) as ws, pytest.raises(StreamingError):
        ws.receive()
