"""containerd's ttrpc on asyncio: the frame codec and an endpoint that calls and serves unary methods.

The wire (containerd/ttrpc PROTOCOL.md, channel.go): every message is a 10-byte header followed by data,

    data length (uint32, big-endian) | stream id (uint32, big-endian) | message type (uint8) | flags (uint8)

with message types 1 request, 2 response, 3 data. Data longer than 4 MiB is refused: the receiver skips the
bytes and answers that stream with RESOURCE_EXHAUSTED; a sender refuses to send it. Client-initiated streams
have odd ids that only grow (the server answers an even or reused id with INVALID_ARGUMENT); a unary call is
one request frame and one response frame on its stream. Message types a peer does not know are ignored (the
protocol reserves them for the future). A request's data is a `ttrpc.Request` (service, method, payload,
timeout_nano, metadata), a response's a `ttrpc.Response` (a google.rpc.Status and the payload).

One `Endpoint` runs over one byte stream and plays both roles: it calls the peer (odd stream ids, replies
matched by id, any number of calls in flight) and serves the handlers registered with it. A request and a
response carrying the same id are different streams (the message type tells which side opened it), so both
peers may call over one stream. NRI uses one role per logical connection; the endpoint does not care.
Streaming (data frames) is not spoken: NRI has no streaming method.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, TypeVar

from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2  # type: ignore[import-untyped]  # googleapis-common-protos ships no type stubs

from runtimeproxy.pb.ttrpc import request_pb2

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IIBB")
HEADER_SIZE = HEADER.size  # 10
MAX_MESSAGE = 4 << 20  # the data of one frame, header excluded

FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4


class MessageType(IntEnum):
    REQUEST = 1
    RESPONSE = 2
    DATA = 3


class Code(IntEnum):
    """google.rpc.Code, the status codes ttrpc answers with."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class TtrpcError(Exception):
    """A call that ended with a non-OK status (from the peer, or decided here: timeout, closed, too big)."""

    def __init__(self, code: Code | int, message: str) -> None:
        super().__init__(f"{_code_name(code)}: {message}")
        self.code = Code(code) if code in Code._value2member_map_ else code
        self.message = message

    def status(self) -> status_pb2.Status:
        return status_pb2.Status(code=int(self.code), message=self.message)


class ConnectionClosed(TtrpcError):
    def __init__(self, message: str = "connection closed") -> None:
        super().__init__(Code.UNAVAILABLE, message)


def _code_name(code: int) -> str:
    return Code(code).name if code in Code._value2member_map_ else f"code {code}"


# -- frames -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    stream_id: int
    type: int  # a MessageType, or an unknown value a peer may send
    flags: int
    data: bytes


@dataclass(frozen=True)
class OversizedFrame:
    """A frame whose data exceeded MAX_MESSAGE: its bytes were skipped, only the header is known."""

    stream_id: int
    type: int
    length: int


def encode_frame(stream_id: int, message_type: int, data: bytes, flags: int = 0) -> bytes:
    if len(data) > MAX_MESSAGE:
        raise TtrpcError(Code.RESOURCE_EXHAUSTED,
                         f"message length {len(data)} exceeds maximum message size of {MAX_MESSAGE}")
    return HEADER.pack(len(data), stream_id, message_type, flags) + data


class FrameDecoder:
    """Cuts a byte stream into frames, whatever the read boundaries; skips oversized data without keeping it."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skipping = 0  # bytes of an oversized frame still to drop

    def feed(self, chunk: bytes) -> list[Frame | OversizedFrame]:
        self._buffer += chunk
        frames: list[Frame | OversizedFrame] = []
        while True:
            if self._skipping:
                dropped = min(self._skipping, len(self._buffer))
                del self._buffer[:dropped]
                self._skipping -= dropped
                if self._skipping:
                    return frames
            if len(self._buffer) < HEADER_SIZE:
                return frames
            length, stream_id, message_type, flags = HEADER.unpack_from(self._buffer)
            if length > MAX_MESSAGE:
                del self._buffer[:HEADER_SIZE]
                self._skipping = length
                frames.append(OversizedFrame(stream_id, message_type, length))
                continue
            if len(self._buffer) < HEADER_SIZE + length:
                return frames
            data = bytes(self._buffer[HEADER_SIZE:HEADER_SIZE + length])
            del self._buffer[:HEADER_SIZE + length]
            frames.append(Frame(stream_id, message_type, flags, data))

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (a stream that ends here ended mid-frame)."""
        return len(self._buffer) + self._skipping


