"""One HTTP/1.1 client connection to dockerd's unix socket: requests framed by hand, answers read by llhttp.

llhttp (`httptools`) parses dockerd's answers in C: an answer is an `AnswerHead` (1xx heads first, if any),
its body as `bytes` chunks, then `END`. Requests are written as they come (their headers were parsed and
checked on the client side, and `headers` decided their framing). Answers without a body are told apart
by status (204, 304, 1xx) and by the request's method (HEAD); a body without a length runs to EOF.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from pathlib import Path

import httptools

from runtimeproxy.docker.framing import chunk, framing_of_request, last_chunk, request_head
from runtimeproxy.docker.headers import Header
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


class AnswerHead:
    """A status line and headers from dockerd (names and order as received)."""

    __slots__ = ("status", "reason", "headers")

    def __init__(self, status: int, reason: bytes, headers: list[Header]) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers


class _End:
    def __repr__(self) -> str:
        return "END"


END = _End()  # the answer's body is complete
AnswerEvent = AnswerHead | bytes | _End


class _HeadOnly(Exception):
    """Raised from the parser's callback to stop at the head of an answer that has no body (HEAD)."""


class _AnswerReader:
    """llhttp's callbacks, turned into a queue of answer events."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.events: collections.deque[AnswerEvent] = collections.deque()
        self.head_only = False  # the request was HEAD: the answer has no body, whatever its headers say
        self.head_bytes = 0  # bytes fed while the head is incomplete
        self.in_head = True
        self.until_eof = False  # the body runs to EOF
        self.keep_alive = False
        self._reason = b""
        self._headers: list[Header] = []

    def on_message_begin(self) -> None:
        self.in_head, self._reason, self._headers = True, b"", []

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.events.append(AnswerHead(status, self._reason, self._headers))
        if status < 200:
            return
        self.in_head = False
        if self.head_only:
            self.keep_alive = self.parser.should_keep_alive()
            self.events.append(END)
            raise _HeadOnly
        self.until_eof = status not in (204, 304) and _unframed(self._headers)

    def on_body(self, data: bytes) -> None:
        self.events.append(data)

    def on_message_complete(self) -> None:
        if self.in_head:  # a 1xx head: the answer follows
            return
        self.keep_alive = self.parser.should_keep_alive() and not self.until_eof
        self.events.append(END)


def _unframed(headers: list[Header]) -> bool:
    """Neither Content-Length nor Transfer-Encoding: the body is delimited by EOF."""
    for name, _ in headers:
        lowered = name.lower()
        if lowered == b"content-length" or lowered == b"transfer-encoding":
            return False
    return True


class Upstream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._answer = _AnswerReader()
        self._chunked = False  # the request body being sent is chunked
        self._request_done = False
        self._answer_done = False
        self._idle = True
        self._eof = False
        self._upgraded = b""  # bytes after a 101 head
        self._switched = False

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
        return self._idle and not self.reader.at_eof() and not self.writer.is_closing()

    @property
    def request_sent(self) -> bool:
        """The request's body has been ended."""
        return self._request_done

    async def _write(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError as error:
            raise UpstreamBroken(f"writing to dockerd failed: {error}") from None

    async def send_head(self, method: bytes, target: bytes, headers: list[Header], *, body: bytes | None = None,
                        end: bool = False) -> None:
        """Write a request head (and, with `end`, `body` and the body's end in the same write)."""
        self._idle, self._request_done, self._answer_done = False, False, False
        self._answer.head_only = method == b"HEAD"
        self._chunked = framing_of_request(headers)
        data = request_head(method, target, headers)
        if body:
            data += chunk(body) if self._chunked else body
        if end:
            data += self._end_bytes(())
        await self._write(data)

    async def send_body(self, data: bytes) -> None:
        if data:  # an empty chunk would end a chunked body
            await self._write(chunk(data) if self._chunked else data)

    async def end_body(self, trailers: list[Header] | tuple[Header, ...] = ()) -> None:
        data = self._end_bytes(trailers)
        if data:
            await self._write(data)

    def _end_bytes(self, trailers: list[Header] | tuple[Header, ...]) -> bytes:
        self._request_done = True
        return last_chunk(trailers) if self._chunked else b""

    def _feed(self, data: bytes) -> None:
        answer = self._answer
        if answer.in_head:
            answer.head_bytes += len(data)
            if answer.head_bytes > MAX_HEAD_BYTES:
                raise UpstreamBroken(f"dockerd sent an invalid answer: a head over {MAX_HEAD_BYTES} bytes")
        try:
            answer.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._switched = True
            self._upgraded = data[upgrade.args[0]:]
        except httptools.HttpParserCallbackError as error:
            if not isinstance(error.__context__, _HeadOnly):
                raise
            answer.parser = httptools.HttpResponseParser(answer)  # llhttp stopped mid-message: a fresh one
        except httptools.HttpParserError as error:
            raise UpstreamBroken(f"dockerd sent an invalid answer: {error}") from None

    def buffered_event(self) -> AnswerEvent | None:
        """The next answer event if what was read already holds it, else None (no I/O)."""
        events = self._answer.events
        if events:
            event = events.popleft()
            if event is END:
                self._answer_done = True
                self._answer.head_bytes, self._answer.in_head = 0, True
            return event
        if self._eof:
            answer = self._answer
            if answer.until_eof and not answer.in_head and not self._answer_done:
                self._answer_done = True
                return END
            raise UpstreamBroken("dockerd closed the connection before its answer was complete")
        return None

    async def next_event(self) -> AnswerEvent:
        """The next answer event; UpstreamBroken when dockerd hangs up or sends garbage."""
        while (event := self.buffered_event()) is None:
            if self._switched:
                raise UpstreamBroken("dockerd switched protocols")
            try:
                data = await self.reader.read(READ_CHUNK_BYTES)
            except OSError as error:
                raise UpstreamBroken(f"reading from dockerd failed: {error}") from None
            if data:
                self._feed(data)
            else:
                self._eof = True
        return event

    def trailing_data(self) -> tuple[bytes, bool]:
        """What was read past the head of a 101 or raw-stream answer, and whether dockerd's EOF was seen:
        the tunnel starts with it."""
        body = [event for event in self._answer.events if isinstance(event, bytes)]
        self._answer.events.clear()
        return self._upgraded + b"".join(body), self._eof

    async def whole_answer(self, limit_bytes: int) -> tuple[AnswerHead, bytes]:
        """The answer's head (after any 1xx) and its complete body; UpstreamBroken past `limit_bytes`."""
        while not isinstance(head := await self.next_event(), AnswerHead) or head.status < 200:
            pass  # 1xx before the answer
        chunks: list[bytes] = []
        size = 0
        while isinstance(event := await self.next_event(), bytes):
            size += len(event)
            if size > limit_bytes:
                raise UpstreamBroken(f"dockerd's answer is over {limit_bytes} bytes")
            chunks.append(event)
        return head, b"".join(chunks)

    def finish_exchange(self) -> bool:
        """Ready the connection for the next request; False when it cannot be reused."""
        self._idle = self._request_done and self._answer_done and self._answer.keep_alive and not self._eof
        return self._idle

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop may already be closed at shutdown
            self.writer.close()
        forget_stream_error(self.reader)
