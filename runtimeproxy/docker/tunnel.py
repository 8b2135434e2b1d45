"""After a `101` upgrade: raw bytes both ways between the client and dockerd, half-close respected.

The two connections' transports are taken from their streams and each given a `_Side` protocol that writes
what it reads straight into the other transport: the loop's callbacks carry the bytes, with no task, stream
buffer or drain per chunk (an exec or attach is one tunnel, and most carry a few bytes). Backpressure: when a
transport's write buffer is full, the other side stops reading until it drains. When a side's read ends
(EOF) the peer's write side is shut (`write_eof`), so e.g. stdin EOF reaches the container while its output
still flows back; the tunnel ends when both directions ended. A connection error on either side, or data
for a side that is already closed, ends both.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

READ_CHUNK_BYTES = 64 * 1024


@dataclass
class TunnelEnd:
    """One side of the tunnel: its streams, plus bytes already read from it (and whether it hit EOF)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    early_bytes: bytes = b""
    early_eof: bool = False


def _unread(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """What the stream holds that nobody read yet, and whether it saw EOF; the stream is left empty.

    asyncio has no public way to take a stream's buffer without awaiting, and its transport is about to
    get another protocol, so the bytes are taken here (the buffer is a bytearray in every CPython 3)."""
    buffer: bytearray = getattr(reader, "_buffer")
    data = bytes(buffer)
    buffer.clear()
    return data, reader.at_eof()  # with the buffer empty: whether EOF was fed


class _Side(asyncio.Protocol):
    """One connection of the tunnel: what it reads goes to the peer's transport."""

    def __init__(self, transport: asyncio.Transport, finished: asyncio.Future[None]) -> None:
        self.transport = transport
        self.peer: _Side = self
        self.read_ended = False
        self._finished = finished

    def data_received(self, data: bytes) -> None:
        sink = self.peer.transport
        if sink.is_closing():
            self._finish()  # the peer is gone: nothing more can be delivered
        else:
            sink.write(data)

    def eof_received(self) -> bool:
        self.end_read()
        return True  # our write side stays open: the other direction may still flow

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._finish()
        else:
            self.end_read()

    def pause_writing(self) -> None:
        """Our write buffer is full: the peer stops reading until it drains."""
        if not self.peer.transport.is_closing():
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()

    def end_read(self) -> None:
        """Nothing more comes from this side: shut the peer's write side; the tunnel ends with both done."""
        if self.read_ended:
            return
        self.read_ended = True
        sink = self.peer.transport
        if sink.can_write_eof() and not sink.is_closing():
            sink.write_eof()
        if self.peer.read_ended:
            self._finish()

    def _finish(self) -> None:
        if not self._finished.done():
            self._finished.set_result(None)


def _take_over(end: TunnelEnd, finished: asyncio.Future[None]) -> tuple[_Side, bytes, bool]:
    """Move `end`'s transport to a `_Side`; the bytes read from it but not yet relayed, and its EOF."""
    transport = cast(asyncio.Transport, end.writer.transport)  # uvloop's are not asyncio.Transport subclasses
    unread, eof = _unread(end.reader)
    failed = end.reader.exception() is not None
    side = _Side(transport, finished)
    transport.set_protocol(side)
    if failed:
        side.connection_lost(ConnectionError("connection failed before the tunnel"))
    return side, end.early_bytes + unread, end.early_eof or eof


async def run_tunnel(client: TunnelEnd, upstream: TunnelEnd) -> None:
    """Relay both ways until both directions ended, or either side failed; the caller closes both."""
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    client_side, client_bytes, client_eof = _take_over(client, finished)
    upstream_side, upstream_bytes, upstream_eof = _take_over(upstream, finished)
    client_side.peer, upstream_side.peer = upstream_side, client_side
    for side, early_bytes, early_eof in ((client_side, client_bytes, client_eof),
                                         (upstream_side, upstream_bytes, upstream_eof)):
        if early_bytes:
            side.data_received(early_bytes)
        if early_eof or side.transport.is_closing():
            side.end_read()
        elif not side.transport.is_reading():
            side.transport.resume_reading()  # the stream may have paused it (its buffer was full)
    await finished
