"""The CRI frontend's transport: an HTTP/2 frame relay in front of the gRPC server.

Why: grpcio's fixed cost per call (its C-core threads' wake-ups and the aio loop's) is most of what a proxy spends
on the kubelet's sparse calls, nearly all of which no hook looks at. So the public socket is served by one asyncio
HTTP/2 relay (the `h2` state machine: HPACK, flow control). Per stream, by its `:path`:
- a known CRI method that no hook intercepts goes straight to its backend (runtime or image) over one shared
  HTTP/2 client connection per backend: its frames as they are (headers with grpc-timeout and metadata, data,
  trailers, RST_STREAM both ways), flow control honoured on both legs (a stalled side pauses the other);
- everything else (hooked methods, the proxy's own health and reflection services, unknown paths, and every call
  while the backend cannot be connected to, so its UNAVAILABLE wording stays the gRPC server's) goes to the
  gRPC server, which listens on a private socket beside the public one (runtimeproxy.relay.relay_path_for).
A backend connection lost mid-call ends the call with UNAVAILABLE and the same wording.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.frame_buffer
import h2.settings
import hpack

from runtimeproxy.cri.h2frames import MessageMeter

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

# Our receive windows: a 16 MB answer flows in a few round trips; what one call may hold here is bounded by them.
STREAM_WINDOW_BYTES = 4 * 1024 * 1024
CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024
MAX_HEADER_LIST_BYTES = 16 * 1024 * 1024  # as runtimeproxy.cri.limits.MAX_METADATA_BYTES
# gRPC status codes the relay answers with itself.
CANCELLED, UNKNOWN, RESOURCE_EXHAUSTED, UNAVAILABLE = 1, 2, 8, 14
# h2 refuses a header block of more than 64 CONTINUATION frames (1 MiB at gRPC's 16 KiB frames); the metadata limit
# is the one bound here. A module setting of h2's (its comment leaves it open to change); only this module uses h2.
h2.frame_buffer.CONTINUATION_BACKLOG = MAX_HEADER_LIST_BYTES // 16384 + 1


def _config(client_side: bool) -> h2.config.H2Configuration:
    # Headers pass as bytes, unvalidated and unnormalised: they are relayed, not interpreted.
    return h2.config.H2Configuration(client_side=client_side, header_encoding=None,
                                     validate_outbound_headers=False, normalize_outbound_headers=False,
                                     validate_inbound_headers=False, normalize_inbound_headers=False)


class _GracefulStates(h2.connection.H2ConnectionStateMachine):
    """h2's connection states, except that a GOAWAY either way leaves the connection open: h2 would take it for
    closed and refuse the frames of the streams it lets finish (a backend's graceful stop, ours)."""

    _transitions = {
        **h2.connection.H2ConnectionStateMachine._transitions,  # noqa: SLF001 - h2's table, amended
        **{(state, goaway): (None, state)
           for state in (h2.connection.ConnectionState.IDLE, h2.connection.ConnectionState.CLIENT_OPEN,
                         h2.connection.ConnectionState.SERVER_OPEN)
           for goaway in (h2.connection.ConnectionInputs.SEND_GOAWAY, h2.connection.ConnectionInputs.RECV_GOAWAY)},
    }


class _PlainEncoder(hpack.Encoder):
    """HPACK without Huffman coding: hpack's pure-Python coder costs more CPU than the bytes it saves on a local
    socket, and grows quadratically with a value's length (a minute for one MiB of metadata)."""

    def encode(self, headers: Iterable[tuple[bytes, bytes]], huffman: bool = False) -> bytes:  # type: ignore[override]
        return super().encode(headers, huffman=False)


def _new_connection(client_side: bool) -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(_config(client_side))
    conn.state_machine = _GracefulStates()
    conn.encoder = _PlainEncoder()
    conn.local_settings = h2.settings.Settings(client=client_side, initial_values={
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW_BYTES,
        h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
        h2.settings.SettingCodes.ENABLE_PUSH: 0,
    })
    conn.decoder.max_header_list_size = MAX_HEADER_LIST_BYTES  # h2 applies its setting only once acknowledged
    conn.initiate_connection()
    conn.increment_flow_control_window(CONNECTION_WINDOW_BYTES - 65535)
    return conn


_RESPONSE_HEADERS: Headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]