# -- the endpoint -------------------------------------------------------------------------------------------


class ByteStream(Protocol):
    """One ordered, reliable byte stream (a unix connection, or a logical connection of nri.mux)."""

    async def read(self) -> bytes:
        """The next bytes received; b"" once the stream has ended."""

    async def write(self, data: bytes) -> None:
        """Sends `data` whole: writes of concurrent callers never interleave."""

    def close(self) -> None: ...


Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)
Handler = Callable[[Message], Awaitable[Message]]


@dataclass(frozen=True)
class _Method:
    request_type: type[Message]
    handler: Handler


class Endpoint:
    """A ttrpc peer over one byte stream: `call()` the other side, and serve what was `register()`ed."""

    def __init__(self, stream: ByteStream, *, name: str = "ttrpc") -> None:
        self._stream = stream
        self._name = name
        self._methods: dict[tuple[str, str], _Method] = {}
        self._pending: dict[int, asyncio.Future[Frame | OversizedFrame]] = {}
        self._next_stream_id = 1
        self._last_served_id = 0
        self._handling: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._close_reason = "connection closed"

    # serving

    def register(self, service: str, method: str, request_type: type[Req],
                 handler: Callable[[Req], Awaitable[Message]]) -> None:
        self._methods[(service, method)] = _Method(request_type, handler)  # type: ignore[arg-type]

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_loop(), name=f"{self._name} reader")

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def close(self, reason: str = "connection closed") -> None:
        if self._closed.is_set():
            return
        self._close_reason = reason
        self._closed.set()
        self._stream.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(reason))
        self._pending.clear()
        for task in list(self._handling):
            task.cancel()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()

    # calling

    async def call(self, service: str, method: str, request: Message, response_type: type[Resp],
                   timeout: float | None = None) -> Resp:
        """Calls `service`/`method`; raises TtrpcError (DEADLINE_EXCEEDED after `timeout` seconds)."""
        if self._closed.is_set():
            raise ConnectionClosed(self._close_reason)
        envelope = request_pb2.Request(service=service, method=method, payload=request.SerializeToString(),
                                       timeout_nano=int(timeout * 1e9) if timeout else 0)
        stream_id = self._take_stream_id()
        frame = encode_frame(stream_id, MessageType.REQUEST, envelope.SerializeToString())
        future: asyncio.Future[Frame | OversizedFrame] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            await self._stream.write(frame)
            async with asyncio.timeout(timeout):
                answer = await future
        except TimeoutError:
            raise TtrpcError(Code.DEADLINE_EXCEEDED, f"{service}/{method}: no answer in {timeout}s") from None
        except (ConnectionError, OSError) as error:
            raise ConnectionClosed(f"{service}/{method}: {error}") from None
        finally:
            self._pending.pop(stream_id, None)
        return _unwrap(answer, response_type, f"{service}/{method}")

    def _take_stream_id(self) -> int:
        stream_id = self._next_stream_id
        if stream_id > 0xFFFFFFFF:
            raise TtrpcError(Code.RESOURCE_EXHAUSTED, "stream ids exhausted")
        self._next_stream_id += 2
        return stream_id

    # receiving

    async def _read_loop(self) -> None:
        decoder = FrameDecoder()
        reason = "connection closed by peer"
        try:
            while chunk := await self._stream.read():
                for frame in decoder.feed(chunk):
                    self._dispatch(frame)
            if decoder.pending:
                reason = f"connection closed by peer mid-frame ({decoder.pending} bytes pending)"
        except (ConnectionError, OSError) as error:
            reason = f"connection lost: {error}"
        except asyncio.CancelledError:
            pass
        self.close(reason)

    def _dispatch(self, frame: Frame | OversizedFrame) -> None:
        if frame.type == MessageType.RESPONSE:
            future = self._pending.get(frame.stream_id)
            if future is not None and not future.done():
                future.set_result(frame)
            else:
                log.debug("%s: response for stream %d that no call waits for", self._name, frame.stream_id)
        elif isinstance(frame, OversizedFrame):
            self._answer(frame.stream_id, TtrpcError(
                Code.RESOURCE_EXHAUSTED,
                f"message length {frame.length} exceed maximum message size of {MAX_MESSAGE}").status())
        elif frame.type == MessageType.REQUEST:
            self._accept_request(frame)
        elif frame.type == MessageType.DATA:
            self._answer(frame.stream_id, _status(Code.INVALID_ARGUMENT, "StreamID is no longer active"))
        else:
            log.debug("%s: ignoring message type %d on stream %d", self._name, frame.type, frame.stream_id)

    def _accept_request(self, frame: Frame) -> None:
        if frame.stream_id % 2 != 1:
            self._answer(frame.stream_id, _status(Code.INVALID_ARGUMENT,
                                                  "StreamID must be odd for client initiated streams"))
            return
        if frame.stream_id <= self._last_served_id:
            self._answer(frame.stream_id, _status(Code.INVALID_ARGUMENT,
                                                  "StreamID cannot be re-used and must increment"))
            return
        self._last_served_id = frame.stream_id
        envelope = request_pb2.Request()
        try:
            envelope.ParseFromString(frame.data)
        except DecodeError as error:
            self._answer(frame.stream_id, _status(Code.INVALID_ARGUMENT, f"unmarshal request error: {error}"))
            return
        task = asyncio.create_task(self._serve(frame.stream_id, envelope),
                                   name=f"{self._name} {envelope.service}/{envelope.method}")
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _serve(self, stream_id: int, envelope: request_pb2.Request) -> None:
        method = self._methods.get((envelope.service, envelope.method))
        if method is None:
            known = any(service == envelope.service for service, _ in self._methods)
            missing = f"method {envelope.method}" if known else f"service {envelope.service}"
            self._answer(stream_id, _status(Code.UNIMPLEMENTED, missing))
            return
        request = method.request_type()
        try:
            request.ParseFromString(envelope.payload)
        except DecodeError as error:
            self._answer(stream_id, _status(Code.INTERNAL, f"error unmarshalling payload: {error}"))
            return
        timeout = envelope.timeout_nano / 1e9 if envelope.timeout_nano > 0 else None
        try:
            async with asyncio.timeout(timeout):
                answer = await method.handler(request)
        except TtrpcError as error:
            self._answer(stream_id, error.status())
        except TimeoutError:
            self._answer(stream_id, _status(Code.DEADLINE_EXCEEDED, "context deadline exceeded"))
        except Exception as error:  # a handler's bug is the caller's UNKNOWN, not the end of the connection
            log.exception("%s: %s/%s failed", self._name, envelope.service, envelope.method)
            self._answer(stream_id, _status(Code.UNKNOWN, str(error) or type(error).__name__))
        else:
            self._answer(stream_id, status_pb2.Status(code=Code.OK), answer.SerializeToString())

    def _answer(self, stream_id: int, status: status_pb2.Status, payload: bytes = b"") -> None:
        if self._closed.is_set():
            return
        envelope = request_pb2.Response(status=status, payload=payload)
        try:
            frame = encode_frame(stream_id, MessageType.RESPONSE, envelope.SerializeToString())
        except TtrpcError as error:  # the answer itself is too big: say so instead
            frame = encode_frame(stream_id, MessageType.RESPONSE,
                                 request_pb2.Response(status=error.status()).SerializeToString())
        task = asyncio.create_task(self._send(frame), name=f"{self._name} answer {stream_id}")
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _send(self, frame: bytes) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._stream.write(frame)


def _status(code: Code, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=int(code), message=message)


def _unwrap(answer: Frame | OversizedFrame, response_type: type[Resp], what: str) -> Resp:
    if isinstance(answer, OversizedFrame):
        raise TtrpcError(Code.RESOURCE_EXHAUSTED,
                         f"{what}: response length {answer.length} exceeds maximum message size of {MAX_MESSAGE}")
    envelope = request_pb2.Response()
    try:
        envelope.ParseFromString(answer.data)
    except DecodeError as error:
        raise TtrpcError(Code.INTERNAL, f"{what}: undecodable response: {error}") from None
    if envelope.HasField("status") and envelope.status.code != Code.OK:
        raise TtrpcError(envelope.status.code, envelope.status.message)
    response = response_type()
    try:
        response.ParseFromString(envelope.payload)
    except DecodeError as error:
        raise TtrpcError(Code.INTERNAL, f"{what}: undecodable {response_type.__name__}: {error}") from None
    return response
