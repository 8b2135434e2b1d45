"""HTTP/2 as the frame relay's fast path (cri.framepairs) handles it by hand: frames read and written whole
(RFC 9113 §4), header blocks written as HPACK literals that never touch a dynamic table (RFC 7541 §6.2.2), and
gRPC's length-prefixed messages measured as they pass."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import hpack
import hpack.table

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES = 9
DEFAULT_MAX_FRAME_BYTES = 16384
MAX_FRAME_PAYLOAD = 2**24 - 1  # HTTP/2's own bound (a peer holds the other to its SETTINGS)
DEFAULT_WINDOW_BYTES = 65535
MAX_WINDOW_BYTES = 2**31 - 1

# Frame types.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
# Flags.
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# Settings.
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
# Error codes.
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x0, 0x1, 0x3, 0x7, 0x8, 0x9

MESSAGE_PREFIX_BYTES = 5  # gRPC's length-prefixed message: compressed flag, 4-byte big-endian length

Frame = tuple[int, int, int, int, int]  # type, flags, stream id, payload start, payload end (in the buffer read)


class FrameError(Exception):
    """The peer broke HTTP/2 framing: the connection cannot go on."""


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big")) + payload


def frames(buffer: bytearray | bytes, max_payload: int) -> Iterator[Frame]:
    """The whole frames at the start of `buffer`; the caller drops what was read (the end of the last one)."""
    offset, size = 0, len(buffer)
    while size - offset >= FRAME_HEADER_BYTES:
        length = int.from_bytes(buffer[offset:offset + 3], "big")
        if length > max_payload:
            raise FrameError(f"a frame of {length} bytes, over the {max_payload} allowed")
        end = offset + FRAME_HEADER_BYTES + length
        if end > size:
            return
        stream_id = int.from_bytes(buffer[offset + 5:offset + 9], "big") & 0x7FFFFFFF
        yield buffer[offset + 3], buffer[offset + 4], stream_id, offset + FRAME_HEADER_BYTES, end
        offset = end


def unpadded(buffer: bytearray | bytes, flags: int, start: int, end: int, kind: int = DATA) -> tuple[int, int]:
    """The payload's content, without the padding (and, for HEADERS, the priority fields)."""
    if flags & PADDED:
        if end <= start:
            raise FrameError("a padded frame without its pad length")
        pad = buffer[start]
        start += 1
        end -= pad
    if kind == HEADERS and flags & PRIORITY_FLAG:
        start += 5
    if end < start:
        raise FrameError("padding longer than the frame")
    return start, end


def settings_of(payload: bytes) -> dict[int, int]:
    if len(payload) % 6:
        raise FrameError("a SETTINGS frame that is not a list of settings")
    return {int.from_bytes(payload[i:i + 2], "big"): int.from_bytes(payload[i + 2:i + 6], "big")
            for i in range(0, len(payload), 6)}


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, error_code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, error_code.to_bytes(4, "big"))


def goaway(last_stream_id: int, error_code: int = NO_ERROR) -> bytes:
    return frame(GOAWAY, 0, 0, last_stream_id.to_bytes(4, "big") + error_code.to_bytes(4, "big"))


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) in a first byte whose high bits are `first`."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal_block(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals without indexing, new names, no Huffman: whatever the receiver's dynamic table
    holds, it is neither used nor changed, so blocks can be dropped or added on a connection at will."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _integer(len(name), 7) + name + _integer(len(value), 7) + value
    return bytes(out)


def header_frames(stream_id: int, block: bytes, end_stream: bool, max_payload: int) -> bytes:
    """HEADERS (and CONTINUATION frames when the block is longer than a frame) carrying `block`."""
    first, rest = block[:max_payload], block[max_payload:]
    flags = (END_STREAM if end_stream else 0) | (0 if rest else END_HEADERS)
    out = [frame(HEADERS, flags, stream_id, first)]
    while rest:
        chunk, rest = rest[:max_payload], rest[max_payload:]
        out.append(frame(CONTINUATION, 0 if rest else END_HEADERS, stream_id, chunk))
    return b"".join(out)


