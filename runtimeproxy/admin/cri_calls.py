"""Counting relayed CRI calls by service, method and gRPC code, with their latency.

The hot path pays for two clock reads and one list append per call: the wrapped
behaviour appends (method key, code, seconds) to a pending list, and the list is folded
into counters and histograms when it is scraped (or when it grows long). Labels come
from the method table, never from the request, so cardinality stays bounded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from runtimeproxy.hooks.stats import LatencyHistogram
from runtimeproxy.cri.methods import Kind, Method

# Image pulls take minutes: the CRI histogram reaches further than the hook one.
CRI_LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)
# Fold the pending list once it holds this many calls, so an unscraped proxy stays small.
_FOLD_AFTER_CALLS = 4096
OTHER = "other"  # service and method label of paths in no CRI descriptor

MethodKey = tuple[str, str]  # (service, method)


def _code_name(code: object) -> str:
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status.name
    return grpc.StatusCode.UNKNOWN.name


class CriCallRecorder:
    """Wraps method handlers so that every call is counted; read with `snapshot()`."""

    def __init__(self) -> None:
        self._pending: list[tuple[MethodKey, Any, float]] = []
        self.calls: dict[tuple[str, str, str], int] = {}  # (service, method, code) -> calls
        self.latency: dict[MethodKey, LatencyHistogram] = {}

    def wrap(self, method: Method, handler: grpc.RpcMethodHandler, known: bool = True) -> grpc.RpcMethodHandler:
        key: MethodKey = (method.service, method.name) if known else (OTHER, OTHER)
        if method.kind is Kind.UNARY_UNARY:
            return grpc.unary_unary_rpc_method_handler(self._single(key, handler.unary_unary))
        if method.kind is Kind.STREAM_UNARY:
            return grpc.stream_unary_rpc_method_handler(self._single(key, handler.stream_unary))
        if method.kind is Kind.UNARY_STREAM:
            return grpc.unary_stream_rpc_method_handler(self._stream(key, handler.unary_stream))
        return grpc.stream_stream_rpc_method_handler(self._stream(key, handler.stream_stream))

    def _single(self, key: MethodKey, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter

        async def counted(request: object, context: grpc.aio.ServicerContext) -> bytes:
            started = clock()
            try:
                response = await behaviour(request, context)
            except BaseException:  # an abort has set the code; a cancel leaves none
                self._append((key, context.code() or grpc.StatusCode.CANCELLED, clock() - started))
                raise
            self._append((key, None, clock() - started))
            return response

        return counted

    def _stream(self, key: MethodKey, behaviour: Callable[..., AsyncIterator[bytes]]) -> Callable[..., Any]:
        clock = time.perf_counter

        async def counted(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            started = clock()
            code: object = None
            try:
                async for message in behaviour(request, context):
                    yield message
            except BaseException:
                code = context.code() or grpc.StatusCode.CANCELLED
                raise
            finally:
                self._append((key, code or context.code(), clock() - started))

        return counted

    def _append(self, record: tuple[MethodKey, Any, float]) -> None:
        self._pending.append(record)
        if len(self._pending) > _FOLD_AFTER_CALLS:
            self.fold()

    def fold(self) -> None:
        """Move pending calls into the counters (runs on the event loop, like the calls)."""
        pending, self._pending[:] = list(self._pending), []
        calls, latency = self.calls, self.latency
        for (service, name), code, seconds in pending:
            label = "OK" if code is None else _code_name(code)
            calls[(service, name, label)] = calls.get((service, name, label), 0) + 1
            histogram = latency.get((service, name))
            if histogram is None:
                histogram = latency[(service, name)] = LatencyHistogram(CRI_LATENCY_BUCKETS_SECONDS)
            histogram.observe(seconds)
