"""One method path called as each of the four RPC kinds, raw bytes, with the outcomes tallied.

gRPC's framing does not say which kind a call is, so a caller may use any kind on any
path; the tests use this to check that every kind of call to a method the backend does
not know gets the backend's UNIMPLEMENTED, through the proxy as directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import grpc

Outcome = tuple[str, str]  # (status code name, details); ("OK", "") on success
RPC_KINDS = ("unary-unary", "unary-stream", "stream-unary", "stream-stream")


def _call_as(channel: grpc.Channel, path: str, kind: str, timeout: float) -> Callable[[], object]:
    request = b"\x0a\x01x"
    if kind == "unary-unary":
        return lambda: channel.unary_unary(path)(request, timeout=timeout)
    if kind == "unary-stream":
        return lambda: list(channel.unary_stream(path)(request, timeout=timeout))
    if kind == "stream-unary":
        return lambda: channel.stream_unary(path)(iter([request]), timeout=timeout)
    return lambda: list(channel.stream_stream(path)(iter([request]), timeout=timeout))


def outcome_of(call: Callable[[], object]) -> Outcome:
    try:
        call()
    except grpc.RpcError as error:
        return error.code().name, error.details() or ""  # type: ignore[attr-defined]
    return "OK", ""


def tally_every_kind(channel: grpc.Channel, path: str, times: int, timeout: float = 10.0) -> dict[str, Counter[Outcome]]:
    """For each RPC kind, how often each outcome came back from `times` calls to `path`."""
    return {
        kind: Counter(outcome_of(_call_as(channel, path, kind, timeout)) for _ in range(times))
        for kind in RPC_KINDS
    }
