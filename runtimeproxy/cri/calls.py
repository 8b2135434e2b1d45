"""Counting relayed CRI calls by service, method and gRPC code, with their latency.

The hot path pays for two clock reads and one append per call (admin.call_tally). Labels come
from the method table, never from the request, so cardinality stays bounded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from runtimeproxy.admin.call_tally import CallTally
from runtimeproxy.cri.methods import Kind, Method

# Image pulls take minutes: the CRI histogram reaches further than the hook one.
CRI_LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)
OTHER = "other"  # service and method label of paths in no CRI descriptor

MethodKey = tuple[str, str]  # (service, method)


def _code_name(code: object) -> str:
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status.name
    return grpc.StatusCode.UNKNOWN.name


class CriCallRecorder(CallTally):
    """Wraps method handlers so that every call is counted: calls by (service, method, code)."""

    def __init__(self) -> None:
        super().__init__(CRI_LATENCY_BUCKETS_SECONDS, _code_name)

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
                self.record(key, context.code() or grpc.StatusCode.CANCELLED, clock() - started)
                raise
            self.record(key, None, clock() - started)
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
                self.record(key, code or context.code(), clock() - started)

        return counted
