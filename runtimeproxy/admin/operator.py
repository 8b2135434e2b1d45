"""Starting and stopping the operator endpoints beside the frontend's server: admin socket, metrics HTTP.

Either one failing to start (port taken, socket served by another process) is logged in
one line and the proxy goes on serving its clients without it: the kubelet matters more.
"""

from __future__ import annotations

import logging

from runtimeproxy.activation import InheritedSockets
from runtimeproxy.admin.http import HttpEndpoint
from runtimeproxy.admin.service import AdminServer
from runtimeproxy.admin.status import ProxyParts
from runtimeproxy.options import ProxyOptions
from runtimeproxy.listener import SocketInUseError
from runtimeproxy.usage import naming_flag, socket_fix, taken_socket_problem

log = logging.getLogger(__name__)


class OperatorEndpoints:
    def __init__(self, options: ProxyOptions, parts: ProxyParts, inherited: InheritedSockets | None = None) -> None:
        """`inherited`: the sockets systemd passed; the admin socket takes the one meant for it."""
        self.parts = parts
        self.admin = AdminServer(options.admin_path, parts, inherited) if options.admin_path else None
        self.http: HttpEndpoint | None = None
        if options.metrics_address:
            from runtimeproxy.admin.metrics import CONTENT_TYPE, ProxyMetrics  # prometheus_client: only when on

            metrics = ProxyMetrics(parts)
            self.http = HttpEndpoint(options.metrics_address, {
                "/metrics": lambda: (200, CONTENT_TYPE, metrics.exposition()),
                "/healthz": lambda: (200, "text/plain", b"ok\n"),
                "/readyz": self._readiness,
            })

    def _readiness(self) -> tuple[int, str, bytes]:
        """Ready exactly when the gRPC health service says SERVING: every backend connected and answering."""
        down = "".join(f"{backend.role} backend {backend.endpoint} {backend.problem}\n"
                       for backend in self.parts.backend_problems() if backend.problem)
        if down:
            return 503, "text/plain", down.encode()
        return 200, "text/plain", b"ok\n"

    async def start(self) -> None:
        if self.admin is not None:
            try:
                with naming_flag("--admin-endpoint", self.admin.path,
                                 f"{socket_fix('--admin-endpoint')} (--admin-endpoint= turns it off)"):
                    await self.admin.start()
            except SocketInUseError as error:
                log.error("admin API not available (runtimeproxyctl will not work): %s",
                          taken_socket_problem("--admin-endpoint", error))
                self.admin = None
            except RuntimeError as error:
                log.error("admin API not available (runtimeproxyctl will not work): %s", error)
                self.admin = None
        if self.http is not None:
            try:
                with naming_flag("--metrics-bind-address", f"{self.http.host}:{self.http.port}",
                                 "give an address of this host and a port nothing else listens on "
                                 "(--metrics-bind-address= turns it off)"):
                    await self.http.start()
            except RuntimeError as error:
                log.error("metrics endpoint not available: %s", error)
                self.http = None

    def summary(self) -> str:
        """Where the endpoints that started listen, for the start-up log line ("" if none)."""
        parts = []
        if self.admin is not None:
            parts.append(f"admin API on {self.admin.path}")
        if self.http is not None:
            parts.append(f"metrics on http://{self.http.host}:{self.http.bound_port}/metrics")
        return "".join(f"; {part}" for part in parts)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.admin is not None:
            await self.admin.stop()
