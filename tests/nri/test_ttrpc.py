"""ttrpc framing and the endpoint, checked against the documented wire (containerd/ttrpc PROTOCOL.md, channel.go,
server.go): frames are built and read here by hand with struct, not with the module's own codec."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest
from google.rpc import code_pb2

from runtimeproxy.nri import ttrpc
from runtimeproxy.nri.ttrpc import Code, ConnectionClosed, Endpoint, Frame, FrameDecoder, OversizedFrame, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri
from runtimeproxy.pb.ttrpc import request_pb2

from tests.kits.nri import MemoryStream, memory_pipe

SERVICE = "nri.pkg.api.v1alpha1.Plugin"
MAX = 4 * 1024 * 1024


def frame(stream_id: int, message_type: int, data: bytes, flags: int = 0) -> bytes:
    """A frame as PROTOCOL.md draws it: length, stream id (both uint32 big-endian), type, flags, data."""
    return struct.pack(">IIBB", len(data), stream_id, message_type, flags) + data


def split_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """The framing rules again, minimally: (stream id, type, flags, data) of every whole frame in `data`."""
    frames = []
    while data:
        length, stream_id, message_type, flags = struct.unpack(">IIBB", data[:10])
        frames.append((stream_id, message_type, flags, data[10:10 + length]))
        data = data[10 + length:]
    return frames


def request_bytes(stream_id: int, method: str, message: object, service: str = SERVICE, timeout_nano: int = 0) -> bytes:
    envelope = request_pb2.Request(service=service, method=method, payload=message.SerializeToString(),  # type: ignore[attr-defined]
                                   timeout_nano=timeout_nano)
    return frame(stream_id, 1, envelope.SerializeToString())


def run(coroutine: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 10))  # type: ignore[arg-type]


# -- the frame codec ----------------------------------------------------------------------------------------


def test_the_header_is_length_stream_type_flags_big_endian() -> None:
    assert ttrpc.HEADER_SIZE == 10 and ttrpc.MAX_MESSAGE == MAX
    assert ttrpc.encode_frame(0x01020305, ttrpc.MessageType.RESPONSE, b"abc", flags=0x04) == \
        b"\x00\x00\x00\x03\x01\x02\x03\x05\x02\x04abc"
    assert (ttrpc.MessageType.REQUEST, ttrpc.MessageType.RESPONSE, ttrpc.MessageType.DATA) == (1, 2, 3)


def test_a_message_split_across_many_reads_is_one_frame() -> None:
    wire = frame(7, 1, b"hello world")
    decoder = FrameDecoder()
    seen = [decoded for byte in wire for decoded in decoder.feed(bytes([byte]))]
    assert seen == [Frame(7, 1, 0, b"hello world")]
    assert decoder.pending == 0


def test_several_frames_in_one_read_and_a_partial_tail() -> None:
    wire = frame(1, 1, b"a") + frame(3, 2, b"") + frame(5, 3, b"ccc", flags=1) + frame(7, 1, b"dddd")[:6]
    decoder = FrameDecoder()
    assert decoder.feed(wire) == [Frame(1, 1, 0, b"a"), Frame(3, 2, 0, b""), Frame(5, 3, 1, b"ccc")]
    assert decoder.pending == 6


def test_an_oversized_frame_is_skipped_without_being_kept_and_the_next_frame_is_read() -> None:
    decoder = FrameDecoder()
    header = struct.pack(">IIBB", MAX + 1, 9, 1, 0)
    assert decoder.feed(header + b"x" * 1000) == [OversizedFrame(9, 1, MAX + 1)]
    for _ in range((MAX + 1 - 1000) // (1 << 20)):
        assert decoder.feed(b"x" * (1 << 20)) == []
    rest = (MAX + 1 - 1000) % (1 << 20)
    assert decoder.pending == rest
    assert decoder.feed(b"x" * rest + frame(11, 1, b"ok")) == [Frame(11, 1, 0, b"ok")]


def test_a_frame_of_exactly_the_maximum_is_accepted_and_one_byte_more_is_refused_by_the_sender() -> None:
    assert FrameDecoder().feed(frame(1, 2, b"\0" * MAX)) == [Frame(1, 2, 0, b"\0" * MAX)]
    with pytest.raises(TtrpcError) as refused:
        ttrpc.encode_frame(1, 1, b"\0" * (MAX + 1))
    assert refused.value.code == Code.RESOURCE_EXHAUSTED


def test_unknown_message_types_are_decoded_for_the_endpoint_to_ignore() -> None:
    assert FrameDecoder().feed(frame(1, 0x7F, b"future")) == [Frame(1, 0x7F, 0, b"future")]


def test_codes_are_google_rpc_codes() -> None:
    assert {code.name: int(code) for code in Code} == {
        name: value for name, value in code_pb2.Code.items()}


# -- an endpoint serving: hand-built requests, answers read back by hand --------------------------------------


Handler = Callable[[nri.ConfigureRequest], Awaitable[nri.ConfigureResponse]]


async def _serving(handler: Handler | None = None) -> tuple[Endpoint, MemoryStream]:
    ours, raw = memory_pipe()
    endpoint = Endpoint(ours)

    async def configure(request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        return nri.ConfigureResponse(events=len(request.runtime_name))

    endpoint.register(SERVICE, "Configure", nri.ConfigureRequest, handler or configure)
    endpoint.start()
    return endpoint, raw


async def _answers(raw: MemoryStream, count: int) -> dict[int, request_pb2.Response]:
    got = b""
    while len(split_frames_complete(got)) < count:
        got += await raw.read()
    answers = {}
    for stream_id, message_type, flags, data in split_frames_complete(got):
        assert (message_type, flags) == (2, 0)
        answers[stream_id] = request_pb2.Response.FromString(data)
    return answers


def split_frames_complete(data: bytes) -> list[tuple[int, int, int, bytes]]:
    whole = b""
    while len(data) >= 10:
        length = struct.unpack(">I", data[:4])[0]
        if len(data) < 10 + length:
            break
        whole, data = whole + data[:10 + length], data[10 + length:]
    return split_frames(whole)


def test_a_request_is_served_on_its_stream_with_an_ok_status() -> None:
    async def scenario() -> None:
        _, raw = await _serving()
        raw.peer.feed(request_bytes(1, "Configure", nri.ConfigureRequest(runtime_name="proxy")))  # type: ignore[union-attr]
        answer = (await _answers(raw, 1))[1]
        assert answer.status.code == 0
        assert nri.ConfigureResponse.FromString(answer.payload).events == 5
    run(scenario())


def test_even_reused_unknown_and_undecodable_requests_get_the_status_ttrpc_gives() -> None:
    async def scenario() -> None:
        _, raw = await _serving()
        inbox = raw.peer
        assert inbox is not None
        inbox.feed(request_bytes(2, "Configure", nri.ConfigureRequest()))  # even: server-initiated ids
        inbox.feed(request_bytes(5, "Configure", nri.ConfigureRequest()))
        inbox.feed(request_bytes(3, "Configure", nri.ConfigureRequest()))  # lower than 5: reused
        inbox.feed(request_bytes(7, "Nope", nri.ConfigureRequest()))
        inbox.feed(request_bytes(9, "Configure", nri.ConfigureRequest(), service="nri.Other"))
        inbox.feed(frame(11, 1, b"\xff\xff\xff"))
        inbox.feed(frame(13, 0x7F, b"from the future"))  # unknown type: ignored, no answer
        inbox.feed(frame(15, 3, b""))  # data on a stream that is not open
        answers = await _answers(raw, 7)
        assert sorted(answers) == [2, 3, 5, 7, 9, 11, 15]
        assert (answers[2].status.code, answers[2].status.message) == (
            Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
        assert answers[5].status.code == Code.OK
        assert answers[3].status.message == "StreamID cannot be re-used and must increment"
        assert (answers[7].status.code, answers[7].status.message) == (Code.UNIMPLEMENTED, "method Nope")
        assert (answers[9].status.code, answers[9].status.message) == (Code.UNIMPLEMENTED, "service nri.Other")
        assert answers[11].status.code == Code.INVALID_ARGUMENT
        assert answers[15].status.code == Code.INVALID_ARGUMENT
    run(scenario())


def test_an_oversized_request_is_answered_resource_exhausted_and_the_connection_goes_on() -> None:
    async def scenario() -> None:
        _, raw = await _serving()
        inbox = raw.peer
        assert inbox is not None
        inbox.feed(struct.pack(">IIBB", MAX + 10, 1, 1, 0))
        for _ in range(4):
            inbox.feed(b"\0" * ((MAX + 10) // 4))
        inbox.feed(b"\0" * ((MAX + 10) % 4))
        inbox.feed(request_bytes(3, "Configure", nri.ConfigureRequest(runtime_name="ab")))
        answers = await _answers(raw, 2)
        assert answers[1].status.code == Code.RESOURCE_EXHAUSTED
        assert nri.ConfigureResponse.FromString(answers[3].payload).events == 2
    run(scenario())


def test_handler_errors_become_statuses_and_the_request_deadline_is_honoured() -> None:
    async def handler(request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        if request.runtime_name == "refuse":
            raise TtrpcError(Code.FAILED_PRECONDITION, "not now")
        if request.runtime_name == "crash":
            raise RuntimeError("bug")
        await asyncio.Event().wait()  # never answers by itself
        raise AssertionError

    async def scenario() -> None:
        _, raw = await _serving(handler)
        inbox = raw.peer
        assert inbox is not None
        inbox.feed(request_bytes(1, "Configure", nri.ConfigureRequest(runtime_name="refuse")))
        inbox.feed(request_bytes(3, "Configure", nri.ConfigureRequest(runtime_name="crash")))
        inbox.feed(request_bytes(5, "Configure", nri.ConfigureRequest(), timeout_nano=50_000_000))
        answers = await _answers(raw, 3)
        assert (answers[1].status.code, answers[1].status.message) == (Code.FAILED_PRECONDITION, "not now")
        assert (answers[3].status.code, answers[3].status.message) == (Code.UNKNOWN, "bug")
        assert answers[5].status.code == Code.DEADLINE_EXCEEDED
    run(scenario())


# -- an endpoint calling -------------------------------------------------------------------------------------


def test_calls_use_odd_growing_stream_ids_and_the_documented_envelope() -> None:
    async def scenario() -> None:
        ours, raw = memory_pipe()
        endpoint = Endpoint(ours)
        endpoint.start()
        calls = [asyncio.create_task(endpoint.call(SERVICE, "Configure", nri.ConfigureRequest(runtime_name=str(n)),
                                                   nri.ConfigureResponse, timeout=3)) for n in range(3)]
        got = b""
        while len(split_frames_complete(got)) < 3:
            got += await raw.read()
        sent = split_frames_complete(got)
        assert [(stream_id, message_type, flags) for stream_id, message_type, flags, _ in sent] == \
            [(1, 1, 0), (3, 1, 0), (5, 1, 0)]
        envelopes = [request_pb2.Request.FromString(data) for *_, data in sent]
        assert {(e.service, e.method, e.timeout_nano) for e in envelopes} == {(SERVICE, "Configure", 3_000_000_000)}
        assert [nri.ConfigureRequest.FromString(e.payload).runtime_name for e in envelopes] == ["0", "1", "2"]
        # Answered out of order, each lands on its own call.
        for stream_id in (5, 1, 3):
            raw.peer.feed(frame(stream_id, 2, request_pb2.Response(  # type: ignore[union-attr]
                payload=nri.ConfigureResponse(events=stream_id).SerializeToString()).SerializeToString()))
        assert [(await call).events for call in calls] == [1, 3, 5]
    run(scenario())


def test_a_call_without_an_answer_times_out_and_a_late_answer_is_ignored() -> None:
    async def scenario() -> None:
        ours, raw = memory_pipe()
        endpoint = Endpoint(ours)
        endpoint.start()
        with pytest.raises(TtrpcError) as late:
            await endpoint.call(SERVICE, "Configure", nri.ConfigureRequest(), nri.ConfigureResponse, timeout=0.05)
        assert late.value.code == Code.DEADLINE_EXCEEDED
        raw.peer.feed(frame(1, 2, request_pb2.Response().SerializeToString()))  # type: ignore[union-attr]
        raw.peer.feed(frame(3, 2, request_pb2.Response(  # type: ignore[union-attr]
            status={"code": Code.NOT_FOUND, "message": "no such pod"}).SerializeToString()))
        with pytest.raises(TtrpcError) as refused:
            await endpoint.call(SERVICE, "Configure", nri.ConfigureRequest(), nri.ConfigureResponse, timeout=3)
        assert (refused.value.code, refused.value.message) == (Code.NOT_FOUND, "no such pod")
    run(scenario())


def test_an_oversized_answer_fails_its_call_only() -> None:
    async def scenario() -> None:
        ours, raw = memory_pipe()
        endpoint = Endpoint(ours)
        endpoint.start()
        call = asyncio.create_task(endpoint.call(SERVICE, "Synchronize", nri.SynchronizeRequest(),
                                                 nri.SynchronizeResponse, timeout=5))
        await raw.read()
        raw.peer.feed(struct.pack(">IIBB", MAX + 1, 1, 2, 0) + b"\0" * (MAX + 1))  # type: ignore[union-attr]
        with pytest.raises(TtrpcError) as refused:
            await call
        assert refused.value.code == Code.RESOURCE_EXHAUSTED
        assert not endpoint.closed
    run(scenario())


def test_a_closed_connection_fails_the_calls_in_flight() -> None:
    async def scenario() -> None:
        ours, raw = memory_pipe()
        endpoint = Endpoint(ours)
        endpoint.start()
        call = asyncio.create_task(endpoint.call(SERVICE, "Configure", nri.ConfigureRequest(),
                                                 nri.ConfigureResponse, timeout=5))
        await raw.read()
        raw.close()
        with pytest.raises(ConnectionClosed):
            await call
        await endpoint.wait_closed()
    run(scenario())


def test_two_endpoints_call_each_other_over_one_stream_concurrently() -> None:
    """Both peers call with odd ids on one stream: requests and responses are told apart by message type."""
    async def scenario() -> None:
        left_stream, right_stream = memory_pipe()
        left, right = Endpoint(left_stream, name="left"), Endpoint(right_stream, name="right")

        async def left_configure(request: nri.ConfigureRequest) -> nri.ConfigureResponse:
            # Calls back into the peer before answering: the peer must keep serving while it waits on us.
            back = await left.call(SERVICE, "Configure", nri.ConfigureRequest(runtime_name="xy"),
                                   nri.ConfigureResponse, timeout=3)
            return nri.ConfigureResponse(events=back.events + 100)

        async def right_configure(request: nri.ConfigureRequest) -> nri.ConfigureResponse:
            return nri.ConfigureResponse(events=len(request.runtime_name))

        left.register(SERVICE, "Configure", nri.ConfigureRequest, left_configure)
        right.register(SERVICE, "Configure", nri.ConfigureRequest, right_configure)
        left.start()
        right.start()
        answer = await right.call(SERVICE, "Configure", nri.ConfigureRequest(), nri.ConfigureResponse, timeout=3)
        assert answer.events == 102
    run(scenario())