class MessageMeter:
    """Measures the gRPC messages a stream carries from their 5-byte prefixes, however frames split them."""

    __slots__ = ("limit", "_prefix", "_remaining")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._prefix = b""  # of the next message, while split across frames
        self._remaining = 0  # bytes of the current message still to come

    def oversized(self, data: bytes | bytearray, start: int = 0, end: int | None = None) -> int | None:
        """The length of a message over the limit, if one starts in `data[start:end]` (read in place)."""
        offset, size = start, len(data) if end is None else end
        while offset < size:
            if self._remaining:
                step = min(self._remaining, size - offset)
                self._remaining -= step
                offset += step
                continue
            need = MESSAGE_PREFIX_BYTES - len(self._prefix)
            self._prefix += bytes(data[offset:min(offset + need, size)])
            offset += need
            if len(self._prefix) == MESSAGE_PREFIX_BYTES:
                length = int.from_bytes(self._prefix[1:], "big")
                self._prefix = b""
                if length > self.limit:
                    return length
                self._remaining = length
        return None


class _CountedTable(hpack.table.HeaderTable):
    """hpack's dynamic table, counting what is added to it."""

    def __init__(self) -> None:
        super().__init__()
        self.additions = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.additions += 1
        super().add(name, value)


class BlockDecoder:
    """HPACK decoding for one direction of a connection. A block that left the dynamic table as it found it
    (a caller's repeated request headers, all indexed) is kept: the same bytes on the same table decode the same,
    so the next one costs a dictionary look-up."""

    CACHED_BLOCKS = 64

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size)
        self._table = _CountedTable()
        self._decoder.header_table = self._table
        self._cache: dict[bytes, tuple[tuple[bytes, bytes], ...]] = {}

    def set_max_allowed_table_size(self, size: int) -> None:
        """The size the peer's encoder may set the table to (our side's SETTINGS_HEADER_TABLE_SIZE)."""
        self._decoder.max_allowed_table_size = size

    def _state(self) -> tuple[int, int]:
        return self._table.additions, self._table.maxsize

    def decode(self, block: bytes) -> tuple[tuple[bytes, bytes], ...]:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        before = self._state()
        headers = tuple((bytes(name), bytes(value)) for name, value in self._decoder.decode(block, raw=True))
        if self._state() != before:
            self._cache.clear()  # the table moved: what was kept may decode otherwise now
        elif len(block) <= 4096:
            if len(self._cache) >= self.CACHED_BLOCKS:
                self._cache.clear()
            self._cache[block] = headers
        return headers


class HeaderReader:
    """One direction's header blocks: a HEADERS frame and its CONTINUATION frames gathered, then decoded."""

    def __init__(self, max_header_list_size: int) -> None:
        self.decoder = BlockDecoder(max_header_list_size)
        self._max_block = max_header_list_size + 65536  # the list's bound, plus HPACK's own bytes
        self._pending: tuple[int, int, bytearray] | None = None

    @property
    def open(self) -> bool:
        """A block is begun: only its CONTINUATION frames may come next."""
        return self._pending is not None

    def feed(self, kind: int, flags: int, stream_id: int, buffer: bytearray | bytes, start: int,
             end: int) -> tuple[int, int, tuple[tuple[bytes, bytes], ...]] | None:
        """A HEADERS or CONTINUATION frame: once the block is whole, its stream, the HEADERS frame's flags and
        the headers."""
        if kind == HEADERS:
            if self._pending is not None or stream_id == 0:
                raise FrameError("HEADERS inside another header block, or on stream 0")
            begin, stop = unpadded(buffer, flags, start, end, HEADERS)
            pending = (stream_id, flags, bytearray(buffer[begin:stop]))
            self._pending = pending
        elif self._pending is not None and self._pending[0] == stream_id:
            pending = self._pending
            pending[2].extend(buffer[start:end])
        else:
            raise FrameError("CONTINUATION without its HEADERS")
        if len(pending[2]) > self._max_block:
            raise FrameError("a header block over the metadata limit")
        if not flags & END_HEADERS:
            return None
        self._pending = None
        return pending[0], pending[1], self.decoder.decode(bytes(pending[2]))

    def drop(self) -> None:
        self._pending = None
