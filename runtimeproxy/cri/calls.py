"""Counting relayed CRI calls by service, method and gRPC code, with their latency.

The hot path pays for two clock reads and one append per call (runtimeproxy.call_tally). Labels come
from the method table, never from the request, so cardinality stays bounded. The metrics endpoint reads
them through `cri_call_series` (runtimeproxy.report).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from runtimeproxy.call_tally import RELAYED_CALL_LATENCY_BUCKETS_SECONDS, CallTally
from runtimeproxy.cri.methods import Kind, Method
from runtimeproxy.report import CallSeries

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


def _behaviour(behaviour: Callable[..., Any] | None) -> Callable[..., Any]:
    """The handler's behaviour for its method's kind (gRPC leaves the other kinds' None)."""
    if behaviour is None:
        raise ValueError("the method handler has no behaviour for its method's kind")
    return behaviour


class CriCallRecorder(CallTally):
    """Wraps method handlers so that every call is counted: calls by (service, method, code)."""

    def __init__(self) -> None:
        super().__init__(RELAYED_CALL_LATENCY_BUCKETS_SECONDS, _code_name)

    def wrap(self, method: Method, handler: grpc.RpcMethodHandler, known: bool = True) -> grpc.RpcMethodHandler:
        key: MethodKey = (method.service, method.name) if known else (OTHER, OTHER)
        if method.kind is Kind.UNARY_UNARY:
            return grpc.unary_unary_rpc_method_handler(self._single(key, _behaviour(handler.unary_unary)))
        if method.kind is Kind.STREAM_UNARY:
            return grpc.stream_unary_rpc_method_handler(self._single(key, _behaviour(handler.stream_unary)))
        if method.kind is Kind.UNARY_STREAM:
            return grpc.unary_stream_rpc_method_handler(self._stream(key, _behaviour(handler.unary_stream)))
        return grpc.stream_stream_rpc_method_handler(self._stream(key, _behaviour(handler.stream_stream)))

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


def cri_call_series(recorder: CriCallRecorder) -> CallSeries:
    return CallSeries(
        name="cri_calls", help="CRI calls relayed, by service, method and gRPC code.",
        latency_name="cri_call_duration_seconds", latency_help="Time to answer a CRI call, hooks included.",
        key_labels=("service", "method"), outcome_label="code", tally=recorder,
    )
