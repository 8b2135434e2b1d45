"""Raw-bytes relaying of one RPC to the backend.

No (de)serializer is installed on either side, so request and response bytes are
handed through as they are. Status code, message and trailing metadata (which carries
`grpc-status-details-bin`) of a failed backend call reach the caller unchanged; the
caller's metadata and remaining deadline go upstream; a cancelled call is cancelled
upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
from google.protobuf import message_factory

from runtimeproxy.backend import BackendChannel
from runtimeproxy.methods import Kind, Method

log = logging.getLogger(__name__)

Metadata = tuple[tuple[str, str | bytes], ...]
UnaryRelay = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]
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


async def relay_failure(
    context: grpc.aio.ServicerContext, error: grpc.aio.AioRpcError, backend: BackendChannel
) -> None:
    """End the caller's RPC with the backend's status (never returns)."""
    details = error.details() or ""
    code = error.code()
    if code is grpc.StatusCode.UNAVAILABLE and not backend.is_ready():
        details = backend.unreachable_message(details)
    trailing = error.trailing_metadata()
    await context.abort(code, details, tuple(trailing) if trailing else ())


async def abort_internal(context: grpc.aio.ServicerContext, method: Method, error: Exception) -> None:
    log.exception("runtimeproxy failed on %s", method.path)
    await context.abort(grpc.StatusCode.INTERNAL, f"runtimeproxy: {method.path}: {error}")


def _single_response(
    backend: BackendChannel, open_call: Callable[..., Awaitable[bytes]]
) -> Callable[..., Awaitable[bytes]]:
    """A behaviour with one response (unary or client-streaming request)."""

    async def relay(request: object, context: grpc.aio.ServicerContext) -> bytes:
        try:
            return await open_call(
                request, timeout=context.time_remaining(), metadata=forwarded_metadata(context)
            )
        except grpc.aio.AioRpcError as error:
            await relay_failure(context, error, backend)
            raise  # unreachable: abort raises

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
        except Exception as error:  # a hook bug must not become a crash or an opaque UNKNOWN
            await abort_internal(context, method, error)
            raise

    return grpc.unary_unary_rpc_method_handler(hooked)


def _relay_responses(
    backend: BackendChannel, open_call: Callable[..., grpc.aio.Call]
) -> Callable[..., AsyncIterator[bytes]]:
    """A streaming behaviour that passes each backend message on as soon as it arrives."""

    async def relay(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        call = open_call(
            request, timeout=context.time_remaining(), metadata=forwarded_metadata(context)
        )
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as error:
            await relay_failure(context, error, backend)
        finally:
            call.cancel()  # no-op when finished; stops the upstream when the caller went away

    return relay


def decoding_handler(method: Method, backend: BackendChannel) -> grpc.RpcMethodHandler:
    """The rejected design, kept only to measure what raw relaying saves (--benchmark-decode-all):
    every message is parsed into its protobuf class and serialized again, on both hops."""
    if method.input_type is None or method.output_type is None:
        return method_handler(method, backend)
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    codec = {"request_serializer": request_class.SerializeToString,
             "response_deserializer": response_class.FromString}
    server_codec = {"request_deserializer": request_class.FromString,
                    "response_serializer": response_class.SerializeToString}
    if method.kind is Kind.UNARY_UNARY:
        relay = _single_response(backend, backend.channel.unary_unary(method.path, **codec))
        return grpc.unary_unary_rpc_method_handler(relay, **server_codec)
    if method.kind is Kind.UNARY_STREAM:
        stream = _relay_responses(backend, backend.channel.unary_stream(method.path, **codec))
        return grpc.unary_stream_rpc_method_handler(stream, **server_codec)
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
    if method.kind is Kind.STREAM_STREAM:
        relay = _relay_responses(backend, channel.stream_stream(method.path))
        return grpc.stream_stream_rpc_method_handler(relay)
    single = _single_response(backend, channel.stream_unary(method.path))
    return grpc.stream_unary_rpc_method_handler(single)
