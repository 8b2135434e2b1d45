"""The admin gRPC service (runtimeproxy.admin.v1.Admin) on its own unix socket, mode 0600.

Served by a separate aio server, with reflection and health, so `grpcurl` works as well as
`runtimeproxyctl`. Bad requests get INVALID_ARGUMENT with a one-line message; a toggle naming
no config file the proxy knows gets NOT_FOUND with the registered names and a did-you-mean,
unless it asks to be staged; a toggle that cannot be persisted gets FAILED_PRECONDITION and
changes nothing. An attached NRI plugin is named by its id (`10-name`, when no config file
`10-name.json` is registered) or its toggle name (`nri:10-name`), and is toggled whole or per NRI event
(`--hook CreateContainer`); a hook name for an NRI plugin, or an NRI event for a hook plugin, is a bad
request naming the valid ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtimeproxy.admin.status import ProxyParts, shadow_messages, status, toggle_messages
from runtimeproxy.admin.trace import not_traced, trace_response
from runtimeproxy.hooks.toggles import (
    ALL_PLUGINS, NRI_PREFIX, ToggleError, UnknownPlugin, nri_toggle_name, plugin_file_name, scopes_named,
    unknown_plugin,
)
from runtimeproxy.activation import InheritedSockets
from runtimeproxy.listener import SocketLock, claim_socket_path, lock_socket_path, release_socket
from runtimeproxy.relay import GrpcListenSocket
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin, admin_pb2_grpc
from runtimeproxy.usage import os_reason

log = logging.getLogger(__name__)

ADMIN_SERVICE = admin.DESCRIPTOR.services_by_name["Admin"].full_name
ADMIN_SOCKET_MODE = 0o600  # root only: toggles switch plugins off for the whole node


class AdminServicer(admin_pb2_grpc.AdminServicer):
    def __init__(self, parts: ProxyParts) -> None:
        self._parts = parts

    async def Status(self, request: admin.StatusRequest, context: grpc.aio.ServicerContext) -> admin.StatusResponse:
        return await status(self._parts)

    async def Disable(self, request: admin.ToggleRequest, context: grpc.aio.ServicerContext) -> admin.ToggleResponse:
        toggles = self._parts.hooks.toggles
        return await self._change(context, request, lambda name, scopes: toggles.disable(
            name, scopes, request.reason, everything=request.all, author=request.author,
        ))

    async def Enable(self, request: admin.ToggleRequest, context: grpc.aio.ServicerContext) -> admin.ToggleResponse:
        toggles = self._parts.hooks.toggles
        return await self._change(context, request, lambda name, scopes: toggles.enable(
            name, scopes, everything=request.all
        ))

    async def Trace(self, request: admin.TraceRequest, context: grpc.aio.ServicerContext) -> admin.TraceResponse:
        recorder = self._parts.hooks.trace
        pod = recorder.find(request.pod)
        if pod is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, not_traced(request.pod, recorder))
        assert pod is not None  # abort raised
        return trace_response(pod, recorder)

    async def Shadow(self, request: admin.ShadowRequest, context: grpc.aio.ServicerContext) -> admin.ShadowResponse:
        return await self._set_shadow(request, context, True)

    async def Unshadow(self, request: admin.ShadowRequest,
                       context: grpc.aio.ServicerContext) -> admin.ShadowResponse:
        return await self._set_shadow(request, context, False)

    async def _set_shadow(self, request: admin.ShadowRequest, context: grpc.aio.ServicerContext,
                          shadow: bool) -> admin.ShadowResponse:
        hooks = self._parts.hooks
        notes: list[str] = []
        async with self._refusing_toggle_errors(context, "a shadow setting"):
            typed = self._plugin_name(request.plugin)
            if not (shadow and request.stage):  # staged: a new version goes on trial before it first registers
                await self._check_known(typed)
            name = plugin_file_name(typed)
            configured = next((p.config.shadow for p in hooks.registry.plugins if p.name == name), False)
            notes = hooks.toggles.set_shadow(name, shadow, configured, author=request.author)
        return admin.ShadowResponse(settings=shadow_messages(hooks), notes=notes)

    def _toggle_name(self, request: admin.ToggleRequest) -> str:
        """The name the toggle is kept under: an NRI plugin's id becomes its toggle name, unless a config
        file of that name is registered."""
        return ALL_PLUGINS if request.all else self._plugin_name(request.plugin)

    def _plugin_name(self, typed: str) -> str:
        """A bare NRI plugin id (`10-name`) is its toggle name (`nri:10-name`) when it is attached or toggled,
        unless a hook plugin config file of that name is registered."""
        name = typed.strip()
        if name.startswith(NRI_PREFIX):
            return name
        as_nri = nri_toggle_name(name)
        known = plugin_file_name(name) in self._parts.hooks.registry.config_file_names()
        return as_nri if not known and self._knows(as_nri) else name

    def _nri_names(self) -> set[str]:
        return {plugin.toggle_name for plugin in self._parts.hooks.nri.statuses()}

    async def _change(self, context: grpc.aio.ServicerContext, request: admin.ToggleRequest,
                      change: Callable[[str, frozenset[str]], list[str]]) -> admin.ToggleResponse:
        notes: list[str] = []
        async with self._refusing_toggle_errors(context, "a toggle"):
            name = self._toggle_name(request)
            # A usage error (no such hook, or NRI event, for this kind of plugin) comes before an unknown plugin.
            scopes = scopes_named(name, list(request.hooks))
            if not request.all and not request.stage:
                await self._check_known(name)
            notes = change(name, scopes)
        return admin.ToggleResponse(toggles=toggle_messages(self._parts.hooks), notes=notes)

    @contextlib.asynccontextmanager
    async def _refusing_toggle_errors(self, context: grpc.aio.ServicerContext, what: str) -> AsyncIterator[None]:
        """A toggle or shadow change that cannot be made is answered with its reason; nothing changed."""
        try:
            yield
        except UnknownPlugin as error:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        except ToggleError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except OSError as error:
            path = self._parts.hooks.toggles.state_path
            log.error("cannot persist %s to %s: %s; nothing changed", what, path, os_reason(error))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"cannot write the toggle state {path}: {os_reason(error)}; nothing changed")

    async def _check_known(self, plugin: str) -> None:
        """A name must be a config file the proxy knows, or have a toggle already (to enable it):
        a typo must not look like a disabled plugin. Raises UnknownPlugin."""
        hooks = self._parts.hooks
        name = plugin_file_name(plugin)
        if self._knows(name):
            return
        await hooks.registry.reload()  # a file written just before the command is not a typo
        if not self._knows(name):
            raise unknown_plugin(plugin, hooks.registry.config_file_names() | self._nri_names(),
                                 hooks.registry.directory_problem(),
                                 toggled={t.plugin for t in hooks.toggles.active})

    def _knows(self, name: str) -> bool:
        hooks = self._parts.hooks
        return (name in hooks.registry.config_file_names() or name in self._nri_names()
                or bool(hooks.toggles.of(name)) or hooks.toggles.shadow_override(name) is not None)


class AdminServer:
    """Owns the admin socket, its lock file (`<socket>.lock`, like the main socket's) and its gRPC server."""

    def __init__(self, path: Path, parts: ProxyParts, inherited: InheritedSockets | None = None) -> None:
        self.path = path
        self._parts = parts
        self._inherited = inherited or InheritedSockets.none()
        self._listen: GrpcListenSocket | None = None
        self._server: grpc.aio.Server | None = None
        self._inode: int | None = None
        self._lock: SocketLock | None = None
        self._file_is_ours = False

    async def start(self) -> None:
        inherited = self._inherited.take(self.path, "admin", ADMIN_SOCKET_MODE)
        # Held until stop(): one admin API per socket. A passed socket's file is systemd's: locked, never removed.
        self._lock = claim_socket_path(self.path) if inherited is None else lock_socket_path(self.path)
        self._file_is_ours = inherited is None
        self._listen = GrpcListenSocket(self.path, ADMIN_SOCKET_MODE, inherited)
        try:
            await self._serve(self._listen)
        except BaseException:
            await self.stop()  # a failed start gives the socket and its lock back
            raise
        log.debug("admin API (runtimeproxyctl) on %s", self.path)  # the start-up line stays one line

    async def _serve(self, listen: GrpcListenSocket) -> None:
        server = grpc.aio.server()
        admin_pb2_grpc.add_AdminServicer_to_server(AdminServicer(self._parts), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection([ADMIN_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
        listen.bind(server)
        await server.start()
        self._server = server
        await listen.start()
        if not listen.inherited:
            self._inode = os.stat(self.path).st_ino

    async def stop(self) -> None:
        if self._listen is not None:
            await self._listen.stop_accepting()
        if self._server is not None:
            await self._server.stop(0.5)
            self._server = None
        if self._listen is not None:
            await self._listen.drain()
            self._listen.release()
            self._listen = None
        if self._lock is not None:
            if self._file_is_ours:  # a socket systemd passed stays for the next process
                release_socket(self.path, self._inode)
            self._inode = None
            self._lock.release()
            self._lock = None
