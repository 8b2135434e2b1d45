"""The frame relay's front (--cri-frame-relay): callers' HTTP/2 connections, each paired with a backend
connection of its own.

Why pairs: with one backend connection per caller, a relayed stream keeps its stream id, and everything but header
blocks passes as the bytes it came as — DATA, WINDOW_UPDATE, SETTINGS and RST_STREAM — with no HTTP/2 state
machine run on them (h2's costs most of a sparse call's CPU). What the relay does by hand:
- header blocks are decoded (HPACK state is per connection and some streams do not reach the backend) and
  written on as literals that never touch a dynamic table (cri.h2frames), so a block can be left out or added;
- a stream the router does not send to the paired backend (hooked methods, the proxy's own services, unknown
  paths, an image backend on another socket, every call while no backend is paired) is a diverted call: the h2
  legs of cri.framerelay take it to its upstream or to the gRPC server, its answer written into the caller's
  connection (_CallerFace) within the caller's windows;
- the caller's connection window is shared by the backend's DATA and the diverted answers: the relay counts it,
  holds backend frames that would overrun it, and keeps back from the backend the caller's credit for what the
  relay itself sent (`_debt`);
- the gRPC server's limits are kept on relayed streams: message sizes from the 5-byte prefixes, calls at once;
- PINGs are answered on each side, never passed on: the caller's follow the diverted answers too, and a grpc-go
  backend sends away a connection that pings it after none of its own DATA.
A caller whose backend cannot be connected to is served alone (every call diverted, SETTINGS and PING answered
here); a lost backend ends the relayed calls UNAVAILABLE in the gRPC server's words and leaves the caller alone,
a departing one (GOAWAY) finishes what it took. Either way the caller is told to go away (GOAWAY) once the
backend answers again, to be paired on its next connection. So is a caller greeted before the relay served
(runtimeproxy.greeting): our SETTINGS went out already, so no backend's can be its server preface, and it is served
alone from the start.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import h2.exceptions
import hpack

from runtimeproxy.cri import h2frames as wire
from runtimeproxy.cri.framerelay import (
    _RESPONSE_HEADERS, CANCELLED, FLUSHER, MAX_HEADER_LIST_BYTES, RESOURCE_EXHAUSTED, UNAVAILABLE, UNKNOWN, Headers,
    Limits, Route, Router, Upstream, _Call, _grpc_status, status_trailers,
)
from runtimeproxy.greeting import Greeting
from runtimeproxy.listener import KEEP_SOCKET_FILE, listen_backlog

log = logging.getLogger(__name__)

# A backend that takes the connection but sends no SETTINGS (containerd frozen by SIGSTOP, or wedged: the kernel
# accepts for it) would leave the caller with nothing, health checks included: after this long the caller is
# served alone, its calls diverted, as when the backend cannot be connected to.
BACKEND_SETTINGS_TIMEOUT_SECONDS = 2.0


@dataclass(slots=True)
class _Relayed:
    """A stream relayed to the paired backend: what ends it and what is recorded when it ends."""

    path: bytes
    route: Route
    up: wire.MessageMeter
    down: wire.MessageMeter
    started: float = field(default_factory=time.perf_counter)
    up_done: bool = False  # the caller's END_STREAM passed
    down_done: bool = False  # the backend's END_STREAM passed
    response_started: bool = False
    code: int = -1


class _Back(asyncio.Protocol):
    """The backend connection paired with one caller's."""

    def __init__(self, front: PairedFront) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.front.from_back(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.back_lost(self, exc)

    def pause_writing(self) -> None:
        pass  # HTTP/2's windows bound what is written

    def resume_writing(self) -> None:
        pass


class _CallerFace:
    """The caller's connection as cri.framerelay's pipes write a diverted call's answer into it (the part of h2's
    H2Connection they use): frames of our own, within the caller's stream and connection windows."""

    def __init__(self, front: PairedFront) -> None:
        self._front = front
        self.windows: dict[int, int] = {}  # diverted streams' send windows, once they moved from the initial one
        self._ended: set[int] = set()  # END_STREAM sent
        self._reset: set[int] = set()  # RST_STREAM sent

    @property
    def max_outbound_frame_size(self) -> int:
        return self._front.caller_max_frame

    def _open(self, stream_id: int) -> None:
        if stream_id in self._ended or stream_id in self._reset:
            raise h2.exceptions.StreamClosedError(stream_id)

    def local_flow_control_window(self, stream_id: int) -> int:
        self._open(stream_id)
        front = self._front
        stream = self.windows.get(stream_id, front.caller_initial_window)
        return max(0, min(stream, front.caller_window - front.held_data))

    def send_headers(self, stream_id: int, headers: Headers, end_stream: bool = False) -> None:
        self._open(stream_id)
        front = self._front
        front.to_caller(wire.header_frames(stream_id, wire.literal_block(headers), end_stream, front.caller_max_frame))
        if end_stream:
            self._ended.add(stream_id)

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        self._open(stream_id)
        front = self._front
        self.windows[stream_id] = self.windows.get(stream_id, front.caller_initial_window) - len(data)
        front.debt += len(data)
        front.to_caller(wire.frame(wire.DATA, wire.END_STREAM if end_stream else 0, stream_id, data), len(data))
        if end_stream:
            self._ended.add(stream_id)

    def end_stream(self, stream_id: int) -> None:
        self.send_data(stream_id, b"", end_stream=True)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        if stream_id in self._reset:
            raise h2.exceptions.StreamClosedError(stream_id)
        self._reset.add(stream_id)
        self._front.to_caller(wire.rst_stream(stream_id, int(error_code)))

    def acknowledge_received_data(self, size: int, stream_id: int) -> None:
        """The caller's bytes of a diverted stream were passed on: its windows open again by as much."""
        if size <= 0:
            return
        update = wire.window_update(0, size)
        if stream_id not in self._reset:
            update += wire.window_update(stream_id, size)
        self._front.to_caller_now(update)

    def opened(self, stream_id: int, increment: int) -> None:
        self.windows[stream_id] = self.windows.get(stream_id, self._front.caller_initial_window) + increment

    def initial_window_moved(self, delta: int) -> None:
        for stream_id in self.windows:
            self.windows[stream_id] += delta

    def forget(self, stream_id: int) -> None:
        self.windows.pop(stream_id, None)
        self._ended.discard(stream_id)
        self._reset.discard(stream_id)


class PairedFront(asyncio.Protocol):
    """One caller's connection (the kubelet's), with its paired backend connection while there is one. To
    cri.framerelay's calls it is a side like theirs: `conn`, `calls`, `usable`, `touch`. A `greeted` caller was sent
    our SETTINGS before the relay served (runtimeproxy.greeting): it is served alone, never paired."""

    def __init__(self, relay: FrameRelay, greeted: bool = False) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.conn = _CallerFace(self)
        self.calls: dict[int, _Call] = {}  # diverted streams
        self.usable = True
        self._streams: dict[int, _Relayed] = {}  # relayed streams
        self._back: _Back | None = None  # the paired backend connection, while it is there
        self._back_open = False  # ... and takes new streams
        self._alone = False  # no backend paired: SETTINGS and PING are answered here
        self._connecting = True
        self._in, self._back_in = bytearray(), bytearray()
        self._out, self._back_out = bytearray(), bytearray()
        self._preface_read = False
        self._server_preface_sent = greeted
        self._highest = 0  # the highest stream id the caller opened
        self._refuse_above: int | None = None  # after our GOAWAY: streams opened later are refused
        self._caller_blocks = wire.HeaderReader(MAX_HEADER_LIST_BYTES)
        self._back_blocks = wire.HeaderReader(MAX_HEADER_LIST_BYTES)
        # The caller's settings and window, as the frames we send it must keep to them.
        self.caller_max_frame = wire.DEFAULT_MAX_FRAME_BYTES
        self.caller_initial_window = wire.DEFAULT_WINDOW_BYTES
        self.caller_window = wire.DEFAULT_WINDOW_BYTES
        self.held: deque[tuple[bytes, int]] = deque()  # frames waiting for the caller's window, in order
        self.held_data = 0
        self.debt = 0  # DATA bytes we sent the caller and did not yet keep back from its credit to the backend
        self._back_max_frame = wire.DEFAULT_MAX_FRAME_BYTES  # the backend's, for the header frames we send it
        self._settings_owed = 0  # the caller's SETTINGS passed to the backend and not yet acknowledged by it

    # -- the caller's connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self._server_preface_sent:  # greeted: no backend's SETTINGS may follow ours
            self._connecting, self._alone = False, True
            return
        task = asyncio.get_running_loop().create_task(self._pair())
        self.relay.pending.add(task)
        task.add_done_callback(self.relay.pending.discard)

    async def _pair(self) -> None:
        path = self.relay.paired_path
        back: _Back | None = None
        if path is not None:
            try:
                _, back = await asyncio.get_running_loop().create_unix_connection(lambda: _Back(self), str(path))
            except OSError as error:
                log.debug("frame relay: cannot pair with %s: %s", path, error)
        if self.transport is None or self.transport.is_closing():
            if back is not None and back.transport is not None:
                back.transport.close()
            return
        self._connecting = False
        if back is not None:
            self._back, self._back_open = back, True
            asyncio.get_running_loop().call_later(BACKEND_SETTINGS_TIMEOUT_SECONDS, self._backend_silent, back)
        else:
            self._alone = True
            self._send_server_preface()
        self._read()
        FLUSHER.flush()

    def _backend_silent(self, back: _Back) -> None:
        if back is not self._back or self._server_preface_sent or back.transport is None:
            return
        log.warning("frame relay: the backend %s took the connection but sent no SETTINGS in %.0f s; serving the "
                    "caller alone", self.relay.paired_path, BACKEND_SETTINGS_TIMEOUT_SECONDS)
        back.transport.abort()  # back_lost follows: alone, our SETTINGS first

    def _send_server_preface(self, settings: bytes = wire.frame(wire.SETTINGS, 0, 0)) -> None:
        """The server's first frame, SETTINGS (ours, or the paired backend's): what waited for it follows."""
        self._out += settings
        self._server_preface_sent = True
        self._release_held()
        self.touch()

    def data_received(self, data: bytes) -> None:
        self._in += data
        if not self._connecting:
            self._read()
            FLUSHER.flush()

    def _read(self) -> None:
        try:
            self._read_frames()
        except (wire.FrameError, hpack.HPACKError) as error:
            self._broken(error)
        except Exception:  # noqa: BLE001 - a bug here must not take the loop's other connections with it
            log.exception("frame relay: the caller's connection failed")
            self._broken(None)

    def _read_frames(self) -> None:
        if not self._preface_read:
            if len(self._in) < len(wire.PREFACE):
                if not wire.PREFACE.startswith(bytes(self._in)):
                    raise wire.FrameError("not an HTTP/2 connection preface")
                return
            if self._in[:len(wire.PREFACE)] != wire.PREFACE:
                raise wire.FrameError("not an HTTP/2 connection preface")
            if self._back is not None:
                self._back_out += wire.PREFACE
            del self._in[:len(wire.PREFACE)]
            self._preface_read = True
        consumed = 0
        for kind, flags, stream_id, start, end in wire.frames(self._in, wire.MAX_FRAME_PAYLOAD):
            consumed = end
            self._from_caller(kind, flags, stream_id, start, end)
            if self.transport is None or self.transport.is_closing():
                break
        del self._in[:consumed]
        self.touch()

    def _broken(self, error: Exception | None) -> None:
        if error is not None:
            log.warning("HTTP/2 protocol error, closing the connection: %s", error)
        code = wire.COMPRESSION_ERROR if isinstance(error, hpack.HPACKError) else wire.PROTOCOL_ERROR
        if self._server_preface_sent:
            self._out += wire.goaway(self._highest, code)
        self.flush()
        self.close()

    def _from_caller(self, kind: int, flags: int, stream_id: int, start: int, end: int) -> None:
        buffer = self._in
        if self._caller_blocks.open and kind != wire.CONTINUATION:
            raise wire.FrameError("a header block interrupted")
        if kind == wire.DATA:
            self._caller_data(flags, stream_id, start, end)
        elif kind in (wire.HEADERS, wire.CONTINUATION):
            whole = self._caller_blocks.feed(kind, flags, stream_id, buffer, start, end)
            if whole is not None:
                self._caller_headers(*whole)
        elif kind == wire.WINDOW_UPDATE:
            increment = int.from_bytes(buffer[start:end], "big") & 0x7FFFFFFF
            if stream_id == 0:
                self._caller_credit(increment)
            elif stream_id in self._streams:
                self._back_out += buffer[start - wire.FRAME_HEADER_BYTES:end]
            elif stream_id in self.calls:
                self.conn.opened(stream_id, increment)
                self.calls[stream_id].drain()
        elif kind == wire.RST_STREAM:
            self._caller_reset(stream_id, int.from_bytes(buffer[start:end], "big"),
                               buffer[start - wire.FRAME_HEADER_BYTES:end])
        elif kind == wire.SETTINGS:
            self._caller_settings(flags, buffer, start, end)
        elif kind == wire.PING:
            if not flags & wire.ACK:  # answered here, never passed on (see _from_back)
                self.to_caller_now(wire.frame(wire.PING, wire.ACK, 0, bytes(buffer[start:end])))
        # PRIORITY, GOAWAY (the caller leaves: its calls end or its connection closes) and unknown kinds: nothing.

    def _caller_data(self, flags: int, stream_id: int, start: int, end: int) -> None:
        buffer, length = self._in, end - start
        stream = self._streams.get(stream_id)
        if stream is not None:
            begin, stop = wire.unpadded(buffer, flags, start, end)
            oversized = stream.up.oversized(buffer, begin, stop)
            if oversized is not None:
                self.to_caller_now(wire.window_update(0, length))
                self._fail(stream_id, stream, RESOURCE_EXHAUSTED,
                           f"Received message larger than max ({oversized} vs. {stream.up.limit})")
                return
            self._back_out += buffer[start - wire.FRAME_HEADER_BYTES:end]
            if flags & wire.END_STREAM:
                stream.up_done = True
                self._close_if_done(stream_id, stream)
            return
        call = self.calls.get(stream_id)
        if call is not None:
            begin, stop = wire.unpadded(buffer, flags, start, end)
            call.data(self, bytes(buffer[begin:stop]), length, bool(flags & wire.END_STREAM))
        elif length:
            self.to_caller_now(wire.window_update(0, length))  # a stream that ended here: the bytes are its again

    def _caller_headers(self, stream_id: int, flags: int, decoded: tuple[tuple[bytes, bytes], ...]) -> None:
        headers: Headers = list(decoded)
        end_stream = bool(flags & wire.END_STREAM)
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers (gRPC callers send none)
            self._back_out += wire.header_frames(stream_id, wire.literal_block(headers), end_stream,
                                                 self._back_max_frame)
            if end_stream:
                stream.up_done = True
                self._close_if_done(stream_id, stream)
            return
        call = self.calls.get(stream_id)
        if call is not None:
            if end_stream:
                call.ended(self)
            return
        if stream_id <= self._highest or not stream_id % 2:
            return  # a stream that ended here already
        self._highest = stream_id
        if self._refuse_above is not None and stream_id > self._refuse_above:
            self.to_caller(wire.rst_stream(stream_id, wire.REFUSED_STREAM))  # the caller makes it again elsewhere
            return
        path = next((value for name, value in headers if name == b":path"), b"")
        self.relay.new_call(self, stream_id, path, headers, end_stream)

    @property
    def pairs_with_backend(self) -> bool:
        return self._back_open

    def pairs_with(self, route: Route) -> bool:
        return self._back_open and route.upstream.path == self.relay.paired_path

    def relay_stream(self, stream_id: int, path: bytes, headers: Headers, end_stream: bool, route: Route,
                     limits: Limits) -> None:
        """Open `stream_id` on the paired backend: a relayed call."""
        stream = _Relayed(path, route, wire.MessageMeter(limits.max_request_bytes),
                          wire.MessageMeter(limits.max_response_bytes), up_done=end_stream)
        self._streams[stream_id] = stream
        self._back_out += wire.header_frames(stream_id, wire.literal_block(headers), end_stream, self._back_max_frame)

    def _caller_credit(self, increment: int) -> None:
        """The caller opened its connection window: the backend gets the credit but for what we sent ourselves."""
        self.caller_window += increment
        paid = min(increment, self.debt)
        self.debt -= paid
        if self._back is not None and increment > paid:
            self._back_out += wire.window_update(0, increment - paid)
        self._release_held()
        for call in list(self.calls.values()):
            call.drain()

    def _caller_reset(self, stream_id: int, error_code: int, raw: bytearray) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            if self._back is not None:
                self._back_out += raw
            stream.code = stream.code if stream.code >= 0 else CANCELLED
            self.relay.relayed_ended(stream)
            return
        call = self.calls.get(stream_id)
        if call is not None:
            call.reset_from(self, error_code)

    def _caller_settings(self, flags: int, buffer: bytearray, start: int, end: int) -> None:
        if flags & wire.ACK:
            if self._back is not None:  # for the backend's settings
                self._back_out += buffer[start - wire.FRAME_HEADER_BYTES:end]
            return
        for setting, value in wire.settings_of(bytes(buffer[start:end])).items():
            if setting == wire.MAX_FRAME_SIZE:
                self.caller_max_frame = value
            elif setting == wire.INITIAL_WINDOW_SIZE:
                self.conn.initial_window_moved(value - self.caller_initial_window)
                self.caller_initial_window = value
            elif setting == wire.HEADER_TABLE_SIZE:
                self._back_blocks.decoder.set_max_allowed_table_size(value)  # what the backend's encoder may use
        if self._back is not None:
            self._back_out += buffer[start - wire.FRAME_HEADER_BYTES:end]
            self._settings_owed += 1
        else:
            self.to_caller(wire.frame(wire.SETTINGS, wire.ACK, 0))
        for call in list(self.calls.values()):
            call.drain()

    # -- the paired backend's connection ---------------------------------------------------------------

    def from_back(self, data: bytes) -> None:
        self._back_in += data
        try:
            consumed = 0
            for kind, flags, stream_id, start, end in wire.frames(self._back_in, wire.MAX_FRAME_PAYLOAD):
                consumed = end
                self._from_back(kind, flags, stream_id, start, end)
            del self._back_in[:consumed]
        except (wire.FrameError, hpack.HPACKError) as error:
            log.warning("HTTP/2 protocol error from the backend, closing its connection: %s", error)
            self._close_back()
        except Exception:  # noqa: BLE001 - as in _read
            log.exception("frame relay: the backend's connection failed")
            self._close_back()
        self.touch()
        FLUSHER.flush()

    def _close_back(self) -> None:
        if self._back is not None and self._back.transport is not None:
            self._back.transport.close()

    def _from_back(self, kind: int, flags: int, stream_id: int, start: int, end: int) -> None:
        buffer = self._back_in
        if self._back_blocks.open and kind != wire.CONTINUATION:
            raise wire.FrameError("a header block interrupted")
        if kind == wire.DATA:
            self._back_data(flags, stream_id, start, end)
        elif kind in (wire.HEADERS, wire.CONTINUATION):
            whole = self._back_blocks.feed(kind, flags, stream_id, buffer, start, end)
            if whole is not None:
                self._back_headers(*whole)
        elif kind == wire.WINDOW_UPDATE:
            if stream_id == 0 or stream_id in self._streams:
                self.to_caller(bytes(buffer[start - wire.FRAME_HEADER_BYTES:end]))
        elif kind == wire.PING:
            # Each side's PINGs are answered here: a caller's BDP pings follow every DATA it gets, ours too, and
            # a grpc-go backend that saw pings after no DATA of its own sends the connection away
            # (ENHANCE_YOUR_CALM, "too_many_pings").
            if not flags & wire.ACK:
                self._back_out += wire.frame(wire.PING, wire.ACK, 0, bytes(buffer[start:end]))
        elif kind == wire.RST_STREAM:
            stream = self._streams.pop(stream_id, None)
            if stream is not None:
                self.to_caller(bytes(buffer[start - wire.FRAME_HEADER_BYTES:end]))
                stream.code = stream.code if stream.code >= 0 else UNKNOWN
                self.relay.relayed_ended(stream)
        elif kind == wire.SETTINGS:
            raw = bytes(buffer[start - wire.FRAME_HEADER_BYTES:end])
            if not flags & wire.ACK:
                for setting, value in wire.settings_of(raw[wire.FRAME_HEADER_BYTES:]).items():
                    if setting == wire.MAX_FRAME_SIZE:
                        self._back_max_frame = value
                    elif setting == wire.HEADER_TABLE_SIZE:
                        self._caller_blocks.decoder.set_max_allowed_table_size(value)  # what the caller's encoder may use
                if not self._server_preface_sent:
                    self._send_server_preface(raw)
                    return
            else:
                self._settings_owed = max(0, self._settings_owed - 1)
            self.to_caller(raw)
        elif kind == wire.GOAWAY:
            error_code = int.from_bytes(buffer[start + 4:start + 8], "big")
            if error_code != wire.NO_ERROR:
                log.warning("frame relay: the backend %s went away with HTTP/2 error %d: %s", self.relay.paired_path,
                            error_code, bytes(buffer[start + 8:end]).decode(errors="replace"))
            self._back_goaway(int.from_bytes(buffer[start:start + 4], "big") & 0x7FFFFFFF)
        # PUSH_PROMISE (callers turn push off), PRIORITY and unknown kinds: nothing.

    def _back_data(self, flags: int, stream_id: int, start: int, end: int) -> None:
        buffer, length = self._back_in, end - start
        stream = self._streams.get(stream_id)
        if stream is None:
            if length:
                self._back_out += wire.window_update(0, length)  # a stream that ended here: the backend's bytes again
            return
        begin, stop = wire.unpadded(buffer, flags, start, end)
        oversized = stream.down.oversized(buffer, begin, stop)
        if oversized is not None:
            self._back_out += wire.window_update(0, length)
            self._fail(stream_id, stream, RESOURCE_EXHAUSTED,
                       f"Received message larger than max ({oversized} vs. {stream.down.limit})")
            return
        self.to_caller(bytes(buffer[start - wire.FRAME_HEADER_BYTES:end]), length)
        if flags & wire.END_STREAM:
            stream.down_done = True
            self._close_if_done(stream_id, stream)

    def _back_headers(self, stream_id: int, flags: int, decoded: tuple[tuple[bytes, bytes], ...]) -> None:
        headers: Headers = list(decoded)
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # decoded all the same: the backend's HPACK state goes on
        end_stream = bool(flags & wire.END_STREAM)
        status = _grpc_status(headers)
        if status is not None:
            stream.code = status
        stream.response_started = True
        self.to_caller(wire.header_frames(stream_id, wire.literal_block(headers), end_stream, self.caller_max_frame))
        if end_stream:
            stream.down_done = True
            self._close_if_done(stream_id, stream)

    def _back_goaway(self, last_stream_id: int) -> None:
        """The backend stops: the streams it took finish, the others fail; new ones are diverted until the
        caller, sent away once the backend answers again (new_call), comes back to be paired."""
        self._back_open = False
        for stream_id, stream in list(self._streams.items()):
            if stream_id > last_stream_id:
                self._fail(stream_id, stream, UNAVAILABLE,
                           stream.route.unreachable("the connection was shut down before the call was taken"))

    def back_lost(self, back: _Back, exc: Exception | None) -> None:
        if back is not self._back:
            return
        self._back, self._back_open = None, False
        self._back_blocks.drop()
        self._alone = True
        if not self._server_preface_sent:  # lost before its SETTINGS came: ours open the caller's connection
            self._send_server_preface()
        for _ in range(self._settings_owed):  # the caller's settings it never acknowledged: applied here
            self.to_caller(wire.frame(wire.SETTINGS, wire.ACK, 0))
        self._settings_owed = 0
        why = f"connection lost: {exc}" if exc else "connection closed"
        if self._streams:
            log.warning("frame relay: the connection to %s was lost with %d calls on it: %s", self.relay.paired_path,
                        len(self._streams), why)
        for stream_id, stream in list(self._streams.items()):
            self._fail(stream_id, stream, UNAVAILABLE, stream.route.unreachable(why))
        FLUSHER.flush()

    # -- what both ends share --------------------------------------------------------------------------

    def _fail(self, stream_id: int, stream: _Relayed, code: int, message: str) -> None:
        """End a relayed call with our own status: the backend's stream is cancelled, the caller gets `code`."""
        del self._streams[stream_id]
        if self._back is not None:
            self._back_out += wire.rst_stream(stream_id, wire.CANCEL)
        if not stream.down_done:  # else the backend's status reached the caller already
            trailers = status_trailers(code, message)
            block = wire.literal_block(trailers if stream.response_started else _RESPONSE_HEADERS + trailers)
            self.to_caller(wire.header_frames(stream_id, block, True, self.caller_max_frame))
        if not stream.up_done:
            self.to_caller(wire.rst_stream(stream_id, wire.NO_ERROR))  # what gRPC servers send after an early status
        stream.code = code
        self.relay.relayed_ended(stream)

    def _close_if_done(self, stream_id: int, stream: _Relayed) -> None:
        if stream.up_done and stream.down_done:
            del self._streams[stream_id]
            self.relay.relayed_ended(stream)

    def to_caller(self, chunk: bytes, data_length: int = 0) -> None:
        """Frames for the caller, in order; those that would overrun its connection window wait for it, and
        all wait for the server's SETTINGS, which must come first."""
        if self.held or data_length > self.caller_window or not self._server_preface_sent:
            self.held.append((chunk, data_length))
            self.held_data += data_length
        else:
            self.caller_window -= data_length
            self._out += chunk
        self.touch()

    def to_caller_now(self, chunk: bytes) -> None:
        """Frames that may pass the held ones (window updates: they tell of bytes received, not sent), once the
        server's SETTINGS went first."""
        if not self._server_preface_sent:
            self.to_caller(chunk)
            return
        self._out += chunk
        self.touch()

    def _release_held(self) -> None:
        held = self.held
        while self._server_preface_sent and held and held[0][1] <= self.caller_window:
            chunk, data_length = held.popleft()
            self.held_data -= data_length
            self.caller_window -= data_length
            self._out += chunk

    def touch(self) -> None:
        FLUSHER.touched.add(self)

    def flush(self) -> None:
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(bytes(self._out))
        self._out.clear()
        back = self._back
        if self._back_out and back is not None and back.transport is not None and not back.transport.is_closing():
            back.transport.write(bytes(self._back_out))
        self._back_out.clear()

    def forget(self, stream_id: int) -> None:
        self.conn.forget(stream_id)

    def alone_while_backend_answers(self) -> bool:
        """Served alone (or by a departing backend), yet the backend takes connections again: time the caller
        came back to be paired."""
        return not self._back_open and not self._connecting and self._refuse_above is None

    def go_away(self) -> None:
        """A graceful GOAWAY: streams opened so far go on, the caller opens no new ones here."""
        self.usable = False
        if self._refuse_above is not None:
            return
        self._refuse_above = self._highest
        if not self._server_preface_sent:
            self.close()  # nothing was said yet: a GOAWAY may not come first
            return
        self.to_caller(wire.goaway(self._highest))

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self.relay.front_lost(self)
        self._close_back()
        for stream in self._streams.values():
            stream.code = stream.code if stream.code >= 0 else CANCELLED
            self.relay.relayed_ended(stream)
        self._streams.clear()
        for call in list(self.calls.values()):
            call.lost(self, f"connection lost: {exc}" if exc else "connection closed")
        self.calls.clear()
        FLUSHER.flush()

    def pause_writing(self) -> None:
        pass  # HTTP/2's windows bound what is written

    def resume_writing(self) -> None:
        pass


def _as_is(details: str) -> str:
    return details


class FrameRelay:
    """Serves callers' HTTP/2 connections on `listening`, each paired with a connection to `paired_path` (the
    runtime backend): a stream the `router` sends there is relayed on the pair; any other (the router's other
    upstreams, or the gRPC server's private socket, `fallback_path`, when it picks none or its upstream cannot be
    connected to) is a diverted call on cri.framerelay's h2 legs. A runtimeproxy.relay.SocketFront."""

    def __init__(self, listening: socket.socket, fallback_path: Path, router: Router, limits: Limits,
                 paired_path: Path | None = None, greeting: Greeting | None = None) -> None:
        self._listening = listening
        self._greeting = greeting  # accepting on `listening` until start() takes its connections over
        self._router = router
        self._limits = limits
        self.paired_path = paired_path
        self.fallback = Upstream(fallback_path)
        self._fronts: set[PairedFront] = set()
        self.pending: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.calls_started = 0  # read by the idle trimmer
        self.calls_in_flight = 0

    def new_front(self, greeted: bool = False) -> PairedFront:
        front = PairedFront(self, greeted)
        self._fronts.add(front)
        return front

    def front_lost(self, front: PairedFront) -> None:
        self._fronts.discard(front)

    async def start(self) -> None:
        """Accept on the listening socket; then the greeting's connections are taken over (its thread stopped) and
        served here."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self.new_front, sock=self._listening, backlog=listen_backlog(),
                                                     **KEEP_SOCKET_FILE)
        greeting, self._greeting = self._greeting, None
        greeted = greeting.handover() if greeting is not None else []
        for connection in greeted:
            try:
                await loop.connect_accepted_socket(lambda: self.new_front(greeted=True), connection)
            except OSError as error:
                log.debug("frame relay: cannot take over a greeted connection: %s", error)
                connection.close()
        if greeted:
            log.info("frame relay: serving the connections greeted while the proxy started (%d)", len(greeted))

    def new_call(self, front: PairedFront, stream_id: int, path: bytes, headers: Headers, ended: bool) -> None:
        self.calls_started += 1
        self.calls_in_flight += 1
        route = self._router(path)
        over = self.calls_in_flight > self._limits.max_calls
        if route is not None and not over and front.pairs_with(route):
            front.relay_stream(stream_id, path, headers, ended, route, self._limits)
            return
        call = _Call(front, stream_id, path, route.unreachable if route else _as_is, self._closed,
                     self._limits_for(route))
        call.up.end = ended
        if over:
            call.fail(RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")  # gRPC's own words
            return
        upstream = route.upstream if route is not None else self.fallback
        back = upstream.ready()
        if route is not None and back is not None and front.alone_while_backend_answers():
            front.go_away()  # this call goes on; the caller's next connection is paired
        if back is not None and call.attach(back, headers, route):
            return
        task = asyncio.get_running_loop().create_task(self._attach_later(call, route, headers))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def _limits_for(self, route: Route | None) -> tuple[int | None, int | None]:
        if route is None:
            return None, None  # the gRPC server holds its calls to them itself
        return self._limits.max_request_bytes, self._limits.max_response_bytes

    def relayed_ended(self, stream: _Relayed) -> None:
        self.calls_in_flight -= 1
        stream.route.ended(stream.path, stream.code if stream.code >= 0 else UNKNOWN,
                           time.perf_counter() - stream.started)

    def _closed(self, call: _Call) -> None:
        self.calls_in_flight -= 1
        forget = getattr(call.front, "forget", None)
        if forget is not None:
            forget(call.front_id)
        if call.route is not None:  # the gRPC server counts its own calls
            call.route.ended(call.path, call.code if call.code >= 0 else UNKNOWN, time.perf_counter() - call.started)

    async def _attach_later(self, call: _Call, route: Route | None, headers: Headers) -> None:
        """Connect first: to the route's upstream, else (nothing serves it) to the gRPC server, which answers
        UNAVAILABLE in its words while the backend is down."""
        for upstream, relayed in ((route.upstream, route) if route else (None, None), (self.fallback, None)):
            if upstream is None:
                continue
            back = await upstream.connect()
            if call.closed:
                return
            if back is not None and call.attach(back, headers, relayed):
                FLUSHER.flush()
                return
        call.fail(UNAVAILABLE, call.unreachable("nothing accepts connections"))
        FLUSHER.flush()

    async def stop_accepting(self) -> None:
        """Close the listening socket and tell callers to make no new calls here (GOAWAY)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for front in list(self._fronts):
            front.go_away()
        FLUSHER.flush()

    async def drain(self, seconds: float) -> None:
        """Wait (up to `seconds`) for the calls in flight, then close every connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline and self.calls_in_flight:
            await asyncio.sleep(0.01)
        for front in list(self._fronts):
            front.close()
        self.fallback.close()
