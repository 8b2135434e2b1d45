"""What CRI mode reports to the operator pieces (runtimeproxy.report.FrontendReport): each backend channel's
health as BackendHealth keeps it, the runtime's name and version (its CRI Version call), and the call counters."""

from __future__ import annotations

import grpc

from runtimeproxy.cri.backend import Backend, BackendChannel, BackendHealth
from runtimeproxy.cri.calls import CriCallRecorder, cri_call_series
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.report import STATUS_TIMEOUT_SECONDS, BackendProblem, BackendStatus, CallSeries

_VERSION_PATH = "/runtime.v1.RuntimeService/Version"


class CriReport:
    def __init__(self, backend: Backend, health: BackendHealth, calls: CriCallRecorder | None) -> None:
        self._backend = backend
        self._health = health
        self.calls = calls

    def backend_problems(self) -> list[BackendProblem]:
        return [BackendProblem(c.role, c.target, self._health.problem(c) or "") for c in self._backend.channels]

    async def backend_statuses(self) -> list[BackendStatus]:
        return [await self._status(channel) for channel in self._backend.channels]

    def call_series(self) -> list[CallSeries]:
        return [] if self.calls is None else [cri_call_series(self.calls)]

    async def _status(self, channel: BackendChannel) -> BackendStatus:
        reachable = self._health.healthy(channel)
        if channel.role != "runtime":
            return BackendStatus(channel.role, channel.target, reachable)
        try:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.channel.unary_unary(_VERSION_PATH)
            raw = await call(cri.VersionRequest().SerializeToString(), timeout=STATUS_TIMEOUT_SECONDS)
            version = cri.VersionResponse.FromString(raw)
        except grpc.aio.AioRpcError:
            return BackendStatus(channel.role, channel.target, reachable)
        except Exception:  # noqa: BLE001 - an odd answer only costs the name and version
            return BackendStatus(channel.role, channel.target, reachable)
        return BackendStatus(channel.role, channel.target, True, version.runtime_name, version.runtime_version)
