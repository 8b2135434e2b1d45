"""Counting relayed Docker Engine API requests by route and HTTP status, with their latency (Docker mode's
counterpart of cri.calls). Routes are labelled from a fixed table (docker.routes.route_label)."""

from __future__ import annotations

from runtimeproxy.call_tally import RELAYED_CALL_LATENCY_BUCKETS_SECONDS, CallTally
from runtimeproxy.docker.routes import route_label
from runtimeproxy.report import CallSeries


def _status_label(status: int | None) -> str:
    return "none" if status is None else str(status)  # none: the client left, or no answer could be given


class DockerRequestRecorder(CallTally):
    """Requests by (route, status); record() is called once per request, after its answer."""

    def __init__(self) -> None:
        super().__init__(RELAYED_CALL_LATENCY_BUCKETS_SECONDS, _status_label)

    def request_done(self, method: bytes, target: bytes, status: int | None, seconds: float) -> None:
        self.record((route_label(method, target),), status, seconds)


def docker_request_series(recorder: DockerRequestRecorder) -> CallSeries:
    return CallSeries(
        name="docker_requests",
        help="Docker Engine API requests relayed (Docker mode), by route and HTTP status (none: no answer was given).",
        latency_name="docker_request_duration_seconds",
        latency_help="Time to answer a Docker Engine API request, hooks included; a stream or tunnel counts until it "
        "ends.",
        key_labels=("route",), outcome_label="status", tally=recorder,
    )
