"""The frame relay's hand-written HTTP/2 pieces, read back by python-hyper's own decoder and parser."""

from __future__ import annotations

import hpack
import hyperframe.frame
import pytest

from runtimeproxy.cri import h2frames as wire

HEADERS = [(b":method", b"POST"), (b":path", b"/runtime.v1.RuntimeService/Version"), (b"te", b"trailers"),
           (b"x-long", b"v" * 300)]


def test_a_literal_block_decodes_to_its_headers_and_leaves_the_table_alone() -> None:
    decoder = hpack.Decoder()
    decoder.header_table.add(b"kept", b"entry")
    assert decoder.decode(wire.literal_block(HEADERS), raw=True) == HEADERS
    assert list(decoder.header_table.dynamic_entries) == [(b"kept", b"entry")]


def test_a_long_block_is_split_into_continuation_frames() -> None:
    block = wire.literal_block(HEADERS)
    data = wire.header_frames(5, block, end_stream=True, max_payload=100)
    parsed = list(wire.frames(data, wire.MAX_WINDOW_BYTES))
    assert [kind for kind, *_ in parsed] == [wire.HEADERS] + [wire.CONTINUATION] * (len(parsed) - 1)
    assert parsed[0][1] == wire.END_STREAM and parsed[-1][1] == wire.END_HEADERS
    assert {stream for _, _, stream, _, _ in parsed} == {5}
    assert b"".join(data[start:end] for *_, start, end in parsed) == block


def test_frames_are_read_whole_and_match_hyperframes_serialization() -> None:
    frame = hyperframe.frame.DataFrame(3, b"payload", flags=["END_STREAM"]).serialize()
    update = hyperframe.frame.WindowUpdateFrame(0, window_increment=1000).serialize()
    data = frame + update + frame[:5]  # a partial frame at the end stays unread
    parsed = list(wire.frames(data, 16384))
    assert [(kind, flags, stream) for kind, flags, stream, _, _ in parsed] == [
        (wire.DATA, wire.END_STREAM, 3), (wire.WINDOW_UPDATE, 0, 0)]
    assert parsed[-1][4] == len(frame) + len(update)
    assert wire.window_update(0, 1000) == update
    assert wire.rst_stream(7, wire.CANCEL) == hyperframe.frame.RstStreamFrame(7, error_code=wire.CANCEL).serialize()
    goaway = hyperframe.frame.GoAwayFrame(0, last_stream_id=9, error_code=0).serialize()
    assert wire.goaway(9) == goaway


def test_padding_and_priority_are_left_out_of_the_payload() -> None:
    frame = hyperframe.frame.HeadersFrame(1, b"block", flags=["PADDED", "PRIORITY", "END_HEADERS"], pad_length=4,
                                          depends_on=0, stream_weight=15).serialize()
    (kind, flags, _, start, end), = wire.frames(frame, 16384)
    begin, stop = wire.unpadded(frame, flags, start, end, kind)
    assert frame[begin:stop] == b"block"


def test_a_frame_over_the_bound_and_broken_padding_are_errors() -> None:
    with pytest.raises(wire.FrameError):
        list(wire.frames(wire.frame(wire.DATA, 0, 1, b"x" * 20), 10))
    with pytest.raises(wire.FrameError):
        wire.unpadded(b"\x09abc", wire.PADDED, 0, 4)


def test_settings_are_read_as_pairs() -> None:
    frame = hyperframe.frame.SettingsFrame(0, settings={wire.MAX_FRAME_SIZE: 32768, wire.INITIAL_WINDOW_SIZE: 1}).serialize()
    (_, _, _, start, end), = wire.frames(frame, 16384)
    assert wire.settings_of(frame[start:end]) == {wire.MAX_FRAME_SIZE: 32768, wire.INITIAL_WINDOW_SIZE: 1}


def test_the_meter_reads_prefixes_in_place_across_frames() -> None:
    meter = wire.MessageMeter(10)
    message = b"\x00" + (10).to_bytes(4, "big") + b"x" * 10
    data = b"pad" + message + b"\x00\x00"
    assert meter.oversized(data, 3, len(data)) is None  # one message at the limit, the next one's prefix begun
    assert meter.oversized(b"\x00\x00\x0b") == 11


def test_the_block_decoder_keeps_only_blocks_that_left_the_table_alone() -> None:
    """Against hpack's own encoder (which indexes what it sends) and a plain decoder fed the same blocks: the
    first block adds entries, the same headers again are all indexed (kept), a changed value adds an entry and
    shifts the indices, after which the kept bytes decode otherwise, and do."""
    encoder, decoder, plain = hpack.Encoder(), wire.BlockDecoder(65536), hpack.Decoder()
    other = [*HEADERS[:3], (b"x-long", b"w")]
    first, again = encoder.encode(HEADERS, huffman=False), encoder.encode(HEADERS, huffman=False)
    changed = encoder.encode(other, huffman=False)
    for block in (first, again, again, changed, again):
        assert decoder.decode(block) == tuple(plain.decode(block, raw=True))
    assert decoder.decode(again) != tuple(HEADERS)  # stale indices: what the plain decoder says, not the cache


def test_a_table_size_update_is_held_to_what_our_side_allowed() -> None:
    decoder = wire.BlockDecoder(65536)
    decoder.set_max_allowed_table_size(100)
    with pytest.raises(hpack.HPACKError):
        decoder.decode(b"\x3f\xe1\x1f")  # a size update to 4096


def test_a_header_block_is_read_whole_from_its_frames() -> None:
    reader = wire.HeaderReader(65536)
    data = wire.header_frames(3, wire.literal_block(HEADERS), end_stream=True, max_payload=50)
    results = [reader.feed(kind, flags, stream, data, start, end)
               for kind, flags, stream, start, end in wire.frames(data, 16384)]
    assert results[:-1] == [None] * (len(results) - 1) and not reader.open
    assert results[-1] == (3, wire.END_STREAM, tuple(HEADERS))
    with pytest.raises(wire.FrameError):
        reader.feed(wire.CONTINUATION, wire.END_HEADERS, 3, b"", 0, 0)  # no HEADERS before it
