"""Raw-bytes relaying of one RPC to the backend.

No (de)serializer is installed on either side, so request and response bytes are
handed through as they are. The backend's initial and trailing metadata reach the
caller on every call, successful or not, and so do the status code and message of a
failed one (its trailers carry `grpc-status-details-bin`); the caller's metadata and
remaining deadline go upstream; a cancelled call is cancelled upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import message_factory

from runtimeproxy.cri.backend import BackendChannel
from runtimeproxy.cri.methods import Kind, Method

log = logging.getLogger(__name__)

T = TypeVar("T")
Metadata = tuple[tuple[str, str | bytes], ...]
# Awaited with the backend's error code before the caller is told it (the relay then ends the call with it).
FailureWatch = Callable[[grpc.StatusCode], Awaitable[None]]


class UnaryRelay(Protocol):
    def __call__(self, data: bytes, context: grpc.aio.ServicerContext, /,
                 failing: FailureWatch | None = None) -> Awaitable[bytes]: ...



# A hook wraps the relay of one unary method: it may rewrite the request, call the
# relay (or not) and act on the response. Filled in by runtimeproxy.hooks.
UnaryHook = Callable[[bytes, grpc.aio.ServicerContext, UnaryRelay], Awaitable[bytes]]

# Transport-level keys gRPC sets itself on the upstream call.
_TRANSPORT_KEYS = frozenset({"user-agent", "content-type", "te", "host"})


def forwarded_metadata(context: grpc.aio.ServicerContext) -> Metadata | None:
    metadata = context.invocation_metadata()
    if not metadata:
        return None
    kept = tuple(
        (key, value)
        for key, value in metadata
        if key not in _TRANSPORT_KEYS and not key.startswith(("grpc-", ":"))
    )
    return kept or None


async def relay_initial_metadata(context: grpc.aio.ServicerContext, call: grpc.aio.Call) -> None:
    """Send the backend's initial metadata to the caller, before any response message.

    Waits for the backend's headers (a stream's come with its first message at the
    latest). Nothing is sent when there is none (containerd sends none): no extra work
    on the hot path.
    """
    initial = await call.initial_metadata()
    if initial:
        await context.send_initial_metadata(tuple(initial))


async def relay_trailing_metadata(context: grpc.aio.ServicerContext, call: grpc.aio.Call) -> None:
    """Have the caller's status carry the backend's trailing metadata (a finished call's)."""
    trailing = await call.trailing_metadata()
    if trailing:
        context.set_trailing_metadata(tuple(trailing))


async def relay_failure(
    context: grpc.aio.ServicerContext, error: grpc.aio.AioRpcError, backend: BackendChannel
) -> None:
    """End the caller's RPC with the backend's status and trailing metadata (never returns)."""
    details = error.details() or ""
    code = error.code()
    if code is grpc.StatusCode.UNAVAILABLE and not backend.is_ready():
        details = backend.unreachable_message(details)
    trailing = error.trailing_metadata()
    await context.abort(code, details, tuple(trailing) if trailing else ())


async def abort_internal(context: grpc.aio.ServicerContext, method: Method, error: Exception) -> None:
    log.exception("runtimeproxy failed on %s", method.path)
    await context.abort(grpc.StatusCode.INTERNAL, f"runtimeproxy: {method.path}: {error}")


# What grpc aio reports when a write fails because the peer has already ended the call.
# The peer's real status arrives a moment later and replaces it on the call object.
_LOCAL_WRITE_FAILURE = (grpc.StatusCode.INTERNAL, "Internal error from Core")
# How long to wait for the backend's real status after such a write failure.
PEER_STATUS_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class _Status:
    code: grpc.StatusCode
    details: str
    trailing_metadata: Metadata


def _settled_value(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that finishes without suspending (a settled call's status)."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError("the call's status is not settled")


class PeerStatus:
    """Every status an upstream client-streaming call settles on, to find the backend's own.

    When the backend answers (e.g. UNIMPLEMENTED for a method it does not know) while a
    request is still being written, grpc aio first ends the call with INTERNAL "Internal
    error from Core" and then, when the backend's status arrives, replaces it. Done
    callbacks run at each of the two, so the real one can be picked out.
    """

    def __init__(self, call: grpc.aio.Call) -> None:
        self._seen: list[_Status] = []
        self._peer_known = asyncio.Event()
        call.add_done_callback(self._on_settled)

    def _on_settled(self, call: grpc.aio.Call) -> None:
        status = _Status(
            _settled_value(call.code()), _settled_value(call.details()) or "",
            tuple(_settled_value(call.trailing_metadata())),
        )
        self._seen.append(status)
        if (status.code, status.details) != _LOCAL_WRITE_FAILURE:
            self._peer_known.set()

    async def resolve(self, error: grpc.aio.AioRpcError, time_remaining: float | None) -> grpc.aio.AioRpcError:
        """`error`, or the backend's own status if `error` is grpc's local write failure."""
        if (error.code(), error.details()) != _LOCAL_WRITE_FAILURE:
            return error
        wait = PEER_STATUS_WAIT_SECONDS if time_remaining is None else min(time_remaining, PEER_STATUS_WAIT_SECONDS)
        try:
            await asyncio.wait_for(self._peer_known.wait(), wait)
        except asyncio.TimeoutError:
            return error
        peer = next(status for status in self._seen if (status.code, status.details) != _LOCAL_WRITE_FAILURE)
        return grpc.aio.AioRpcError(
            peer.code, error.initial_metadata(), grpc.aio.Metadata(*peer.trailing_metadata), peer.details
        )


def _single_response(
    backend: BackendChannel, open_call: Callable[..., grpc.aio.UnaryUnaryCall]
) -> Callable[..., Awaitable[bytes]]:
    """A unary behaviour: one request, one response."""

    async def relay(request: object, context: grpc.aio.ServicerContext, /,
                    failing: FailureWatch | None = None) -> bytes:
        call = open_call(request, timeout=context.time_remaining(), metadata=forwarded_metadata(context))
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            if failing is not None:
                await failing(error.code())
            await relay_initial_metadata(context, call)
            await relay_failure(context, error, backend)
            raise  # unreachable: abort raises
        backend.answered()
        # Settled: both are at hand without waiting.
        await relay_initial_metadata(context, call)
        await relay_trailing_metadata(context, call)
        return response

    return relay


def unary_unary_handler(
    method: Method, backend: BackendChannel, hook: UnaryHook | None = None
) -> grpc.RpcMethodHandler:
    relay = _single_response(backend, backend.channel.unary_unary(method.path))
    if hook is None:
        return grpc.unary_unary_rpc_method_handler(relay)

    async def hooked(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            return await hook(request, context, relay)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as error:
            if context.done():
                # The caller's deadline passed (or it left) while the call was hooked, so answering failed
                # inside grpc: nobody is waiting for an answer, and this is no proxy fault.
                log.info("%s ended before its answer could be sent (the caller's deadline passed or it left): %s",
                         method.path, type(error).__name__)
                raise
            await abort_internal(context, method, error)  # a hook bug: never a crash or an opaque UNKNOWN
            raise

    return grpc.unary_unary_rpc_method_handler(hooked)


def _relay_responses(
    backend: BackendChannel, open_call: Callable[..., grpc.aio.UnaryStreamCall[Any, Any]]
) -> Callable[..., AsyncIterator[bytes]]:
    """A streaming behaviour that passes each backend message on as soon as it arrives."""

    async def relay(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        call = open_call(
            request, timeout=context.time_remaining(), metadata=forwarded_metadata(context)
        )
        try:
            await relay_initial_metadata(context, call)
            async for message in call:
                yield message
            await relay_trailing_metadata(context, call)
        except grpc.aio.AioRpcError as error:
            await relay_failure(context, error, backend)
        finally:
            call.cancel()  # no-op when finished; stops the upstream when the caller went away

    return relay


def _relay_request_stream(
    backend: BackendChannel, open_call: Callable[..., grpc.aio.StreamStreamCall]
) -> Callable[..., AsyncIterator[bytes]]:
    """A client-streaming behaviour (either response kind: the framing is the same).

    The caller's messages are written upstream by a task of ours, and a failure of the
    upstream call is reported with the backend's own status, never grpc's stand-in for
    a write that lost the race against the backend's answer (see PeerStatus).
    """

    async def relay(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        call = open_call(timeout=context.time_remaining(), metadata=forwarded_metadata(context))
        peer = PeerStatus(call)
        writer = asyncio.create_task(_write_requests(call, requests))
        try:
            await relay_initial_metadata(context, call)
            async for message in call:
                yield message
            await relay_trailing_metadata(context, call)
        except grpc.aio.AioRpcError as error:
            await relay_failure(context, await peer.resolve(error, context.time_remaining()), backend)
        finally:
            writer.cancel()
            call.cancel()  # no-op when finished; stops the upstream when the caller went away

    return relay


async def _write_requests(call: grpc.aio.StreamStreamCall, requests: AsyncIterator[bytes]) -> None:
    try:
        async for request in requests:
            await call.write(request)
        await call.done_writing()
    except (grpc.aio.AioRpcError, grpc.aio.UsageError, grpc.aio.InternalError, asyncio.InvalidStateError):
        pass  # the upstream call has ended: its status reaches the caller through the reader
    except Exception:  # reading the caller's stream failed: the caller is gone
        call.cancel()


def decoding_handler(method: Method, backend: BackendChannel) -> grpc.RpcMethodHandler:
    """The rejected design, kept only to measure what raw relaying saves (--benchmark-decode-all):
    every message is parsed into its protobuf class and serialized again, on both hops."""
    if method.input_type is None or method.output_type is None:
        return method_handler(method, backend)
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    to_backend, from_backend = request_class.SerializeToString, response_class.FromString
    from_client, to_client = request_class.FromString, response_class.SerializeToString
    if method.kind is Kind.UNARY_UNARY:
        relay = _single_response(backend, backend.channel.unary_unary(
            method.path, request_serializer=to_backend, response_deserializer=from_backend))
        return grpc.unary_unary_rpc_method_handler(
            relay, request_deserializer=from_client, response_serializer=to_client)
    if method.kind is Kind.UNARY_STREAM:
        stream = _relay_responses(backend, backend.channel.unary_stream(
            method.path, request_serializer=to_backend, response_deserializer=from_backend))
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=from_client, response_serializer=to_client)
    return method_handler(method, backend)


def method_handler(
    method: Method, backend: BackendChannel, hook: UnaryHook | None = None
) -> grpc.RpcMethodHandler:
    """The raw-bytes handler for any RPC kind; only unary-unary methods can be hooked."""
    channel = backend.channel
    if method.kind is Kind.UNARY_UNARY:
        return unary_unary_handler(method, backend, hook)
    if hook is not None:
        raise ValueError(f"{method.path}: only unary methods can be hooked")
    if method.kind is Kind.UNARY_STREAM:
        relay = _relay_responses(backend, channel.unary_stream(method.path))
        return grpc.unary_stream_rpc_method_handler(relay)
    # Client-streaming, with one response or many: the same frames on the wire.
    return grpc.stream_stream_rpc_method_handler(_relay_request_stream(backend, channel.stream_stream(method.path)))
