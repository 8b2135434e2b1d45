"""The runtime side of one NRI plugin connection: registration, Configure, Synchronize, calls, Shutdown.

What containerd/nri's adaptation does for each plugin (pkg/adaptation/plugin.go), on our mux and ttrpc:
the connection is multiplexed; on logical connection 1 we call the plugin's `Plugin` service, on connection
2 we serve the `Runtime` service. The plugin must call RegisterPlugin (name, two-digit index) within the
registration timeout (NRI's default 5 s); we then Configure it (runtime name and version, both timeouts in
milliseconds, its config text) and learn the events it subscribes to, then Synchronize it with the pods and
containers that exist. Every call has the request timeout (default 2 s). A plugin that misses the
registration timeout, or a call's timeout, or whose connection breaks, is detached: its connection is closed
and `PluginDetached` raised, and the caller goes on without it, as NRI does; unless its failure policy (v0.12.5,
in Configure's answer) keeps it attached on a timeout or has such a failure fail the request (`PluginFailed`). UpdateContainers the plugin
sends on its own (even while we wait for its answer to one of our calls) goes to `on_update`.

Event subscription follows NRI's mask (bit 1 << (event - 1), 0 meaning every lifecycle event; the events are
hooks.nri_events' table, on the wire by nri.events); bits for events this proxy does not know are masked off and
remembered, not refused, so newer plugins still attach. The events themselves are the hook core's business:
`call()` for the methods older plugins implement (CreateContainer, UpdateContainer, StopContainer,
UpdatePodSandbox), `notify()` for the notifications, which older plugins only take as StateChange.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from runtimeproxy.hooks.validate import PLUGIN_NAME_MAX_CHARS, printable, quoted
from runtimeproxy.listener import listen_backlog
from runtimeproxy.nri.events import BY_NUMBER, KNOWN_EVENTS_MASK, NOTIFICATIONS
from runtimeproxy.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from runtimeproxy.nri.ttrpc import MAX_MESSAGE, Code, ConnectionClosed, Endpoint, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_SOCKET_PATH = Path("/var/run/nri/nri.sock")
DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0

_PLUGIN_INDEX = re.compile(r"[0-9]{2}")

Resp = TypeVar("Resp", bound=Message)
UpdateHandler = Callable[["PluginSession", nri.UpdateContainersRequest], Awaitable[nri.UpdateContainersResponse]]


def event_bit(event: int) -> int:
    return 1 << (event - 1)


def event_mask(*events: int) -> int:
    mask = 0
    for event in events:
        mask |= event_bit(event)
    return mask


class PluginFailed(TtrpcError):
    """The plugin did not answer (a timeout, a broken connection): containerd/nri's fatal error, which its failure
    policy decides about (v0.12.5): `fails_request` (default: go on without it)."""

    fails_request = False


class PluginDetached(PluginFailed):
    """... and it was detached (its failure policy keeps it attached only on a timeout)."""


def _failed(detached: bool, fails_request: bool, code: int, message: str) -> PluginFailed:
    failure = (PluginDetached if detached else PluginFailed)(code, message)
    failure.fails_request = fails_request
    return failure


class PluginSession:
    """One plugin connection, seen from the runtime. `start()` runs registration and Configure."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, runtime_name: str,
                 runtime_version: str, config: str = "", launched_as: tuple[str, str] | None = None,
                 registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT, on_update: UpdateHandler | None = None) -> None:
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.config = config
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self._on_update = on_update
        # A plugin the proxy launched is known by its file name (index, name); one that connects says who it is.
        self._launched = launched_as is not None
        self.connected_unix_seconds = time.time()
        self.index, self.name = launched_as or ("", "")
        self.nri_version = ""
        self.events = 0
        self.ignored_events = 0  # subscription bits for events this proxy does not know
        self.failure_policy = nri.FailurePolicy()  # Configure's answer (v0.12.5); unset: NRI's old behaviour
        self.detached_reason: str | None = None
        self._state_change_only = False  # the plugin predates the dedicated notification methods
        self._mux = Mux(reader, writer, name="nri plugin")
        self._to_plugin = Endpoint(self._mux.open(PLUGIN_SERVICE_CONN), name="nri plugin service")
        self._from_plugin = Endpoint(self._mux.open(RUNTIME_SERVICE_CONN), name="nri runtime service")
        self._from_plugin.register(RUNTIME_SERVICE, "RegisterPlugin", nri.RegisterPluginRequest, self._register)
        self._from_plugin.register(RUNTIME_SERVICE, "UpdateContainers", nri.UpdateContainersRequest,
                                   self._update_containers)
        self._registered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def plugin_id(self) -> str:
        """NRI's name for the plugin: "index-name"."""
        return f"{self.index}-{self.name}"

    @property
    def launched(self) -> bool:
        """The runtime launched it (from its plugin directory) rather than it connecting on its own."""
        return self._launched

    @property
    def detached(self) -> bool:
        return self.detached_reason is not None

    def subscribed(self, event: int) -> bool:
        return bool(self.events & event_bit(event))

    # handshake

    async def start(self) -> None:
        """Waits for RegisterPlugin, then Configures the plugin; raises PluginDetached if either fails."""
        self._to_plugin.start()
        self._from_plugin.start()
        self._mux.start()
        closed = asyncio.ensure_future(self._mux.wait_closed())
        try:
            done, _ = await asyncio.wait({self._registered, closed}, timeout=self.registration_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        registration = self._registered
        if registration in done and not registration.cancelled() and registration.exception() is None:
            await self._configure()
            return
        if registration in done and not registration.cancelled():
            reason = f"registration refused: {registration.exception()}"
        elif done:
            reason = "connection closed before registration"
        else:
            reason = f"plugin registration timed out ({self.registration_timeout:g}s)"
        self.detach(reason)
        raise PluginDetached(Code.DEADLINE_EXCEEDED if not done else Code.UNAVAILABLE, reason)

    async def _configure(self) -> None:
        request = nri.ConfigureRequest(
            config=self.config, runtime_name=self.runtime_name, runtime_version=self.runtime_version,
            registration_timeout=round(self.registration_timeout * 1000),
            request_timeout=round(self.request_timeout * 1000))
        try:
            answer = await self.call("Configure", request, nri.ConfigureResponse)
        except PluginDetached:
            raise
        except TtrpcError as error:
            self.detach(f"failed to configure plugin: {error}")
            raise PluginDetached(error.code, self.detached_reason or "") from None
        self.failure_policy.CopyFrom(answer.failure_policy)
        mask = answer.events or KNOWN_EVENTS_MASK
        self.events = mask & KNOWN_EVENTS_MASK
        self.ignored_events = mask & ~KNOWN_EVENTS_MASK
        if self.ignored_events:
            log.warning("NRI plugin %s subscribed to unknown events 0x%x: ignored", self.plugin_id,
                        self.ignored_events)

    async def synchronize(self, pods: Sequence[nri.PodSandbox],
                          containers: Sequence[nri.Container]) -> list[nri.ContainerUpdate]:
        """Sends the existing pods and containers (split over several requests if one would be too big)."""
        updates: list[nri.ContainerUpdate] = []
        parts = _sync_parts(list(pods), list(containers))
        for number, (part_pods, part_containers) in enumerate(parts, start=1):
            more = number < len(parts)
            answer = await self.call("Synchronize", nri.SynchronizeRequest(
                pods=part_pods, containers=part_containers, more=more), nri.SynchronizeResponse)
            if more and (answer.update or answer.more != more):
                self.detach("plugin does not handle split sync requests")
                raise PluginDetached(Code.FAILED_PRECONDITION, self.detached_reason or "")
            updates.extend(answer.update)
        return updates

    # calls

    async def call(self, method: str, request: Message, response_type: type[Resp],
                   timeout: float | None = None) -> Resp:
        """Calls the plugin's `method` (request timeout unless given). A timeout or a broken connection is a
        PluginFailed, as its failure policy says (containerd/nri v0.12.5's handleRequestError): detached
        (PluginDetached) unless the policy keeps it on a timeout; an error the plugin answers is a TtrpcError and
        leaves it attached."""
        policy = self.failure_policy
        if self.detached:
            raise _failed(True, policy.fail_request, Code.UNAVAILABLE,
                          f"plugin {self.plugin_id} is detached: {self.detached_reason}")
        try:
            return await self._to_plugin.call(PLUGIN_SERVICE, method, request, response_type,
                                              timeout=self.request_timeout if timeout is None else timeout)
        except ConnectionClosed as error:
            self.detach(f"connection lost during {method}: {error.message}")
            raise _failed(True, policy.fail_request, error.code, self.detached_reason or "") from None
        except TtrpcError as error:
            if error.code == Code.DEADLINE_EXCEEDED:
                if policy.keep_connected:
                    raise _failed(False, policy.fail_request, error.code, f"{method} timed out (the plugin stays "
                                  "attached: its failure policy keeps it connected)") from None
                self.detach(f"{method} timed out")
                raise _failed(True, policy.fail_request, error.code, self.detached_reason or "") from None
            # The plugin's own text: bounded and escaped before stats, the trace, logs or the kubelet see it.
            raise TtrpcError(error.code, printable(error.message)) from None

    async def notify(self, event: int, pod: nri.PodSandbox, container: nri.Container | None = None) -> None:
        """Delivers a notification event (one of NOTIFICATIONS: hooks.nri_events) if the plugin subscribed to it:
        by its own method, or as StateChange to a plugin older than those methods."""
        if not self.subscribed(event):
            return
        assert event in NOTIFICATIONS, event
        wire = BY_NUMBER[event]
        if "container" not in wire.request.DESCRIPTOR.fields_by_name:
            container = None  # a pod event carries no container, as NRI sends it
        if not self._state_change_only:
            request = wire.message(pod=pod) if container is None else wire.message(pod=pod, container=container)
            try:
                await self.call(wire.row.method, request, nri.Empty)  # the answers are empty messages
                return
            except PluginFailed:
                raise
            except TtrpcError as error:
                if error.code != Code.UNIMPLEMENTED:
                    raise
                self._state_change_only = True
        change = nri.StateChangeEvent(pod=pod, container=container)
        change.event = event  # type: ignore[assignment]  # an Event number from the table (nri.events)
        await self.call("StateChange", change, nri.Empty)

    async def shutdown(self) -> None:
        """Tells the plugin the runtime is going away, then closes the connection."""
        with contextlib.suppress(TtrpcError):
            await self.call("Shutdown", nri.Empty(), nri.Empty)
        self.detach("shut down")

    def detach(self, reason: str) -> None:
        if self.detached_reason is None:
            self.detached_reason = reason
            log.info("NRI plugin %s detached: %s", self.plugin_id, reason)
        if not self._registered.done():
            self._registered.cancel()
        self._to_plugin.close(reason)
        self._from_plugin.close(reason)
        self._mux.close()

    async def wait_closed(self) -> None:
        await self._mux.wait_closed()

    # the Runtime service

    async def _register(self, request: nri.RegisterPluginRequest) -> nri.Empty:
        if self._registered.done():
            raise TtrpcError(Code.FAILED_PRECONDITION, f"plugin {self.plugin_id} is already registered")
        if not self._launched:
            problem = _registration_problem(request)
            if problem:
                self._registered.set_exception(ValueError(problem))
                raise TtrpcError(Code.INVALID_ARGUMENT, problem)
            self.name, self.index = request.plugin_name, request.plugin_idx
        self.nri_version = printable(request.NRI_version, PLUGIN_NAME_MAX_CHARS)
        log.info("NRI plugin %s registered", self.plugin_id)
        self._registered.set_result(None)
        return nri.Empty()

    async def _update_containers(self, request: nri.UpdateContainersRequest) -> nri.UpdateContainersResponse:
        if not self._registered.done():
            raise TtrpcError(Code.FAILED_PRECONDITION, "UpdateContainers before RegisterPlugin")
        if self._on_update is None:
            raise TtrpcError(Code.UNIMPLEMENTED, "this runtime takes no unsolicited container updates")
        return await self._on_update(self, request)


def _registration_problem(request: nri.RegisterPluginRequest) -> str:
    """A name is shown in logs, `runtimeproxyctl status`, toggles and metric labels: short and printable."""
    name = request.plugin_name
    if not name:
        return "invalid plugin name: empty"
    if len(name) > PLUGIN_NAME_MAX_CHARS:
        return f"invalid plugin name {quoted(name)}: {len(name)} characters, over {PLUGIN_NAME_MAX_CHARS}"
    if printable(name) != name:
        return f"invalid plugin name {quoted(name)}: it contains control characters"
    if not _PLUGIN_INDEX.fullmatch(request.plugin_idx):
        return f"invalid plugin index {quoted(request.plugin_idx)}: must be two digits"
    return ""


_SYNC_ENVELOPE_ROOM = 1024  # the ttrpc.Request around the payload: service and method names, timeout


def _sync_parts(pods: list[nri.PodSandbox],
                containers: list[nri.Container]) -> list[tuple[list[nri.PodSandbox], list[nri.Container]]]:
    """The state cut into requests that fit one ttrpc message (usually one request holding everything)."""
    limit = MAX_MESSAGE - _SYNC_ENVELOPE_ROOM
    objects: list[nri.PodSandbox | nri.Container] = [*pods, *containers]
    parts: list[tuple[list[nri.PodSandbox], list[nri.Container]]] = []
    current: tuple[list[nri.PodSandbox], list[nri.Container]] = ([], [])
    size = 0
    for obj in objects:
        cost = obj.ByteSize() + 6  # field tag and length prefix
        if cost > limit:
            raise TtrpcError(Code.RESOURCE_EXHAUSTED, f"one object of {cost} bytes exceeds a ttrpc message")
        if size + cost > limit and (current[0] or current[1]):
            parts.append(current)
            current, size = ([], []), 0
        if isinstance(obj, nri.PodSandbox):
            current[0].append(obj)
        else:
            current[1].append(obj)
        size += cost
    parts.append(current)
    return parts


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           on_plugin: Callable[[PluginSession], Awaitable[None]], **session_options: object) -> None:
    """One plugin's connection, however it came (accepted on the NRI socket, or one end of a socket pair): its
    registration and Configure, then the registered, configured plugin is handed to `on_plugin` (which
    synchronizes it). A plugin that fails the handshake is dropped with a log line."""
    session = PluginSession(reader, writer, **session_options)  # type: ignore[arg-type]
    try:
        await session.start()
    except PluginDetached as error:
        log.warning("NRI plugin connection dropped: %s", error.message)
        return
    await on_plugin(session)


async def listen(sock: socket.socket,
                 on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                 ) -> asyncio.Server:
    """Accepts plugin connections on `sock` (listener.bind_unix_socket: claimed, its mode set); each is handed to
    `on_connection` (serve_connection, told what to do with a registered plugin)."""
    return await asyncio.start_unix_server(on_connection, sock=sock, backlog=listen_backlog())
