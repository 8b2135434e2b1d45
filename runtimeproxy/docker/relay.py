"""The Docker Engine API reverse proxy: one `ClientSession` per client connection.

Shaped like Go's `httputil.ReverseProxy`: read a request head (`incoming`: llhttp reads plain requests, h11
parses and checks every other one; malformed input gets h11's `400`/`431` and the connection closes; heads
are written by hand, see `framing`), forward it to dockerd on this session's own upstream connection (reused
while both sides keep the connection alive), stream the request body up and the response down chunk by
chunk, each write awaiting the peer (backpressure), nothing buffered whole. A `101` answer turns the
connection into a raw tunnel (`tunnel`), and so does dockerd's `200` + raw stream to an exec start or
attach that did not ask for an upgrade (older clients). Hooked routes (`routes`) take the `interception` seam instead:
whole JSON bodies, rewritten before and reported after; a client that hangs up while the pre step runs
(a plugin call) cancels it, and nothing reaches dockerd. dockerd unreachable → `503`, dockerd hanging
up before answering → `502`, both with Docker's `{"message": ...}` body. A client that goes away while
its answer streams (`events`, `logs -f`) closes the upstream connection, which ends the stream there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import h11

from runtimeproxy.docker.framing import BodyFraming, answer_framing, body_end, framed, response_head
from runtimeproxy.docker.headers import (
    Header,
    end_to_end,
    forwarded_request_headers,
    forwarded_response_headers,
    is_raw_stream_answer,
)
from runtimeproxy.docker.incoming import ClientRequest, PlainRequest, read_plain_request
from runtimeproxy.docker.interception import (
    MAX_HOOKED_BODY_BYTES,
    ErrorReply,
    InterceptedCall,
    Interceptor,
    UpstreamAnswer,
)
from runtimeproxy.docker.routes import RouteMatch, hooked_route, is_hijack_route
from runtimeproxy.docker.tunnel import READ_CHUNK_BYTES, TunnelEnd, run_tunnel
from runtimeproxy.docker.upstream import (
    MAX_HEAD_BYTES,
    END,
    AnswerHead,
    DockerdUnreachable,
    ReachabilityLog,
    Upstream,
    UpstreamBroken,
    forget_stream_error,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
_REQUEST_READ = (h11.DONE, h11.MIGHT_SWITCH_PROTOCOL)


def _h11_connection() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)


def _whole_body(events: list[h11.Data | h11.EndOfMessage]) -> bytes | None:
    """The request's whole body if `events` hold all of it and its end (without trailers), else None."""
    if not events or not isinstance(end := events[-1], h11.EndOfMessage) or end.headers:
        return None
    return b"".join(bytes(event.data) for event in events if isinstance(event, h11.Data))


def _connection_tokens(request: ClientRequest) -> list[bytes]:
    return [token.strip().lower() for name, value in request.headers if name.lower() == b"connection"
            for token in value.split(b",")]


class ClientGone(ConnectionError):
    """The client closed or reset its connection mid-exchange."""


class _Abandon(Exception):
    """The exchange cannot complete cleanly; close the client connection without an answer."""


