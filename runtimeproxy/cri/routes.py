"""Which CRI calls the frame relay (cri.framerelay) sends straight to a backend: the known methods no hook
intercepts, each to its backend (runtime or image); and what is done when one ends (metrics, the probe's rest)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

from runtimeproxy.cri.backend import Backend, BackendChannel
from runtimeproxy.cri.calls import CriCallRecorder, MethodKey
from runtimeproxy.cri.framerelay import UNAVAILABLE, Recorder, Route, Router, Upstream
from runtimeproxy.cri.methods import Method


def _ended(channel: BackendChannel, key: MethodKey, recorder: CriCallRecorder | None) -> Recorder:
    def ended(path: bytes, code: int, seconds: float) -> None:
        if code != UNAVAILABLE:
            channel.answered()  # the backend answered: its liveness probe may rest
        if recorder is not None:
            recorder.record(key, code, seconds)

    return ended


def relayed_routes(backend: Backend, table: Mapping[str, Method], hooked: Set[str],
                   recorder: CriCallRecorder | None) -> Router:
    """The router: a Route for each method of `table` that is not `hooked`; None (the gRPC server) for the rest."""
    upstreams: dict[str, Upstream] = {}

    def upstream(channel: BackendChannel) -> Upstream:
        return upstreams.setdefault(channel.role, Upstream(channel.path))

    routes: dict[bytes, Route] = {}
    for path, method in table.items():
        if path in hooked:
            continue
        channel = backend.for_method(method)
        routes[path.encode()] = Route(upstream(channel), channel.unreachable_message,
                                      _ended(channel, (method.service, method.name), recorder))
    route: Callable[[bytes], Route | None] = routes.get
    return route