def status_trailers(code: int, message: str) -> Headers:
    """A gRPC status: its code and percent-encoded message (gRPC's wire format: printable ASCII but '%' as is)."""
    return [(b"grpc-status", str(code).encode()),
            (b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode())]


class CallSide(Protocol):
    """One end of a relayed call as _Call and _Pipe drive it: an h2 connection's side (_Side), or a caller's
    connection of cri.framefront, whose `conn` writes the same h2 calls as frames of its own."""

    conn: Any  # h2's H2Connection, or what stands for it
    calls: dict[int, _Call]
    usable: bool

    def touch(self) -> None: ...

    def flush(self) -> None: ...


class _Flusher:
    """Sides written to while handling one read are flushed once at its end: one write per connection. One
    for the process: every side lives on the one event loop."""

    def __init__(self) -> None:
        self.touched: set[CallSide] = set()

    def flush(self) -> None:
        while self.touched:
            self.touched.pop().flush()


FLUSHER = _Flusher()


class _Side(asyncio.Protocol):
    """One HTTP/2 connection, either a caller's (server side) or one to an upstream (client side)."""

    def __init__(self, client_side: bool, on_lost: Callable[[_Side], None], flusher: _Flusher = FLUSHER) -> None:
        self.conn = _new_connection(client_side)
        self.transport: asyncio.Transport | None = None
        self.calls: dict[int, _Call] = {}
        self.usable = True  # for new streams: no GOAWAY received, not lost
        self._flusher = flusher
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.touch()
        self._flusher.flush()

    def touch(self) -> None:
        self._flusher.touched.add(self)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            log.warning("HTTP/2 protocol error, closing the connection: %s", error)
            self.touch()
            self._flusher.flush()
            self.close()
            return
        self.touch()
        for event in events:
            self._dispatch(event)
        self._flusher.flush()

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.data(self, event.data, event.flow_controlled_length, event.stream_ended is not None)
            else:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.headers(list(event.headers), event.stream_ended is not None)
        elif isinstance(event, h2.events.StreamEnded):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.ended(self)
        elif isinstance(event, h2.events.WindowUpdated):
            targets = self.calls.values() if event.stream_id == 0 else filter(None, [self.calls.get(event.stream_id)])
            for call in list(targets):
                call.drain()
        elif isinstance(event, h2.events.StreamReset):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.reset_from(self, event.error_code)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.usable = False
            if self.conn.config.client_side and event.last_stream_id is not None:
                for stream_id, call in list(self.calls.items()):
                    if stream_id > event.last_stream_id:
                        call.lost(self, "the connection was shut down before the call was taken")
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for call in list(self.calls.values()):
                call.drain()

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._on_lost(self)
        for call in list(self.calls.values()):
            call.lost(self, f"connection lost: {exc}" if exc else "connection closed")
        self.calls.clear()
        self._flusher.flush()

    def pause_writing(self) -> None:
        pass  # flow control is HTTP/2's: windows bound what is written

    def resume_writing(self) -> None:
        pass




