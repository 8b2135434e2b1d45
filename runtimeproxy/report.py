"""What a frontend tells the operator pieces (admin status, /readyz, /metrics) about its backend and its calls.

The one seam between a frontend (runtimeproxy.cri, runtimeproxy.docker) and runtimeproxy.admin: each frontend
implements `FrontendReport`; admin reads only that, so neither imports the other and runtimeproxy.app wires them.
Values here are plain (no protobuf, no transport): admin turns them into its own messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtimeproxy.call_tally import CallTally

# Status must answer even when the backend hangs: asking it for its name and version waits at most this.
STATUS_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True)
class BackendProblem:
    """One backend connection as readiness sees it: problem is "" while it is fine."""

    role: str  # "runtime" or "image"
    endpoint: str  # as operators write it: unix:///run/containerd/containerd.sock
    problem: str = ""


@dataclass(frozen=True)
class BackendStatus:
    """One backend connection as `runtimeproxyctl status` shows it."""

    role: str
    endpoint: str
    reachable: bool
    runtime_name: str = ""  # "" when the backend did not say (unreachable, or too slow)
    runtime_version: str = ""


@dataclass(frozen=True)
class CallSeries:
    """A frontend's relayed calls as two Prometheus families: a counter by key and outcome, a latency histogram.

    `name` and `latency_name` come without the proxy's prefix (`cri_calls` -> runtimeproxy_cri_calls).
    """

    name: str
    help: str
    latency_name: str
    latency_help: str
    key_labels: tuple[str, ...]  # the tally's key, label by label
    outcome_label: str
    tally: CallTally


class FrontendReport(Protocol):
    """Implemented by each frontend; read by runtimeproxy.admin."""

    def backend_problems(self) -> list[BackendProblem]:
        """Every backend connection, cheaply (no call to the backend): readiness and the reachable gauge."""
        ...

    async def backend_statuses(self) -> list[BackendStatus]:
        """Every backend connection with what it says it is; asks it, for at most STATUS_TIMEOUT_SECONDS."""
        ...

    def call_series(self) -> list[CallSeries]:
        """The frontend's call counters (none while metrics are off)."""
        ...
