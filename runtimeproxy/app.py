"""The proxy process, assembled: malloc tuning, the proxy socket and its lock, the hook service, the chosen
frontend (CRI gRPC server or Docker HTTP relay), the operator endpoints (admin socket, metrics), the idle
heap trim, and signals with a graceful stop.

The one module that knows every part: frontends know the hook core, admin reads a frontend only through
runtimeproxy.report, and nothing below imports this module. Every stop path (signal, failed start, an
endpoint that cannot start) gives back what was taken: the socket, its lock file, the state directory's lock.

gRPC is imported only once the allocator is tuned (by runtimeproxy.cli: tune_for_large_messages must come before
gRPC's first allocation), so the parts that bring it in are imported where the process starts, not at the top.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from pathlib import Path

from runtimeproxy.allocator import IdleTrimmer
from runtimeproxy.activation import ActivationError, InheritedSockets
from runtimeproxy.greeting import Greeting
from runtimeproxy.lifecycle import run_until_signalled
from runtimeproxy.listener import (SOCKET_MODE, SocketInUseError, SocketLock, claim_socket_path, lock_socket_path,
                                   release_socket, restrict_socket)
from runtimeproxy.options import ProxyOptions
from runtimeproxy.usage import naming_flag, socket_fix, taken_socket_problem

if TYPE_CHECKING:
    from runtimeproxy.admin.operator import OperatorEndpoints
    from runtimeproxy.hooks.service import HookService
    from runtimeproxy.nri.host import NriHost
    from runtimeproxy.report import FrontendReport

log = logging.getLogger(__name__)


# What to do when containerd's own NRI (1.7 with NRI on; 2.x by default) already serves the socket --nri-socket names.
NRI_SOCKET_TAKEN_ADVICE = (
    "Where containerd's own NRI serves it (containerd 2.x by default, 1.7 with NRI enabled), either run the NRI "
    "plugins on containerd's own NRI and keep the proxy for hook plugins only (start it without --nri-socket), or "
    "turn containerd's NRI off ([plugins.\"io.containerd.nri.v1.nri\"] disable = true) or point it elsewhere "
    "(its socket_path) and let the proxy host NRI")


class Frontend(Protocol):
    """A frontend's server as the process drives it (cri.server.CriFrontend, docker.server.DockerFrontend)."""

    @property
    def report(self) -> FrontendReport: ...  # read by the operator endpoints

    @property
    def calls_started(self) -> int: ...  # read by the idle trimmer

    def describe(self) -> str: ...  # the start-up line's first part: "listening on <socket>; <its backends>"

    async def start(self, inherited: socket.socket | None) -> None: ...  # serve on options.listen_path, already
    # claimed, or on the socket systemd passed for it

    async def stop(self, grace: float) -> None: ...  # stop accepting; in-flight calls get `grace` seconds

    async def close(self) -> None: ...  # release the backend, after the hook service stopped


FrontendFactory = Callable[[ProxyOptions, "HookService"], Frontend]


def frontend_for(options: ProxyOptions, greeting: Greeting | None = None) -> FrontendFactory:
    """The frontend --backend-runtime-mode chose; CRI's frame relay takes over the connections `greeting` holds."""
    if options.backend_mode == "Docker":
        from runtimeproxy.docker.server import DockerFrontend
        return DockerFrontend
    from runtimeproxy.cri.server import CriFrontend
    return lambda options, hook_service: CriFrontend(options, hook_service, greeting)