class _Pipe:
    """One direction of a call: what `source` received for `source_id`, sent on as `target`'s window allows.
    Received bytes are acknowledged to the source only once sent on, so a slow reader stalls its writer.
    With a `limit`, the gRPC messages it carries are measured as they pass (their 5-byte prefixes)."""

    def __init__(self, source: CallSide, source_id: int, limit: int | None = None) -> None:
        self.source, self.source_id = source, source_id
        self.target: CallSide | None = None
        self.target_id = 0
        self.headers: Headers | None = None  # the first headers, not yet sent
        self.buffer = bytearray()
        self.trailers: Headers | None = None
        self.end = False  # all received: END_STREAM is due once the buffer is sent
        self.done = False  # END_STREAM sent on the target
        self.limit = limit
        self._meter: MessageMeter | None = None

    def attach(self, target: CallSide, target_id: int) -> None:
        self.target, self.target_id = target, target_id

    def push(self, data: bytes, flow_length: int, end: bool) -> int | None:
        """Queue `data` and send what the window allows; the size of a message over the limit (nothing queued)."""
        if flow_length > len(data):
            self._ack(flow_length - len(data))  # padding
        if self.limit is not None:
            oversized = self._oversized(data)
            if oversized is not None:
                self._ack(len(data))
                return oversized
        self.buffer += data
        self.end = self.end or end
        self.drain()
        return None

    def _oversized(self, data: bytes) -> int | None:
        assert self.limit is not None
        if self._meter is None or self._meter.limit != self.limit:
            self._meter = MessageMeter(self.limit)
        return self._meter.oversized(data)

    def finish(self, trailers: Headers | None = None) -> None:
        self.trailers = trailers
        self.end = True
        self.drain()

    def drain(self) -> None:
        target = self.target
        if target is None or self.done:
            return
        conn, stream_id = target.conn, self.target_id
        try:
            if self.headers is not None:
                headers, self.headers = self.headers, None
                self.done = self.end and not self.buffer and self.trailers is None
                conn.send_headers(stream_id, headers, end_stream=self.done)
            while self.buffer:
                room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                if room <= 0:
                    break
                chunk = bytes(self.buffer[:room])
                del self.buffer[:room]
                self.done = self.end and not self.buffer and self.trailers is None
                conn.send_data(stream_id, chunk, end_stream=self.done)
                self._ack(len(chunk))
            if self.end and not self.buffer and not self.done:
                self.done = True
                if self.trailers is not None:
                    conn.send_headers(stream_id, self.trailers, end_stream=True)
                else:
                    conn.end_stream(stream_id)
        except h2.exceptions.NoSuchStreamError:
            self.done = True  # reset by the peer: the reset reaches the other side on its own
        target.touch()

    def _ack(self, size: int) -> None:
        try:
            self.source.conn.acknowledge_received_data(size, self.source_id)
        except h2.exceptions.NoSuchStreamError:
            pass
        self.source.touch()


Recorder = Callable[[bytes, int, float], None]  # (path, grpc status code, seconds)


class _Call:
    """One relayed stream: the caller's end (front) and the upstream's (back), a pipe each way. `on_close` is told
    once, when both directions are done or either end reset or lost."""

    def __init__(self, front: CallSide, front_id: int, path: bytes, unreachable: Callable[[str], str],
                 on_close: Callable[[_Call], None], limits: tuple[int | None, int | None] = (None, None)) -> None:
        self.front, self.front_id, self.path = front, front_id, path
        self.back: _Side | None = None
        self.back_id = 0
        self.up = _Pipe(front, front_id, limits[0])  # measured from the first byte: data may come before attach
        self._response_limit = limits[1]
        self.down = _Pipe(front, front_id)  # replaced on attach; until then only ever carries our own answer
        self.down.attach(front, front_id)
        self.started = time.perf_counter()
        self.code = -1  # the gRPC status, once known
        self.response_started = False
        self.unreachable = unreachable
        self.route: Route | None = None  # once attached to a backend (not the gRPC server)
        self.closed = False
        self._on_close = on_close
        front.calls[front_id] = self

    def attach(self, back: _Side, request_headers: Headers, route: Route | None) -> bool:
        """Open the upstream stream: `route`'s, or (None) the gRPC server's, which holds its calls to the limits
        itself. False when the connection cannot take one more stream."""
        try:
            back_id = back.conn.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError:
            back.usable = False
            return False
        self.back, self.back_id = back, back_id
        self.route = route
        back.calls[back_id] = self
        if route is None:
            self.up.limit = self._response_limit = None
        self.up.headers = request_headers
        self.up.attach(back, back_id)
        self.down = _Pipe(back, back_id, self._response_limit)
        self.down.attach(self.front, self.front_id)
        self.up.drain()
        return True

    def data(self, side: CallSide, data: bytes, flow_length: int, end: bool) -> None:
        pipe = self.up if side is self.front else self.down
        oversized = pipe.push(data, flow_length, end)
        if oversized is not None:
            self.fail(RESOURCE_EXHAUSTED, f"Received message larger than max ({oversized} vs. {pipe.limit})")
            return
        self._close_if_done()

    def headers(self, headers: Headers, end: bool) -> None:
        """The back's response headers, or its trailers."""
        status = _grpc_status(headers)
        if status is not None:
            self.code = status
        if self.response_started:
            self.down.finish(headers)
        else:
            self.response_started = True
            self.down.headers = headers
            self.down.end = end
            self.down.drain()
        self._close_if_done()

    def ended(self, side: CallSide) -> None:
        pipe = self.up if side is self.front else self.down
        if not pipe.end:
            pipe.finish(pipe.trailers)
        self._close_if_done()

    def drain(self) -> None:
        self.up.drain()
        self.down.drain()

    def reset_from(self, side: CallSide, error_code: int) -> None:
        """`side` reset its stream: so is the other side's, with the same code."""
        other, other_id = (self.back, self.back_id) if side is self.front else (self.front, self.front_id)
        if other is not None:
            _reset(other, other_id, error_code)
        if self.code < 0:
            self.code = CANCELLED if side is self.front else UNKNOWN
        self._close()

    def lost(self, side: CallSide, why: str) -> None:
        """`side`'s connection is gone (or will not take the stream): end the call on the other side."""
        if side is not self.front:
            self.fail(UNAVAILABLE, self.unreachable(why))
            return
        if self.back is not None:
            _reset(self.back, self.back_id, h2.errors.ErrorCodes.CANCEL)
        if self.code < 0:
            self.code = CANCELLED
        self._close()

    def fail(self, code: int, message: str) -> None:
        """End the call with our own status: the upstream stream is cancelled, what it sent and we did not pass
        on yet is dropped, and the caller gets `code` and `message`."""
        if self.back is not None and not (self.up.done and self.down.done):
            _reset(self.back, self.back_id, h2.errors.ErrorCodes.CANCEL)
        self.code = code
        down = self.down
        if not down.done:
            down.buffer.clear()
            down.attach(self.front, self.front_id)
            if self.response_started:
                down.finish(status_trailers(code, message))
            else:
                down.headers = _RESPONSE_HEADERS + status_trailers(code, message)
                down.end = True
                down.drain()
        if not self.up.end:
            _reset(self.front, self.front_id, h2.errors.ErrorCodes.NO_ERROR)  # what gRPC servers send after an early status
        self._close()

    def _close_if_done(self) -> None:
        if self.up.done and self.down.done:
            self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.front.calls.pop(self.front_id, None)
        if self.back is not None:
            self.back.calls.pop(self.back_id, None)
        self._on_close(self)


