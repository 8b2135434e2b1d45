"""containerd/nri's connection multiplexer (pkg/net/multiplex) on asyncio: several byte streams over one socket.

The wire: a sequence of frames, each an 8-byte header and a payload,

    connection id (uint32, big-endian) | payload length (uint32, big-endian) | payload

Connection id 0 is reserved. NRI opens two logical connections on every plugin socket: id 1 carries the
plugin's service (the runtime calls Configure, Synchronize, events; the plugin serves) and id 2 the runtime's
service (the plugin calls RegisterPlugin and UpdateContainers; the runtime serves), each a ttrpc byte stream.
A frame's payload is at most 10 + 4 MiB, a whole ttrpc message; a sender refuses more (EMSGSIZE). Opening a
connection is local bookkeeping (nothing is sent), and frames for a connection nobody opened are dropped.
Frame boundaries mean nothing to the stream inside: a ttrpc message may span frames, a frame may end mid-way.

Writing for a Go peer: the Go side reads a logical connection into bufio's 4096-byte buffer, and its mux hands
over a frame only whole — a frame larger than the read buffer fails that read (ENOMEM). Go's own writer
(ttrpc's bufio.Writer, 4096 bytes) therefore sends a message as at most two frames: the first 4096 bytes, then
the rest in one write, which the Go reader takes straight into the message buffer. `Channel.write` cuts data
the same way, so every frame we send is one a Go peer can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque

log = logging.getLogger(__name__)

HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size  # 8
MAX_PAYLOAD = 10 + (4 << 20)  # a ttrpc header and its largest message
RESERVED_CONN = 0
PLUGIN_SERVICE_CONN = 1  # runtime -> plugin calls
RUNTIME_SERVICE_CONN = 2  # plugin -> runtime calls
GO_READ_BUFFER = 4096
READ_QUEUE_FRAMES = 256  # NRI's per-connection queue; a peer that floods past it is cut off, as NRI does


class MuxError(Exception):
    pass


def encode_frame(conn_id: int, payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise MuxError(f"oversized message ({len(payload)} > {MAX_PAYLOAD})")
    return HEADER.pack(conn_id, len(payload)) + payload


def go_sized_chunks(data: bytes) -> list[bytes]:
    """`data` cut as Go's 4096-byte bufio.Writer writes one message: the first 4096 bytes, then the rest."""
    if len(data) <= GO_READ_BUFFER:
        return [data]
    rest = data[GO_READ_BUFFER:]
    return [data[:GO_READ_BUFFER]] + [rest[at:at + MAX_PAYLOAD] for at in range(0, len(rest), MAX_PAYLOAD)]


class MuxDecoder:
    """Cuts the trunk's bytes into (connection id, payload) frames, whatever the read boundaries."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        self._buffer += chunk
        frames: list[tuple[int, bytes]] = []
        while len(self._buffer) >= HEADER_SIZE:
            conn_id, length = HEADER.unpack_from(self._buffer)
            if length > MAX_PAYLOAD:
                # A Go peer never writes this; buffering it would let a peer claim 4 GiB of our memory.
                raise MuxError(f"frame of {length} bytes for connection {conn_id} exceeds {MAX_PAYLOAD}")
            if len(self._buffer) < HEADER_SIZE + length:
                break
            frames.append((conn_id, bytes(self._buffer[HEADER_SIZE:HEADER_SIZE + length])))
            del self._buffer[:HEADER_SIZE + length]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


class Channel:
    """One logical connection of a Mux: a ttrpc.ByteStream."""

    def __init__(self, mux: Mux, conn_id: int) -> None:
        self._mux = mux
        self.conn_id = conn_id
        self._queue: deque[bytes] = deque()
        self._readable = asyncio.Event()
        self._ended = False

    async def read(self) -> bytes:
        while not self._queue:
            if self._ended:
                return b""
            self._readable.clear()
            await self._readable.wait()
        return self._queue.popleft()

    async def write(self, data: bytes) -> None:
        await self._mux.send(self.conn_id, data)

    def close(self) -> None:
        self._mux.forget(self)
        self._end()

    def _deliver(self, payload: bytes) -> bool:
        if not payload:  # an empty frame carries nothing (and b"" from read() means the end)
            return True
        if len(self._queue) >= READ_QUEUE_FRAMES:
            return False
        self._queue.append(payload)
        self._readable.set()
        return True

    def _end(self) -> None:
        self._ended = True
        self._readable.set()


class Mux:
    """Demultiplexes one stream connection (asyncio reader/writer) into Channels; `start()` begins reading."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, name: str = "nri mux") -> None:
        self._reader = reader
        self._writer = writer
        self._name = name
        self._channels: dict[int, Channel] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self.error: str | None = None
        self.dropped_frames = 0  # frames for connections not opened here

    def open(self, conn_id: int) -> Channel:
        if conn_id == RESERVED_CONN:
            raise MuxError(f"ConnID {conn_id} is reserved")
        if self._closed.is_set():
            raise MuxError(f"{self._name} is closed")
        channel = self._channels.get(conn_id)
        if channel is None:
            channel = self._channels[conn_id] = Channel(self, conn_id)
        return channel

    def start(self) -> None:
        """Starts reading the trunk; open the channels first, so that no early frame is dropped."""
        if self._task is None:
            self._task = asyncio.create_task(self._read_loop(), name=f"{self._name} reader")

    async def send(self, conn_id: int, data: bytes) -> None:
        if self._closed.is_set():
            raise ConnectionResetError(f"{self._name} is closed")
        frames = b"".join(encode_frame(conn_id, chunk) for chunk in go_sized_chunks(data))
        async with self._write_lock:
            self._writer.write(frames)
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as error:
                self._fail(f"write failed: {error}")
                raise

    def forget(self, channel: Channel) -> None:
        if self._channels.get(channel.conn_id) is channel:
            del self._channels[channel.conn_id]

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for channel in list(self._channels.values()):
            channel._end()
        self._channels.clear()
        with contextlib.suppress(Exception):
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    def _fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
            log.info("%s: %s", self._name, error)
        self.close()

    async def _read_loop(self) -> None:
        decoder = MuxDecoder()
        try:
            while chunk := await self._reader.read(1 << 16):
                for conn_id, payload in decoder.feed(chunk):
                    self._route(conn_id, payload)
            if decoder.pending:
                self._fail(f"trunk closed mid-frame ({decoder.pending} bytes pending)")
        except MuxError as error:
            self._fail(str(error))
        except (ConnectionError, OSError) as error:
            self._fail(f"read failed: {error}")
        except asyncio.CancelledError:
            pass
        self.close()

    def _route(self, conn_id: int, payload: bytes) -> None:
        channel = self._channels.get(conn_id)
        if channel is None:
            self.dropped_frames += 1
            return
        if not channel._deliver(payload):
            raise MuxError(f"failed to queue payload for reading on connection {conn_id}")
