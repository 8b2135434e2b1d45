"""One HTTP/1.1 client connection to dockerd's unix socket, framed by h11."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import h11

from runtimeproxy.docker.tunnel import READ_CHUNK_BYTES

log = logging.getLogger(__name__)

# Go's net/http default limit on a message head (dockerd and its clients use it).
MAX_HEAD_BYTES = 1024 * 1024


class DockerdUnreachable(ConnectionError):
    """dockerd's socket could not be connected to."""


class UpstreamBroken(ConnectionError):
    """dockerd closed the connection or answered something that is not HTTP/1.1."""


class ReachabilityLog:
    """One log line when dockerd becomes unreachable and one when it is back; never one per request."""

    def __init__(self) -> None:
        self._reachable: bool | None = None

    @property
    def reachable(self) -> bool | None:
        """Whether the last connection attempt reached dockerd; None before the first."""
        return self._reachable

    def update(self, reachable: bool, detail: str = "") -> None:
        if reachable == self._reachable:
            return
        if reachable and self._reachable is not None:
            log.info("dockerd is reachable again")
        elif not reachable:
            log.warning("%s; answering 503 until it is back", detail)
        self._reachable = reachable


def forget_stream_error(reader: asyncio.StreamReader) -> None:
    """Drop the traceback and context of the error asyncio keeps on a closed stream.

    That error sits in a reference cycle with the frame of the write or read that failed, and through that
    frame's callers (and the error that was being handled then) with whole request bodies: only a full
    garbage collection would free them, and an idle proxy allocates too little to trigger one.
    """
    error = reader.exception()
    while error is not None:
        error.__traceback__ = None
        error.__context__, error = None, error.__context__


class Upstream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)

    @classmethod
    async def connect(cls, socket_path: Path) -> Upstream:
        try:
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
        except OSError as error:
            reason = error.strerror or str(error)
            raise DockerdUnreachable(f"cannot reach dockerd at unix://{socket_path}: {reason}") from None
        return cls(reader, writer)

    @property
    def reusable(self) -> bool:
        """Idle, and dockerd has not closed it meanwhile."""
        return self.conn.our_state is h11.IDLE and not self.reader.at_eof() and not self.writer.is_closing()

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            try:
                self.writer.write(data)
                await self.writer.drain()
            except OSError as error:
                raise UpstreamBroken(f"writing to dockerd failed: {error}") from None

    def buffered_event(self) -> h11.Event | None:
        """The next response event if what was read already holds it, else None (no I/O)."""
        try:
            event = self.conn.next_event()
        except h11.RemoteProtocolError as error:
            if self.conn.trailing_data[1]:  # h11 saw EOF mid-message
                raise UpstreamBroken("dockerd closed the connection before its answer was complete") from None
            raise UpstreamBroken(f"dockerd sent an invalid answer: {error}") from None
        if isinstance(event, h11.ConnectionClosed):
            raise UpstreamBroken("dockerd closed the connection")
        if isinstance(event, h11.Event):
            return event
        if event is h11.PAUSED:  # h11 pauses only between exchanges, and each ends before the next is read
            raise UpstreamBroken("dockerd's connection is paused mid-exchange")
        return None  # NEED_DATA

    async def next_event(self) -> h11.Event:
        """The next response event; UpstreamBroken when dockerd hangs up or sends garbage."""
        while (event := self.buffered_event()) is None:
            try:
                data = await self.reader.read(READ_CHUNK_BYTES)
            except OSError as error:
                raise UpstreamBroken(f"reading from dockerd failed: {error}") from None
            self.conn.receive_data(data)
        return event

    async def whole_answer(self, limit_bytes: int) -> tuple[h11.Response, bytes]:
        """The answer's head (after any 1xx) and its complete body; UpstreamBroken past `limit_bytes`."""
        while not isinstance(head := await self.next_event(), h11.Response):
            pass  # 1xx before the answer
        chunks: list[bytes] = []
        size = 0
        while isinstance(event := await self.next_event(), h11.Data):
            size += len(event.data)
            if size > limit_bytes:
                raise UpstreamBroken(f"dockerd's answer is over {limit_bytes} bytes")
            chunks.append(bytes(event.data))
        return head, b"".join(chunks)

    def finish_exchange(self) -> bool:
        """Ready the connection for the next request; False when it cannot be reused."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop may already be closed at shutdown
            self.writer.close()
        forget_stream_error(self.reader)
