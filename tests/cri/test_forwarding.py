"""The raw-bytes relay, against a synthetic backend: what goes in comes out, errors included."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2

from runtimeproxy.endpoints import grpc_target
from rplab.cri import open_channel
from rplab.kinds import tally_every_kind
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend
from runtimeproxy.cri.methods import Kind, cri_method_table, unknown_method
from runtimeproxy.app import Proxy

VERSION = "/runtime.v1.RuntimeService/Version"
LIST_CONTAINERS = "/runtime.v1.RuntimeService/ListContainers"
EVENTS = "/runtime.v1.RuntimeService/GetContainerEvents"
V1ALPHA2_VERSION = "/runtime.v1alpha2.RuntimeService/Version"
MiB = 1024 * 1024


def unary(channel: grpc.Channel, path: str) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(path)


def test_bytes_pass_untouched_even_when_not_valid_protobuf(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    garbage = os.urandom(4096)
    assert unary(client, VERSION)(garbage, timeout=10) == garbage
    assert synthetic.calls_to(VERSION)[-1].request == garbage
    assert unary(client, V1ALPHA2_VERSION)(b"", timeout=10) == b""


def _rich_status() -> status_pb2.Status:
    detail = error_details_pb2.ErrorInfo(reason="SANDBOX_GONE", domain="containerd", metadata={"id": "abc"})
    status = status_pb2.Status(code=code_pb2.NOT_FOUND, message="an error occurred when try to find sandbox \"abc\": not found")
    status.details.add().Pack(detail)
    return status


def test_backend_status_details_and_trailers_reach_the_caller(
    client: grpc.Channel, synthetic: SyntheticBackend
) -> None:
    status = _rich_status()

    async def fail(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            status.message,
            trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()), ("x-runtime", "c1")),
        )

    synthetic.unary[VERSION] = fail
    with pytest.raises(grpc.RpcError) as raised:
        unary(client, VERSION)(b"", timeout=10)
    error = raised.value
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert error.details() == status.message
    trailers = dict(error.trailing_metadata())
    assert status_pb2.Status.FromString(trailers["grpc-status-details-bin"]) == status
    assert trailers["x-runtime"] == "c1"


def test_request_metadata_and_deadline_go_upstream(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    unary(client, VERSION)(b"x", timeout=7, metadata=(("x-trace-id", "t-1"), ("x-blob-bin", b"\x00\x01")))
    call = synthetic.calls_to(VERSION)[-1]
    assert call.metadata["x-trace-id"] == "t-1"
    assert call.metadata["x-blob-bin"] == b"\x00\x01"
    assert call.time_remaining is not None and 5 < call.time_remaining <= 7.1  # gRPC rounds timeouts up


def test_metadata_far_over_8_kib_passes_both_ways(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def fail_with_big_trailer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "gone", (("x-answer", "b" * 200 * 1024),))

    synthetic.unary[VERSION] = fail_with_big_trailer
    with pytest.raises(grpc.RpcError) as raised:
        unary(client, VERSION)(b"x", timeout=10, metadata=(("x-big", "a" * MiB),))
    assert synthetic.calls_to(VERSION)[-1].metadata["x-big"] == "a" * MiB
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    assert dict(raised.value.trailing_metadata())["x-answer"] == "b" * 200 * 1024


def test_no_deadline_means_none_upstream(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    unary(client, VERSION)(b"x")
    remaining = synthetic.calls_to(VERSION)[-1].time_remaining
    assert remaining is None or remaining > 3600


def test_a_cancelled_unary_call_is_cancelled_upstream(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def hang(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(60)
        return b""

    synthetic.unary[VERSION] = hang
    future = unary(client, VERSION).future(b"", timeout=30)
    _wait_for(lambda: synthetic.calls_to(VERSION))
    future.cancel()
    assert synthetic.cancel_seen.wait(10), "the backend never saw the cancellation"
    assert synthetic.cancelled == [VERSION]


def test_a_64_mib_response_passes(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    payload = os.urandom(64 * MiB)

    async def large(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return payload

    synthetic.unary[LIST_CONTAINERS] = large
    assert unary(client, LIST_CONTAINERS)(b"", timeout=60) == payload


def test_a_request_over_16_mib_is_refused_before_the_backend(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    assert unary(client, LIST_CONTAINERS)(bytes(16 * MiB - 64), timeout=60)  # the kubelet's limit, framing aside
    with pytest.raises(grpc.RpcError) as raised:
        unary(client, LIST_CONTAINERS)(bytes(16 * MiB + 1), timeout=60)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in raised.value.details()
    assert [len(call.request) for call in synthetic.calls_to(LIST_CONTAINERS) if call.request] == [16 * MiB - 64]


def test_a_raised_request_limit_lets_64_mib_through(
    start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend
) -> None:
    proxy = start_proxy(runtime_path=synthetic.path, max_request_bytes=64 * MiB + 64)
    payload = os.urandom(64 * MiB)
    with open_channel(proxy.options.listen_path) as channel:
        assert unary(channel, LIST_CONTAINERS)(payload, timeout=60) == payload


def test_stream_messages_arrive_in_order_one_by_one(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    # The backend only sends event n+1 after the caller has received event n: a proxy
    # that buffered would deadlock here.
    received = threading.Semaphore(0)

    async def events(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for n in range(20):
            yield b"event-%d" % n
            while not received.acquire(blocking=False):
                await asyncio.sleep(0.001)

    synthetic.streams[EVENTS] = events
    seen = []
    for message in client.unary_stream(EVENTS)(b"", timeout=30):
        seen.append(message)
        received.release()
    assert seen == [b"event-%d" % n for n in range(20)]


def test_stream_error_mid_way_keeps_code_and_message(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def events(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        yield b"one"
        yield b"two"
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many watchers")

    synthetic.streams[EVENTS] = events
    seen = []
    with pytest.raises(grpc.RpcError) as raised:
        for message in client.unary_stream(EVENTS)(b"", timeout=30):
            seen.append(message)
    assert seen == [b"one", b"two"]
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert raised.value.details() == "too many watchers"


def test_backend_unimplemented_passes_through(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def events(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetContainerEvents")
        yield b""

    synthetic.streams[EVENTS] = events
    with pytest.raises(grpc.RpcError) as raised:
        list(client.unary_stream(EVENTS)(b"", timeout=10))
    assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert raised.value.details() == "unknown method GetContainerEvents"


def test_caller_cancelling_a_stream_cancels_the_backend(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def endless(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        while True:
            yield b"tick"
            await asyncio.sleep(0.01)

    synthetic.streams[EVENTS] = endless
    stream = client.unary_stream(EVENTS)(b"")
    assert next(stream) == b"tick"
    stream.cancel()
    assert synthetic.cancel_seen.wait(10), "the backend stream was not cancelled"


def test_backend_ending_a_stream_ends_it_for_the_caller(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def three(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for n in range(3):
            yield bytes([n])

    synthetic.streams[EVENTS] = three
    stream = client.unary_stream(EVENTS)(b"", timeout=10)
    assert list(stream) == [b"\x00", b"\x01", b"\x02"]
    assert stream.code() is grpc.StatusCode.OK


def test_long_lived_streams_do_not_starve_unary_calls(client: grpc.Channel, synthetic: SyntheticBackend) -> None:
    async def quiet(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await asyncio.sleep(60)
        yield b""

    synthetic.streams[EVENTS] = quiet
    streams = [client.unary_stream(EVENTS)(b"") for _ in range(64)]
    try:
        _wait_for(lambda: len(synthetic.calls_to(EVENTS)) >= 64)
        for _ in range(20):
            assert unary(client, VERSION)(b"ping", timeout=5) == b"ping"
    finally:
        for stream in streams:
            stream.cancel()


@pytest.mark.parametrize(
    "path",
    ["/runtime.v1.RuntimeService/SomeFutureCall", "/runtime.v2.RuntimeService/Version", "/vendor.Extra/Ping"],
)
def test_methods_in_no_descriptor_are_still_forwarded(client: grpc.Channel, synthetic: SyntheticBackend, path: str) -> None:
    # The caller's unary call travels as a one-message stream: same bytes on the wire.
    assert unary(client, path)(b"future", timeout=10) == b"future"
    assert synthetic.calls_to(path)


def test_direct_and_proxied_errors_are_identical(proxy: Proxy, synthetic: SyntheticBackend) -> None:
    async def fail(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "container is not running")

    synthetic.unary[VERSION] = fail
    outcomes = []
    for path in (synthetic.path, proxy.options.listen_path):
        with open_channel(path) as channel, pytest.raises(grpc.RpcError) as raised:
            unary(channel, VERSION)(b"", timeout=10)
        outcomes.append((raised.value.code(), raised.value.details()))
    assert outcomes[0] == outcomes[1]


def _wait_for(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_every_kind_of_call_to_a_method_the_backend_lacks_is_unimplemented(
    loop_thread: LoopThread, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    # A backend that serves nothing answers UNIMPLEMENTED at once, often while the proxy
    # is still writing the request upstream: that race must never turn into INTERNAL.
    async def serve_nothing() -> grpc.aio.Server:
        server = grpc.aio.server()
        server.add_insecure_port(grpc_target(tmp_path / "bare.sock"))
        await server.start()
        return server

    bare = loop_thread.run(serve_nothing())
    try:
        proxy = start_proxy(runtime_path=tmp_path / "bare.sock")
        with open_channel(proxy.options.listen_path) as channel:
            tallies = tally_every_kind(channel, "/runtime.v2.RuntimeService/Version", times=100)
    finally:
        loop_thread.run(bare.stop(0))
    for kind, tally in tallies.items():
        assert tally == {("UNIMPLEMENTED", "Method not found!"): 100}, kind


# --- metadata on successful calls ------------------------------------------------------------

INITIAL = (("x-backend-initial", "i-1"), ("x-backend-initial-bin", b"\x00\xff"))
TRAILING = (("x-backend-trailing", "t-1"), ("x-backend-trailing-bin", b"\x01\x02"))
ANSWER = b"\x0a\x03abc"  # also a valid RunPodSandboxResponse (pod_sandbox_id "abc")
FAILING_PATH = "/runtime.v1.RuntimeService/Status"


class _MetadataBackend(grpc.GenericRpcHandler):
    """Answers every method, of every kind, with initial and trailing metadata; Status fails."""

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = cri_method_table().get(details.method) or unknown_method(details.method)
        assert method is not None
        if method.kind is Kind.UNARY_UNARY:
            return grpc.unary_unary_rpc_method_handler(self._failing if method.path == FAILING_PATH else self._unary)
        if method.kind is Kind.UNARY_STREAM:
            return grpc.unary_stream_rpc_method_handler(self._stream)
        return grpc.stream_stream_rpc_method_handler(self._bidi)

    async def _unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.send_initial_metadata(INITIAL)
        context.set_trailing_metadata(TRAILING)
        return ANSWER

    async def _failing(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.send_initial_metadata(INITIAL)
        await context.abort(grpc.StatusCode.NOT_FOUND, "gone", TRAILING)

    async def _stream(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await context.send_initial_metadata(INITIAL)
        yield ANSWER
        yield ANSWER
        context.set_trailing_metadata(TRAILING)

    async def _bidi(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await context.send_initial_metadata(INITIAL)
        async for _ in requests:
            yield ANSWER
        context.set_trailing_metadata(TRAILING)


@pytest.fixture
def metadata_client(
    loop_thread: LoopThread, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> Iterator[grpc.Channel]:
    async def serve() -> grpc.aio.Server:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_MetadataBackend(),))
        server.add_insecure_port(grpc_target(tmp_path / "metadata.sock"))
        await server.start()
        return server

    backend = loop_thread.run(serve())
    configs = tmp_path / "hookserver.d"
    configs.mkdir(mode=0o755)
    # A registered plugin that is not there (Ignore): the hooked calls run their hooks, then relay.
    (configs / "absent.json").write_text(json.dumps({
        "remote-endpoint": str(tmp_path / "absent-plugin.sock"), "failure-policy": "Ignore",
        "runtime-hooks": ["PreRunPodSandbox", "PostStopPodSandbox"],
    }))
    proxy = start_proxy(runtime_path=tmp_path / "metadata.sock", hook_config_dir=configs)
    try:
        with open_channel(proxy.options.listen_path) as channel:
            yield channel
    finally:
        loop_thread.run(backend.stop(0))


def _assert_backend_metadata(call: grpc.Call) -> None:
    initial, trailing = dict(call.initial_metadata()), dict(call.trailing_metadata())
    assert {key: initial.get(key) for key, _ in INITIAL} == dict(INITIAL)
    assert {key: trailing.get(key) for key, _ in TRAILING} == dict(TRAILING)


RUN_POD_SANDBOX = "/runtime.v1.RuntimeService/RunPodSandbox"
STOP_POD_SANDBOX = "/runtime.v1.RuntimeService/StopPodSandbox"
UNKNOWN = "/runtime.v2.RuntimeService/Version"


@pytest.mark.parametrize("path", [VERSION, RUN_POD_SANDBOX, STOP_POD_SANDBOX, UNKNOWN])
def test_a_successful_single_answer_carries_the_backend_metadata(metadata_client: grpc.Channel, path: str) -> None:
    # Version plain, RunPodSandbox with a pre-hook, StopPodSandbox with a post-hook, a method in no descriptor.
    response, call = metadata_client.unary_unary(path).with_call(b"", timeout=10)
    assert response == ANSWER
    _assert_backend_metadata(call)


@pytest.mark.parametrize(("path", "answers"), [(EVENTS, 2), (UNKNOWN, 1)])  # the unknown one is relayed as bidi
def test_a_successful_stream_carries_the_backend_metadata(
    metadata_client: grpc.Channel, path: str, answers: int
) -> None:
    stream = metadata_client.unary_stream(path)(b"", timeout=10)
    assert list(stream) == [ANSWER] * answers
    _assert_backend_metadata(stream)


def test_client_streams_carry_the_backend_metadata(metadata_client: grpc.Channel) -> None:
    response, call = metadata_client.stream_unary(UNKNOWN).with_call(iter([b"a"]), timeout=10)
    assert response == ANSWER
    _assert_backend_metadata(call)
    bidi = metadata_client.stream_stream(UNKNOWN)(iter([b"a", b"b"]), timeout=10)
    assert list(bidi) == [ANSWER, ANSWER]
    _assert_backend_metadata(bidi)


def test_a_failed_call_carries_the_backend_initial_metadata_too(metadata_client: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        metadata_client.unary_unary(FAILING_PATH)(b"", timeout=10)
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    _assert_backend_metadata(raised.value)  # type: ignore[arg-type]


def test_a_deadline_that_passes_during_a_hooked_call_costs_one_quiet_line(
    loop_thread: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller's deadline passes while a hook works (here: a loop busy past it, so grpc cannot cancel the
    handler first); the hook's abort then fails inside grpc. Before: a 25-line ERROR traceback, twice."""
    from types import SimpleNamespace

    from runtimeproxy.cri.forwarding import unary_unary_handler

    method = cri_method_table()["/runtime.v1.RuntimeService/RunPodSandbox"]

    async def hook(data: bytes, context: grpc.aio.ServicerContext, relay: object) -> bytes:
        await asyncio.sleep(0)
        time.sleep(0.3)  # past the caller's deadline without giving grpc a chance to cancel us
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the backend's deadline passed too")
        return b""

    socket = tmp_path / "hooked.sock"

    async def serve() -> grpc.aio.Server:
        unused = SimpleNamespace(channel=grpc.aio.insecure_channel(f"unix:{tmp_path / 'nobody.sock'}"))
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            method.service, {method.name: unary_unary_handler(method, unused, hook)}),))  # type: ignore[arg-type]
        server.add_insecure_port(f"unix:{socket}")
        await server.start()
        return server

    server = loop_thread.run(serve())
    try:
        with caplog.at_level("DEBUG"), open_channel(socket) as channel:
            with pytest.raises(grpc.RpcError) as raised:
                channel.unary_unary(method.path)(b"", timeout=0.1)
            assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            time.sleep(0.5)  # let the handler finish after its caller left
    finally:
        loop_thread.run(server.stop(0))
    ours = [r for r in caplog.records if r.name.startswith("runtimeproxy")]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []
    assert len(ours) <= 1, [r.getMessage() for r in ours]
