"""NRI's multiplexer checked against its wire (containerd/nri pkg/net/multiplex/mux.go, ttrpc.go): frames built
and parsed here by hand (uint32 big-endian connection id, uint32 big-endian length, payload), over a socketpair."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable

import pytest

from runtimeproxy.nri import mux
from runtimeproxy.nri.mux import Mux, MuxDecoder, MuxError, go_sized_chunks

MAX_PAYLOAD = 10 + 4 * 1024 * 1024


def mux_frame(conn_id: int, payload: bytes) -> bytes:
    return struct.pack(">II", conn_id, len(payload)) + payload


def parse_mux(data: bytes) -> list[tuple[int, bytes]]:
    frames = []
    while data:
        conn_id, length = struct.unpack(">II", data[:8])
        frames.append((conn_id, data[8:8 + length]))
        data = data[8 + length:]
    return frames


def run(coroutine: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 10))  # type: ignore[arg-type]


async def mux_and_raw_peer() -> tuple[Mux, socket.socket]:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    theirs.setblocking(False)
    return Mux(reader, writer), theirs


async def read_exactly(sock: socket.socket, count: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < count:
        chunk = await loop.sock_recv(sock, count - len(data))
        assert chunk, "peer closed"
        data += chunk
    return data


def test_the_constants_are_nris() -> None:
    assert (mux.HEADER_SIZE, mux.MAX_PAYLOAD) == (8, MAX_PAYLOAD)
    assert (mux.PLUGIN_SERVICE_CONN, mux.RUNTIME_SERVICE_CONN, mux.RESERVED_CONN) == (1, 2, 0)
    assert mux.encode_frame(0x01020304, b"xy") == b"\x01\x02\x03\x04\x00\x00\x00\x02xy"
    with pytest.raises(MuxError):
        mux.encode_frame(1, b"\0" * (MAX_PAYLOAD + 1))


def test_the_decoder_reassembles_frames_across_reads() -> None:
    wire = mux_frame(1, b"one") + mux_frame(2, b"") + mux_frame(2, b"two")
    decoder = MuxDecoder()
    got = [frame for byte in wire for frame in decoder.feed(bytes([byte]))]
    assert got == [(1, b"one"), (2, b""), (2, b"two")]


def test_the_decoder_refuses_a_frame_over_the_limit_before_buffering_it() -> None:
    with pytest.raises(MuxError):
        MuxDecoder().feed(struct.pack(">II", 1, MAX_PAYLOAD + 1))
    assert MuxDecoder().feed(mux_frame(1, b"\0" * MAX_PAYLOAD)) == [(1, b"\0" * MAX_PAYLOAD)]


def test_writes_are_cut_as_gos_bufio_writer_cuts_a_message() -> None:
    assert go_sized_chunks(b"a" * 4096) == [b"a" * 4096]
    assert [len(chunk) for chunk in go_sized_chunks(b"a" * 4097)] == [4096, 1]
    assert [len(chunk) for chunk in go_sized_chunks(b"a" * MAX_PAYLOAD)] == [4096, MAX_PAYLOAD - 4096]


def test_interleaved_logical_connections_each_read_their_own_bytes_in_order() -> None:
    async def scenario() -> None:
        ours, theirs = await mux_and_raw_peer()
        one, two = ours.open(1), ours.open(2)
        ours.start()
        # One 30-byte message for connection 1 spread over three frames, interleaved with connection 2's
        # frames, a frame for a connection nobody opened and an empty frame.
        message = bytes(range(30))
        theirs.sendall(mux_frame(1, message[:7]) + mux_frame(2, b"AB") + mux_frame(9, b"lost")
                       + mux_frame(1, message[7:8]) + mux_frame(2, b"") + mux_frame(2, b"C")
                       + mux_frame(1, message[8:]))
        got_one = b""
        while len(got_one) < 30:
            got_one += await one.read()
        got_two = b""
        while len(got_two) < 3:
            got_two += await two.read()
        assert (got_one, got_two) == (message, b"ABC")
        assert ours.dropped_frames == 1
        # Writes: each channel's data under its own id, a big message as two frames.
        await two.write(b"hello")
        await one.write(b"z" * 5000)
        sent = parse_mux(await read_exactly(theirs, 8 + 5 + 8 + 4096 + 8 + 904))
        assert sent == [(2, b"hello"), (1, b"z" * 4096), (1, b"z" * 904)]
        ours.close()
        theirs.close()
    run(scenario())


def test_the_peer_closing_ends_every_channel_and_an_oversized_frame_cuts_the_trunk() -> None:
    async def scenario() -> None:
        ours, theirs = await mux_and_raw_peer()
        one = ours.open(1)
        ours.start()
        theirs.sendall(mux_frame(1, b"last"))
        theirs.close()
        assert await one.read() == b"last"
        assert await one.read() == b""
        await ours.wait_closed()

        ours, theirs = await mux_and_raw_peer()
        one = ours.open(1)
        ours.start()
        theirs.sendall(struct.pack(">II", 1, MAX_PAYLOAD + 1))
        assert await one.read() == b""
        assert ours.error is not None and "exceeds" in ours.error
        with pytest.raises(MuxError):
            ours.open(2)
        theirs.close()
    run(scenario())


def test_connection_zero_is_reserved() -> None:
    async def scenario() -> None:
        ours, theirs = await mux_and_raw_peer()
        with pytest.raises(MuxError):
            ours.open(0)
        assert ours.open(1) is ours.open(1)
        ours.close()
        theirs.close()
    run(scenario())


def test_a_peer_flooding_one_connection_past_its_queue_is_cut_off() -> None:
    async def scenario() -> None:
        ours, theirs = await mux_and_raw_peer()
        ours.open(1)  # never read
        ours.start()
        theirs.sendall(mux_frame(1, b"x") * (mux.READ_QUEUE_FRAMES + 1))
        await ours.wait_closed()
        assert ours.error is not None and "queue" in ours.error
        theirs.close()
    run(scenario())
