"""Docker mode's server: one `ClientSession` per connection on the proxy socket, and its graceful stop.

Serves on a socket runtimeproxy.app has claimed (with the same rules as CRI mode, `runtimeproxy.listener`);
the process around it (socket lock, hook service, admin, metrics, idle trim, signals) is app's. On stop it
stops accepting, closes idle keep-alive connections and lets exchanges in flight finish for the grace
period (long streams such as `events` or an attached terminal are cut after it).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from runtimeproxy.docker.engine import EngineClient
from runtimeproxy.docker.eventloop import running_loop_name
from runtimeproxy.docker.hooks import DockerHooks
from runtimeproxy.docker.interception import Interceptor
from runtimeproxy.docker.runtime import DockerRuntime
from runtimeproxy.docker.relay import ClientSession
from runtimeproxy.docker.report import DockerReport
from runtimeproxy.docker.requests import DockerRequestRecorder
from runtimeproxy.docker.upstream import ReachabilityLog
from runtimeproxy.hooks.service import HookService
from runtimeproxy.listener import KEEP_SOCKET_FILE, bind_unix_socket, listen_backlog
from runtimeproxy.options import ProxyOptions

log = logging.getLogger(__name__)


class DockerFrontend:
    def __init__(self, options: ProxyOptions, hook_service: HookService, interceptor: Interceptor | None = None) -> None:
        """`interceptor` replaces the hooks (tests of the relay's seam)."""
        self.options = options
        self._hook_service = hook_service
        self.engine = EngineClient(options.runtime_path)
        self.runtime = DockerRuntime(self.engine)
        self.docker_hooks = DockerHooks(hook_service, self.runtime)
        self.interceptor: Interceptor = interceptor or self.docker_hooks
        self._hooked = interceptor is None
        self._server: asyncio.Server | None = None
        self._sessions: dict[asyncio.Task[None], ClientSession] = {}
        self._reachability = ReachabilityLog()
        self.calls_started = 0  # read by the idle trimmer
        self._requests = DockerRequestRecorder() if options.metrics_address else None
        self.report = DockerReport(options.runtime_path, self._reachability, self.engine, self._requests)

    def describe(self) -> str:
        return (f"Docker mode: listening on {self.options.listen_path}; dockerd at unix://{self.options.runtime_path}; "
                f"event loop: {running_loop_name()}")

    async def start(self, inherited: socket.socket | None = None) -> None:
        """Serve on options.listen_path (claimed by app), or on the socket systemd passed for it."""
        if self._hooked:
            self._hook_service.start_rebuild()
        # dockerd's backlog (somaxconn), not asyncio's 100: a burst of cri-dockerd dials must not meet EAGAIN.
        sock = inherited if inherited is not None else bind_unix_socket(self.options.listen_path)[0]
        self._server = await asyncio.start_unix_server(self._serve_client, sock=sock, backlog=listen_backlog(),
                                                       **KEEP_SOCKET_FILE)

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        session = ClientSession(reader, writer, self.options.runtime_path, self.interceptor, self._reachability,
                                self._count_request, self._requests.request_done if self._requests else None)
        self._sessions[task] = session
        try:
            await session.run()
        except Exception:  # never let one connection take the server down
            log.exception("Docker relay: connection failed")
        finally:
            self._sessions.pop(task, None)

    def _count_request(self) -> None:
        self.calls_started += 1

    async def stop(self, grace: float) -> None:
        """Stop accepting, close idle connections, give exchanges in flight `grace` seconds."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task, session in list(self._sessions.items()):
            session.stopping = True
            if session.idle:
                task.cancel()
        tasks = list(self._sessions)
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Nothing is kept open to dockerd between requests."""
