"""Counting relayed Docker Engine API requests by route and HTTP status, with their latency (Docker mode's
counterpart of admin.cri_calls). Routes are labelled from a fixed table (docker.routes.route_label)."""

from __future__ import annotations

from runtimeproxy.admin.call_tally import CallTally
from runtimeproxy.admin.cri_calls import CRI_LATENCY_BUCKETS_SECONDS
from runtimeproxy.docker.routes import route_label


def _status_label(status: int | None) -> str:
    return "none" if status is None else str(status)  # none: the client left, or no answer could be given


class DockerRequestRecorder(CallTally):
    """Requests by (route, status); record() is called once per request, after its answer."""

    def __init__(self) -> None:
        super().__init__(CRI_LATENCY_BUCKETS_SECONDS, _status_label)

    def request_done(self, method: bytes, target: bytes, status: int | None, seconds: float) -> None:
        self.record((route_label(method, target),), status, seconds)