class Proxy:
    """One running proxy: its socket and lock, hook service, frontend, operator endpoints and idle trim."""

    def __init__(self, options: ProxyOptions, frontend: FrontendFactory | None = None,
                 inherited: InheritedSockets | None = None, greeting: Greeting | None = None) -> None:
        """`frontend` replaces the one options choose (tests of a frontend's seam); `inherited`: the sockets
        systemd passed (socket activation), taken by the roles they are meant for; `greeting`: the proxy socket
        taken from them already and greeted since the process began (runtimeproxy.greeting), the proxy's now."""
        self.options = options
        self._inherited = inherited or InheritedSockets.none()
        self._greeting = greeting
        self._frontend_factory = frontend or frontend_for(options, greeting)
        self.hook_service: HookService | None = None
        self.frontend: Frontend | None = None
        self.operator: OperatorEndpoints | None = None
        self._socket_lock: SocketLock | None = None
        self._socket_inode: int | None = None
        self._socket_file_is_ours = False
        self._trimmer: asyncio.Task[None] | None = None
        self.nri: NriHost | None = None

    async def start(self) -> None:
        from runtimeproxy.hooks.service import HookService

        options = self.options
        started = time.monotonic()
        inherited = (self._greeting.listening if self._greeting is not None
                     else self._inherited.take(options.listen_path, options.frontend_role, SOCKET_MODE))
        flag = "--koord-runtimeproxy-endpoint"
        try:
            with naming_flag(flag, options.listen_path, socket_fix(flag)):
                # Held until stop(): one proxy per socket. A passed socket's file is systemd's: locked, never removed.
                self._socket_lock = (claim_socket_path(options.listen_path) if inherited is None
                                     else lock_socket_path(options.listen_path))
        except SocketInUseError as error:
            raise SocketInUseError(taken_socket_problem(flag, error)) from None
        self._socket_file_is_ours = inherited is None
        self.hook_service = HookService(options)
        await self.hook_service.start()
        frontend = self.frontend = self._frontend_factory(options, self.hook_service)
        await frontend.start(inherited)
        if inherited is None:
            self._socket_inode = restrict_socket(options.listen_path)
        if options.nri_socket is not None:
            await self._start_nri(options.nri_socket)
        # Imported once the proxy socket serves, off the loop so that the first calls are answered meanwhile (the
        # admin API and prometheus_client are a fifth of the start).
        await asyncio.to_thread(importlib.import_module, "runtimeproxy.admin.operator")
        if options.metrics_address:
            await asyncio.to_thread(importlib.import_module, "runtimeproxy.admin.metrics")
        from runtimeproxy.admin.operator import OperatorEndpoints
        from runtimeproxy.admin.status import ProxyParts

        self.operator = OperatorEndpoints(options, ProxyParts(frontend.report, self.hook_service, started, options),
                                          self._inherited)
        await self.operator.start()
        if self._inherited:
            log.warning("systemd passed sockets no part of the proxy serves (left alone): %s",
                        self._inherited.describe_untaken())
        trimmer = IdleTrimmer(lambda: frontend.calls_started)
        self._trimmer = asyncio.create_task(trimmer.run(), name="idle-trimmer")
        log.info("%s; plugin configs in %s (%d plugins)%s", frontend.describe(), options.hook_config_dir,
                 len(self.hook_service.registry.plugins), self.operator.summary())

    async def _start_nri(self, socket_path: Path) -> None:
        """NRI plugins as plugins of the hook core: the host goes on the hook service (launching the plugins of
        the plugin directory); updates and evictions of other containers are asked of the core (the service's
        `asks`), which carries them out through the frontend's runtime (CRI's UpdateContainerResources and
        StopContainer, Docker's POST /containers/{id}/update and /stop, stops with timeout 0) and writes the
        store; calls are traced and plugins put in shadow as the hook core's."""
        from runtimeproxy.nri.default_validator import DefaultValidator, load_config
        from runtimeproxy.nri.host import NriHost
        from runtimeproxy.trust import TrustedOwners

        assert self.hook_service is not None and self.frontend is not None
        service, options = self.hook_service, self.options
        validator = None
        if options.nri_default_validator_config is not None:
            config = load_config(options.nri_default_validator_config)
            validator = DefaultValidator(config) if config.enable else None
        host = self.nri = NriHost(socket_path, service.asks, ready=service.store_rebuilt,
                                  registration_timeout=options.nri_registration_timeout,
                                  request_timeout=options.nri_request_timeout, toggles=service.toggles,
                                  plugin_dir=options.nri_plugin_path, plugin_config_dir=options.nri_plugin_config_path,
                                  owners=TrustedOwners.with_extra(options.hook_config_trusted_uids),
                                  trace=service.trace, stats=service.stats, gate=service.sync_gate,
                                  default_validator=validator)
        try:
            with naming_flag("--nri-socket", socket_path, socket_fix("--nri-socket")):
                await host.start()
        except SocketInUseError as error:
            raise SocketInUseError(f"{error}. {NRI_SOCKET_TAKEN_ADVICE}") from None
        service.nri = host

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, give in-flight calls `grace` seconds, then release everything (also after a
        start that failed half-way)."""
        grace = self.options.shutdown_grace_seconds if grace is None else grace
        if self._greeting is not None:  # a start that failed before the frame relay took the greeted connections
            self._greeting.close()
        if self.frontend is not None:
            await self.frontend.stop(grace)
        if self.nri is not None:
            from runtimeproxy.hooks.nri_plugins import NO_NRI_PLUGINS

            if self.hook_service is not None:
                self.hook_service.nri = NO_NRI_PLUGINS
            await self.nri.stop()
            self.nri = None
        if self._trimmer is not None:
            self._trimmer.cancel()
            await asyncio.gather(self._trimmer, return_exceptions=True)
            self._trimmer = None
        if self.operator is not None:
            await self.operator.stop()
            self.operator = None
        if self._socket_lock is not None:
            if self._socket_file_is_ours:  # a socket systemd passed stays for the next process
                release_socket(self.options.listen_path, self._socket_inode)
            self._socket_inode = None
            self._socket_lock.release()
            self._socket_lock = None
        if self.hook_service is not None:
            await self.hook_service.stop()
            self.hook_service = None
        if self.frontend is not None:
            await self.frontend.close()
            self.frontend = None


def loop_factory(options: ProxyOptions) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """Docker mode's loop (uvloop where installed); CRI mode: asyncio's (None)."""
    if options.backend_mode != "Docker":
        return None
    from runtimeproxy.docker.eventloop import docker_loop_factory
    return docker_loop_factory()


async def serve(options: ProxyOptions, inherited: InheritedSockets | None = None,
                greeting: Greeting | None = None) -> None:
    """Run the proxy until SIGTERM or SIGINT, then shut down gracefully."""
    await run_until_signalled(Proxy(options, inherited=inherited, greeting=greeting), options.shutdown_grace_seconds)


def run(options: ProxyOptions, inherited: InheritedSockets, greeting: Greeting | None = None,
        warnings: Iterable[str] = ()) -> int:
    """The rest of the process once runtimeproxy.cli tuned malloc, configured logging, read the sockets systemd
    passed (`inherited`) and began greeting on the proxy socket (`greeting`): its exit code."""
    for warning in warnings:  # after the re-exec: once
        log.warning("%s", warning)
    try:
        with asyncio.Runner(loop_factory=loop_factory(options)) as runner:
            runner.run(serve(options, inherited, greeting))
    except (SocketInUseError, ActivationError) as error:
        log.error("%s", error)
        return 1
    except (OSError, RuntimeError) as error:
        log.error("cannot start: %s", error)
        return 1
    return 0