class ClientSession:
    """Relays the requests of one client connection, in order, until either side closes."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        docker_socket: Path, interceptor: Interceptor, reachability: ReachabilityLog,
        on_request: Callable[[], None] = lambda: None,
        on_answered: Callable[[bytes, bytes, int | None, float], None] | None = None,
    ) -> None:
        """`on_request` is told of each request as it starts (the idle trimmer counts them); `on_answered` of
        each one's method, target, answer status (None: none was given) and seconds (the metrics)."""
        self._reader = reader
        self._writer = writer
        self._docker_socket = docker_socket
        self._interceptor = interceptor
        self._reachability = reachability
        self._on_request = on_request
        self._on_answered = on_answered
        self._answer_status: int | None = None  # set when an answer head is written
        self._answer_done = False
        self._keep_alive = True  # the client's request lets the connection carry another
        self._method = b""
        self._conn: h11.Connection | PlainRequest = _h11_connection()
        self._pending: tuple[bytes, bool] = (b"", False)  # what the client sent after the last request, its EOF
        self._upstream: Upstream | None = None
        self._client_reader: asyncio.Task[None] | None = None
        self._body_forwarded = False
        self._hijack_possible = False
        self.idle = True  # waiting for a request: safe to close on shutdown
        self.stopping = False  # set on shutdown: no further request on this connection

    async def run(self) -> None:
        try:
            while not self.stopping:
                request = await self._next_request()
                if request is None:
                    return  # the client is done
                self.idle = False
                self._on_request()
                self._method, self._answer_status, self._answer_done = request.method, None, False
                self._keep_alive = request.http_version >= b"1.1" and b"close" not in _connection_tokens(request)
                if not await self._answered_exchange(request) or not self._start_next_cycle():
                    return
                self.idle = True
        except h11.RemoteProtocolError as error:
            if not self._reader.at_eof():  # a client that hung up mid-request is not answered
                await self._answer_error(error.error_status_hint, f"malformed HTTP request: {error}", close=True)
        except (ClientGone, _Abandon, ConnectionError):
            pass
        finally:
            await self._stop_client_reader()
            self._close_upstream()
            with contextlib.suppress(RuntimeError):
                self._writer.close()
            forget_stream_error(self._reader)

    # -- the client side --------------------------------------------------------------------------------

    async def _next_request(self) -> ClientRequest | None:
        """The next request's head (llhttp for a plain one, see `incoming`; h11 otherwise); None when the
        client closed the connection between requests."""
        data, closed = self._pending
        while not data and not closed:
            data = await self._read_client()
            closed = not data
        plain = read_plain_request(data, closed, MAX_HEAD_BYTES) if data else None
        if plain is not None:
            self._conn = plain
            return plain.request
        self._conn = _h11_connection()
        if data:
            self._conn.receive_data(data)
        if closed:
            self._conn.receive_data(b"")  # h11's EOF
        event = await self._client_event()
        return ClientRequest.from_h11(event) if isinstance(event, h11.Request) else None

    async def _read_client(self) -> bytes:
        try:
            return await self._reader.read(READ_CHUNK_BYTES)
        except OSError as error:
            raise ClientGone(str(error)) from None

    async def _client_event(self) -> h11.Event:
        while True:
            event = self._conn.next_event()
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:  # h11 pauses only between exchanges, and each ends before the next is read
                raise RuntimeError("the client connection is paused mid-exchange")
            self._conn.receive_data(await self._read_client())

    async def _write(self, data: bytes) -> None:
        """Write to the client (one syscall for a small answer), awaiting it."""
        if data:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except OSError as error:
                raise ClientGone(str(error)) from None

    def _answer_head(self, status: int, reason: bytes, headers: list[Header]) -> tuple[bytes, BodyFraming]:
        """The head of the (final) answer to the client, and how its body is framed."""
        headers, framing, self._keep_alive = answer_framing(
            self._method, status, headers, self._conn.their_http_version == b"1.1", self._keep_alive)
        self._answer_status = status
        return response_head(status, reason, headers), framing

    async def _answer_error(self, status: int, message: str, *, close: bool = False) -> bool:
        """Docker's error shape; returns whether the connection may carry another request."""
        if self._answer_status is not None:
            return False  # an answer has begun: all we can do is close
        body = json.dumps({"message": message}).encode()
        headers = [(b"Content-Type", b"application/json"), (b"Content-Length", str(len(body)).encode())]
        if close:
            self._keep_alive = False
        log.debug("answering %d: %s", status, message)
        with contextlib.suppress(ClientGone):
            await self._write_whole_answer(status, headers, body)
        return self._keep_alive

    async def _write_whole_answer(self, status: int, headers: list[Header], body: bytes) -> BodyFraming:
        """An answer whose body is all here, in one write; returns how it was framed."""
        head, framing = self._answer_head(status, b"", headers)
        await self._write(head + framed(body, framing) + body_end(framing))
        self._answer_done = True
        return framing

    def _request_finished(self) -> bool:
        """Both sides of the exchange are complete and the connection may carry another (a declined upgrade
        leaves h11's client side waiting for the switch: the final answer ends that wait, as in h11)."""
        return self._answer_done and self._keep_alive and self._conn.their_state in _REQUEST_READ

    def _start_next_cycle(self) -> bool:
        """Ready for the next request, keeping what the client already sent."""
        if not self._request_finished():
            return False
        self._pending = self._conn.trailing_data
        self._method = b""
        return True

    # -- one exchange -----------------------------------------------------------------------------------

    async def _answered_exchange(self, request: ClientRequest) -> bool:
        """_exchange, told to on_answered however it ends."""
        if self._on_answered is None:
            return await self._exchange(request)
        started, self._answer_status = time.perf_counter(), None
        try:
            return await self._exchange(request)
        finally:
            self._on_answered(request.method, request.target, self._answer_status, time.perf_counter() - started)

    async def _exchange(self, request: ClientRequest) -> bool:
        """Relay one request and its answer; returns whether the connection may carry another."""
        match = hooked_route(request.method, request.target)
        if match is not None:
            return await self._hooked_exchange(request, match)
        try:
            upstream = await self._upstream_connection()
            # A request whose body has arrived whole (most: none, or a small POST's JSON) goes up in one write.
            pending = self._arrived_body_events()
            body = _whole_body(pending)
            await upstream.send_head(request.method, request.target, forwarded_request_headers(request.headers),
                                     body=body, end=body is not None)
            if body is not None:
                pending = []
        except (DockerdUnreachable, UpstreamBroken) as error:
            return await self._answer_error(503, str(error), close=True)
        self._body_forwarded = False
        self._hijack_possible = is_hijack_route(request.method, request.target)
        # The answer is relayed in this task; the client reader cancels it if the client fails or goes.
        exchange = asyncio.current_task()
        assert exchange is not None
        reader = self._client_reader = asyncio.create_task(self._forward_request_body(upstream, pending))
        relaying = True  # the reader may cancel this task only while the answer is being relayed

        def reader_done(task: asyncio.Task[None]) -> None:
            if relaying and not task.cancelled() and task.exception() is not None:
                exchange.cancel()

        reader.add_done_callback(reader_done)
        try:
            try:
                await self._relay_answer(upstream)
            finally:  # however it ended: what follows (an error answer, the cleanup) is not to be cancelled
                relaying = False
        except asyncio.CancelledError:
            failure = reader.exception() if reader.done() and not reader.cancelled() else None
            if failure is None or exchange.uncancel():
                raise  # not the reader's doing
            raise failure from None
        except UpstreamBroken as error:
            return await self._answer_error(502, str(error), close=True)
        finally:
            await self._stop_client_reader()
        return self._body_forwarded and upstream.finish_exchange() or self._drop_upstream()

    def _arrived_body_events(self) -> list[h11.Data | h11.EndOfMessage]:
        """The body events that what was read with the head already holds: none, one piece of the body, or
        the whole body (at most one `Data`) and its end."""
        events: list[h11.Data | h11.EndOfMessage] = []
        while self._conn.their_state is h11.SEND_BODY and len(events) < 2:
            event = self._conn.next_event()
            if not isinstance(event, (h11.Data, h11.EndOfMessage)):
                break  # NEED_DATA
            events.append(event)
            if isinstance(event, h11.EndOfMessage):
                break
        return events

    async def _forward_request_body(self, upstream: Upstream, pending: list[h11.Data | h11.EndOfMessage]) -> None:
        """Stream the body up (from `pending`, the events read with the head); then keep reading so a client that
        hangs up is noticed."""
        try:
            while not upstream.request_sent:
                event = pending.pop(0) if pending else await self._client_event()
                if isinstance(event, h11.Data):
                    await upstream.send_body(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    await upstream.end_body(event.headers.raw_items())
        except UpstreamBroken:
            return  # dockerd stopped reading; its answer (or hang-up) is reported by _relay_answer
        self._body_forwarded = True
        await self._watch_client()

    async def _watch_client(self) -> None:
        """Buffer what the client sends next (h11 keeps it); EOF means it is gone, unless an upgrade
        is pending (then the tunnel passes the EOF on)."""
        while len(self._conn.trailing_data[0]) < MAX_HEAD_BYTES:
            data = await self._read_client()
            self._conn.receive_data(data)
            if not data:
                if self._conn.their_state is h11.MIGHT_SWITCH_PROTOCOL or self._hijack_possible:
                    return
                raise ClientGone("client closed the connection")

    async def _stop_client_reader(self) -> None:
        task, self._client_reader = self._client_reader, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _relay_answer(self, upstream: Upstream) -> None:
        while True:
            event = await upstream.next_event()
            assert isinstance(event, AnswerHead)
            if event.status >= 200:
                break
            if event.status == 101:
                await self._switch_protocols(upstream, event)
            await self._write(response_head(event.status, event.reason, event.headers))
        if self._hijack_possible and is_raw_stream_answer(event.status, event.headers):
            await self._tunnel(upstream, 200, response_head(200, event.reason, end_to_end(event.headers)))
        head, framing = self._answer_head(
            event.status, event.reason, forwarded_response_headers(event.headers, event.status))
        outgoing = [head]
        try:
            body_event: object = event
            while body_event is not END:
                # What has arrived goes out in one write; the client gets it before we wait for more.
                if (body_event := upstream.buffered_event()) is None:
                    await self._write(b"".join(outgoing))
                    outgoing = []
                    body_event = await upstream.next_event()
                outgoing.append(framed(body_event, framing) if isinstance(body_event, bytes) else body_end(framing))
        except UpstreamBroken as error:
            await self._write(b"".join(outgoing))  # what did arrive; then closing tells the client the rest is lost
            raise _Abandon(str(error)) from None
        await self._write(b"".join(outgoing))
        self._answer_done = True
        if framing is BodyFraming.UNTIL_CLOSE:
            raise _Abandon("answer delimited by closing the connection")

    async def _switch_protocols(self, upstream: Upstream, answer: AnswerHead) -> None:
        head = response_head(101, answer.reason, forwarded_response_headers(answer.headers, 101))
        await self._tunnel(upstream, 101, head)

    async def _tunnel(self, upstream: Upstream, status: int, head: bytes) -> NoReturn:
        """Write `head` (an answer of `status`), then carry raw bytes both ways until both sides are done; the
        connection ends."""
        self._answer_status = status
        await self._stop_client_reader()  # what it read stays in h11's buffer: trailing_data
        await self._write(head)
        client_bytes, client_eof = self._conn.trailing_data
        upstream_bytes, upstream_eof = upstream.trailing_data()
        self._upstream = None  # the tunnel owns it now
        try:
            await run_tunnel(
                TunnelEnd(self._reader, self._writer, client_bytes, client_eof),
                TunnelEnd(upstream.reader, upstream.writer, upstream_bytes, upstream_eof),
            )
        finally:
            upstream.close()
        raise _Abandon("tunnel finished")

    # -- hooked routes ----------------------------------------------------------------------------------

    async def _hooked_exchange(self, request: ClientRequest, match: RouteMatch) -> bool:
        self._hijack_possible = False
        body = await self._whole_request_body()
        if body is None:
            return await self._answer_error(
                413, f"request body over {MAX_HOOKED_BODY_BYTES} bytes on a hooked route", close=True)
        call = InterceptedCall(match, request.method, request.target, tuple(request.headers))
        async with self._interceptor.changing():  # before, dockerd's answer and after: one change (hooks.syncgate)
            return await self._intercepted(request, match, call, body)

    async def _intercepted(self, request: ClientRequest, match: RouteMatch, call: InterceptedCall,
                           body: bytes) -> bool:
        try:
            outcome = await self._while_client_waits(self._interceptor.before(call, body))
        except ClientGone:
            log.info("client gone during the pre step for %s: call abandoned, nothing sent to dockerd",
                     match.route.value)
            raise
        except Exception as error:
            log.exception("pre step for %s failed", match.route.value)
            outcome = ErrorReply(500, f"runtimeproxy: {match.route.value}: {error}")
        if isinstance(outcome, ErrorReply):
            return await self._answer_error(outcome.status, outcome.message)
        try:
            upstream = await self._upstream_connection()
            await upstream.send_head(
                request.method, request.target,
                forwarded_request_headers(request.headers, body_length=len(outcome)),
                body=outcome, end=True)
            answer = await self._whole_answer(upstream)
        except DockerdUnreachable as error:
            return await self._answer_error(503, str(error))
        except UpstreamBroken as error:
            self._drop_upstream()
            return await self._answer_error(502, str(error))
        replaced: ErrorReply | None = None
        try:
            replaced = await self._interceptor.after(call, answer)
        except Exception:  # a failing post step never changes the answer
            log.exception("post step for %s failed", match.route.value)
        if replaced is not None:  # dockerd's answer was read whole: the connection stays usable
            if not upstream.finish_exchange():
                self._drop_upstream()
            return await self._answer_error(replaced.status, replaced.message)
        framing = await self._write_whole_answer(
            answer.status, forwarded_response_headers(answer.headers, answer.status), answer.body)
        if framing is BodyFraming.UNTIL_CLOSE:
            return False
        return upstream.finish_exchange() or self._drop_upstream()

    async def _while_client_waits(self, step: Awaitable[T]) -> T:
        """Run `step` while watching the client: if it hangs up first, `step` is cancelled and ClientGone
        raised (as a Go server cancels the request's context)."""
        work = asyncio.ensure_future(step)
        watch = asyncio.create_task(self._watch_client())
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done() and watch.done() and watch.exception() is not None:
                raise ClientGone("client closed the connection")
            return await work  # the watch ended without EOF (its buffer is full): keep waiting
        finally:
            for task in (work, watch):
                task.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)

    async def _whole_request_body(self) -> bytes | None:
        """The complete request body, or None (body left unread) when it exceeds the limit."""
        if self._conn.they_are_waiting_for_100_continue:
            await self._write(b"HTTP/1.1 100 \r\n\r\n")
        chunks: list[bytes] = []
        size = 0
        try:
            while not isinstance(event := await self._client_event(), h11.EndOfMessage):
                assert isinstance(event, h11.Data)
                size += len(event.data)
                if size > MAX_HOOKED_BODY_BYTES:
                    return None
                chunks.append(bytes(event.data))
            return b"".join(chunks)
        finally:
            chunks.clear()  # a traceback that keeps this frame must not keep the body

    async def _whole_answer(self, upstream: Upstream) -> UpstreamAnswer:
        head, body = await upstream.whole_answer(MAX_HOOKED_BODY_BYTES)
        return UpstreamAnswer(head.status, tuple(head.headers), body)

    # -- the upstream connection ------------------------------------------------------------------------

    async def _upstream_connection(self) -> Upstream:
        if self._upstream is not None and self._upstream.reusable:
            return self._upstream
        self._close_upstream()
        try:
            self._upstream = await Upstream.connect(self._docker_socket)
        except DockerdUnreachable as error:
            self._reachability.update(False, str(error))
            raise
        self._reachability.update(True)
        return self._upstream

    def _drop_upstream(self) -> bool:
        """Close the upstream connection after an exchange that left it unusable; the client may go on
        only if its own side of the exchange completed."""
        self._close_upstream()
        return self._request_finished()

    def _close_upstream(self) -> None:
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.close()