def _reset(side: CallSide, stream_id: int, error_code: int) -> None:
    try:
        side.conn.reset_stream(stream_id, error_code)
    except h2.exceptions.NoSuchStreamError:
        return
    side.touch()


def _grpc_status(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"grpc-status":
            return int(value) if value.isdigit() else UNKNOWN
    return None


class Upstream:
    """One shared HTTP/2 client connection to a unix socket, opened on demand and again after it is lost."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._side: _Side | None = None
        self._connecting: asyncio.Task[_Side | None] | None = None

    def ready(self) -> _Side | None:
        side = self._side
        return side if side is not None and side.usable else None

    async def connect(self) -> _Side | None:
        """The connection, made if needed (one attempt shared by all who wait); None when nothing serves."""
        ready = self.ready()
        if ready is not None:
            return ready
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    def _connected(self, task: asyncio.Task[_Side | None]) -> None:
        if self._connecting is task:
            self._connecting = None

    async def _connect(self) -> _Side | None:
        loop = asyncio.get_running_loop()
        try:
            _, side = await loop.create_unix_connection(lambda: _Side(client_side=True, on_lost=self._lost),
                                                        str(self.path))
        except OSError as error:
            log.debug("cannot connect to %s: %s", self.path, error)
            return None
        self._side = side
        return side

    def _lost(self, side: _Side) -> None:
        if self._side is side:
            self._side = None

    def close(self) -> None:
        if self._side is not None:
            self._side.close()


@dataclass(frozen=True)
class Route:
    """Where a relayed path goes: its upstream, how to word that upstream's loss, what to tell when a call ends."""

    upstream: Upstream
    unreachable: Callable[[str], str]
    ended: Recorder


Router = Callable[[bytes], Route | None]  # None: the gRPC server's


@dataclass(frozen=True)
class Limits:
    """What the gRPC server would hold relayed calls to: message sizes each way, calls at once (all callers')."""

    max_request_bytes: int
    max_response_bytes: int
    max_calls: int
