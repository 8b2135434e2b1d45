"""Docker mode's server: the proxy socket, one `ClientSession` per connection, graceful shutdown.

The socket is claimed with the same rules as CRI mode (`runtimeproxy.listener`). On SIGTERM/SIGINT the
proxy stops accepting, closes idle keep-alive connections, lets exchanges in flight finish for the grace
period (long streams such as `events` or an attached terminal are cut after it), removes its socket and
exits 0. As in CRI mode, freed memory goes back to the kernel once requests stop for a moment
(`allocator.IdleTrimmer`): a burst of large hooked bodies does not leave the process big.
"""

from __future__ import annotations

import asyncio
import logging
import time

from runtimeproxy.allocator import IdleTrimmer
from runtimeproxy.admin.docker_requests import DockerRequestRecorder
from runtimeproxy.admin.operator import OperatorEndpoints
from runtimeproxy.admin.status import DockerBackend, ProxyParts
from runtimeproxy.docker.engine import EngineClient
from runtimeproxy.docker.hooks import DockerHooks
from runtimeproxy.docker.interception import Interceptor
from runtimeproxy.docker.recovery import DockerRecords
from runtimeproxy.docker.relay import ClientSession
from runtimeproxy.hooks.service import HookService
from runtimeproxy.docker.upstream import ReachabilityLog
from runtimeproxy.lifecycle import run_until_signalled
from runtimeproxy.listener import SocketLock, claim_socket_path, release_socket, restrict_socket
from runtimeproxy.options import ProxyOptions

log = logging.getLogger(__name__)


class DockerProxyServer:
    def __init__(self, options: ProxyOptions, interceptor: Interceptor | None = None) -> None:
        """`interceptor` replaces the hooks (tests of the relay's seam)."""
        self.options = options
        self.hook_service = HookService(options)
        self.engine = EngineClient(options.runtime_path)
        self.records = DockerRecords(self.engine)
        self.docker_hooks = DockerHooks(self.hook_service, self.records)
        self.interceptor: Interceptor = interceptor or self.docker_hooks
        self._hooked = interceptor is None
        self.operator: OperatorEndpoints | None = None
        self._server: asyncio.Server | None = None
        self._sessions: dict[asyncio.Task[None], ClientSession] = {}
        self._socket_inode: int | None = None
        self._socket_lock: SocketLock | None = None
        self._reachability = ReachabilityLog()
        self.requests_started = 0  # read by the idle trimmer
        self._requests = DockerRequestRecorder() if options.metrics_address else None
        self._trimmer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        path = self.options.listen_path
        started = time.monotonic()
        self._socket_lock = claim_socket_path(path)  # held until stop(): one proxy per socket
        await self.hook_service.start()
        backend = DockerBackend(f"unix://{self.options.runtime_path}", self._reachability, self.engine)
        parts = ProxyParts(backend, self.hook_service, started, None, docker_requests=self._requests,
                           options=self.options)
        self.operator = OperatorEndpoints(self.options, parts)
        await self.operator.start()
        if self._hooked:
            self.hook_service.run_in_background(self.docker_hooks.points.rebuild_store(self.records),
                                                "store-rebuild")
        self._server = await asyncio.start_unix_server(self._serve_client, path=str(path))
        self._socket_inode = restrict_socket(path)
        trimmer = IdleTrimmer(lambda: self.requests_started)
        self._trimmer = asyncio.create_task(trimmer.run(), name="idle-trimmer")
        log.info("Docker mode: listening on %s; dockerd at unix://%s; plugin configs in %s (%d plugins)%s",
                 path, self.options.runtime_path, self.options.hook_config_dir,
                 len(self.hook_service.registry.plugins), self.operator.summary())

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
        self.requests_started += 1

    async def stop(self, grace: float | None = None) -> None:
        grace = self.options.shutdown_grace_seconds if grace is None else grace
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
        if self._trimmer is not None:
            self._trimmer.cancel()
            await asyncio.gather(self._trimmer, return_exceptions=True)
            self._trimmer = None
        if self.operator is not None:
            await self.operator.stop()
            self.operator = None
        await self.hook_service.stop()
        if self._socket_lock is not None:  # only a socket we claimed is ours to remove
            release_socket(self.options.listen_path, self._socket_inode)
            self._socket_inode = None
            self._socket_lock.release()
            self._socket_lock = None


async def serve_docker(options: ProxyOptions) -> None:
    """Run Docker mode until SIGTERM or SIGINT, then shut down gracefully."""
    await run_until_signalled(DockerProxyServer(options), options.shutdown_grace_seconds)
