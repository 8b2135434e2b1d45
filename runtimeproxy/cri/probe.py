"""The liveness probe's call: one CRI `Version` on a short HTTP/2 connection of its own, framed by hand.

Why not a call on the proxy's gRPC channel: on an idle proxy one grpc call wakes grpc's event-engine
threads some sixty times (~1.7 ms of CPU here), which was most of what an idle proxy spent. This is the same
request on the wire (connection preface, SETTINGS, one HEADERS + DATA with an empty `VersionRequest`, the
probe's marker in the metadata), answered when the backend's response HEADERS for the stream arrive: the
CRI service ran the call, not just the transport (a wedged containerd still sends its SETTINGS). Nothing is
decoded beyond frame headers; the connection is closed after the answer. Unix sockets only, as every
backend endpoint is.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _HEADERS, _DATA = 0x4, 0x1, 0x0
_END_STREAM, _END_HEADERS = 0x1, 0x4
_STREAM = 1
_FRAME_HEADER_BYTES = 9
_READ_BYTES = 64 * 1024


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """HPACK: a literal header field without indexing, new name (no table state on either side)."""
    assert len(name) < 127 and len(value) < 127  # one-byte lengths
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


def probe_request(path: str, metadata: tuple[tuple[str, str], ...]) -> bytes:
    """Everything the probe writes: preface, SETTINGS, the call's HEADERS and its one empty message."""
    fields = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
              (b":authority", b"localhost"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
              *((key.encode(), value.encode()) for key, value in metadata)]
    block = b"".join(_literal(name, value) for name, value in fields)
    empty_message = b"\x00\x00\x00\x00\x00"  # gRPC length-prefixed message: not compressed, 0 bytes
    return (_PREFACE + _frame(_SETTINGS, 0, 0, b"") + _frame(_HEADERS, _END_HEADERS, _STREAM, block)
            + _frame(_DATA, _END_STREAM, _STREAM, empty_message))


def _has_answer(received: bytes) -> bool:
    """Whether the frames received so far hold the response HEADERS of the probe's stream."""
    offset = 0
    while offset + _FRAME_HEADER_BYTES <= len(received):
        header = received[offset:offset + _FRAME_HEADER_BYTES]
        if header[3] == _HEADERS and int.from_bytes(header[5:9], "big") & 0x7FFFFFFF == _STREAM:
            return True
        offset += _FRAME_HEADER_BYTES + int.from_bytes(header[:3], "big")
    return False


async def answers(path: Path, request: bytes, timeout: float) -> bool:
    """Whether the backend at `path` answered `request` within `timeout`. OSError (refused, reset, closed
    before answering) means no backend there to answer. A bare non-blocking socket on the loop: the
    cheapest way asyncio has (no transport, no stream objects)."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.setblocking(False)
        try:
            async with asyncio.timeout(timeout):
                await loop.sock_connect(connection, str(path))
                await loop.sock_sendall(connection, request)
                received = b""
                while not _has_answer(received):
                    data = await loop.sock_recv(connection, _READ_BYTES)
                    if not data:
                        raise ConnectionResetError("the backend closed the connection before answering")
                    received += data
                return True
        except TimeoutError:
            return False
