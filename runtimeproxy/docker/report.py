"""What Docker mode reports to the operator pieces (runtimeproxy.report.FrontendReport): dockerd's socket,
reachable as the relay last found it, dockerd's version (asked of it), and the request counters."""

from __future__ import annotations

from pathlib import Path

from runtimeproxy.docker.engine import EngineClient, EngineError
from runtimeproxy.docker.requests import DockerRequestRecorder, docker_request_series
from runtimeproxy.docker.upstream import ReachabilityLog
from runtimeproxy.report import STATUS_TIMEOUT_SECONDS, BackendProblem, BackendStatus, CallSeries


class DockerReport:
    def __init__(self, dockerd_path: Path, reachability: ReachabilityLog, engine: EngineClient,
                 requests: DockerRequestRecorder | None) -> None:
        self.endpoint = f"unix://{dockerd_path}"
        self._reachability = reachability
        self._engine = engine
        self.requests = requests

    def backend_problems(self) -> list[BackendProblem]:
        problem = "unreachable" if self._reachability.reachable is False else ""
        return [BackendProblem("runtime", self.endpoint, problem)]

    async def backend_statuses(self) -> list[BackendStatus]:
        try:
            version = await self._engine.version(STATUS_TIMEOUT_SECONDS)
        except EngineError:
            return [BackendStatus("runtime", self.endpoint, self._reachability.reachable is True, "docker")]
        return [BackendStatus("runtime", self.endpoint, True, "docker", version)]

    def call_series(self) -> list[CallSeries]:
        return [] if self.requests is None else [docker_request_series(self.requests)]
