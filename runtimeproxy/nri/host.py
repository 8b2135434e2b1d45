"""The proxy as an NRI runtime, its registry and fan-out (containerd/nri's adaptation.go): the plugins attached
to its NRI socket, as plugins of the hook core.

`NriHost` implements hooks.nri_plugins.NriPlugins. It listens on the NRI socket (refusing one a live NRI server
holds), keeps the registered plugins in NRI's order (index, then name), lets a reconnecting plugin replace
its old connection (one live registration per index and name), and synchronizes each new plugin with the
pods and containers the store records, all under its one lock (which every event's fan-out holds too). The hook
points then hand it each lifecycle event; every plugin that subscribed gets it, in order. One plugin's call of
CreateContainer or UpdateContainer is nri.call's (the answer checked by itself, folded, timed, traced); once every
plugin answered, the result is validated once (hooks.chain.ChainRecord.settle, the kubelet call's chain: both kinds'
answers, with their owners) before validators see it or anything is carried out; what the answers
ask of other containers is collected and carried out by nri.result; NRI's event numbers and the container
state each reports are nri.events'.

Failures, as containerd with NRI: a plugin that misses a timeout or loses its connection is detached and the
call goes on without it; an error a plugin answers to CreateContainer, UpdateContainer, RunPodSandbox or
StartContainer, a conflict, a refused field or an invalid answer fails the call (HookFailed; hooks.lifecycle
undoes a RunPodSandbox); errors answered to the other notifications are logged.

Each plugin call is one step of the core's chain (hooks.step.KindSteps, NRI's row of hooks.kinds), as a hook
plugin's: the node's toggles turn a plugin off, or one event of it (`runtimeproxyctl
disable nri:10-name --hook CreateContainer`): it is not sent what is off, as if it had not subscribed, and the
trace shows it `skipped: toggled off` with the reason; every event's calls are kept in the pod's trace
(nri.explain); and a plugin the node's toggles put in shadow (`runtimeproxyctl shadow nri:10-name`) is called and
traced but its adjustment, its updates (answered, synchronized or sent on its own) and its evictions are not
carried out.

Plugins can also be launched by the proxy from a plugin directory (nri.launch): each gets its end of a
socketpair, then registers, is configured and attaches like a connected one; `stop()` gives every plugin
Shutdown and then stops the launched processes.

The host asks the core (`asks`, hooks.runtime.PluginAsks) for what it does not own: the snapshot a plugin is
synchronized with, updates of other containers (in CreateContainer/UpdateContainer/StopContainer answers,
Synchronize, and UpdateContainers a plugin sends on its own: the frontend's UpdateContainerResources, the store
written by the core; without a runtime they are answered as failed and logged) and evictions
(CreateContainer/UpdateContainer answers, a plugin's own UpdateContainers: the frontend's stop with timeout 0, as
containerd's EvictContainer, which the plugins then hear as a StopContainer by the core's own flow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from runtimeproxy import __version__
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.nri_plugins import NriPluginStatus, Subject
from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.kinds import NRI
from runtimeproxy.hooks.nri_events import EVENTS
from runtimeproxy.hooks.runtime import PluginAsks
from runtimeproxy.hooks.stats import CallStats
from runtimeproxy.hooks.step import HookFailed, KindSteps, StepToggles
from runtimeproxy.hooks.syncgate import SyncGate
from runtimeproxy.hooks.trace import TraceRecorder
from runtimeproxy.listener import SocketInUseError, SocketLock, bind_unix_socket, claim_socket_path, release_socket
from runtimeproxy.nri import convert
from runtimeproxy.nri.adjust import Adjustments
from runtimeproxy.nri.call import NriEventRef, NriPluginRef, PluginCall, failure_outcome
from runtimeproxy.nri.events import WIRE, WireEvent
from runtimeproxy.nri.lock import EventLock
from runtimeproxy.nri.explain import NOTIFIED, SENT, EventRecord, asked_of_others
from runtimeproxy.nri.launch import LaunchedProcess, discover
from runtimeproxy.nri.result import Asked, Results
from runtimeproxy.nri.session import (
    DEFAULT_REGISTRATION_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    PluginDetached,
    PluginFailed,
    PluginSession,
    listen,
    serve_connection,
)
from runtimeproxy.nri.ttrpc import TtrpcError
from runtimeproxy.nri.default_validator import DEFAULT_VALIDATOR_ID, DEFAULT_VALIDATOR_NAME, DefaultValidator
from runtimeproxy.nri.validation import Collected, rejection
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri
from runtimeproxy.trust import TrustedOwners
from runtimeproxy.usage import os_reason

log = logging.getLogger(__name__)

RUNTIME_NAME = "runtimeproxy"


class NriHost:
    def __init__(self, socket_path: Path, asks: PluginAsks, *,
                 registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 toggles: StepToggles | None = None,
                 ready: Callable[[], Awaitable[None]] | None = None,
                 plugin_dir: Path | None = None, plugin_config_dir: Path | None = None,
                 owners: TrustedOwners | None = None, trace: TraceRecorder | None = None,
                 stats: CallStats | None = None,
                 gate: SyncGate | None = None, default_validator: DefaultValidator | None = None) -> None:
        """`plugin_dir`: launch the plugins found there (configs from `plugin_config_dir`), trusting the
        files of `owners` (default: root and the proxy's user). `trace`: the hook core's per-pod trace, where
        each event's calls are kept, and `stats` its table of calls; `toggles`: the node's toggles (hooks.toggles), which turn a plugin or one
        of its events off and put a plugin in shadow, by its toggle name (`nri:10-name`); `gate`:
        the hook core's gate against its lifecycle calls, held alone while a plugin is synchronized."""
        self.socket_path = socket_path
        self.plugin_dir = plugin_dir
        self.plugin_config_dir = plugin_config_dir
        self._owners = owners or TrustedOwners.with_extra()
        self._launched: list[LaunchedProcess] = []
        self.asks = asks  # the core: the sync snapshot, updates and evictions of other containers
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        # The core's chain step for NRI plugins: toggles, shadow, timing, statistics (the NRI rows of the core's
        # table `stats`, by plugin id and event, for status and metrics), the pod trace, failures in NRI's terms.
        self.steps = KindSteps(NRI, toggles, trace if trace is not None else TraceRecorder(0), stats)
        self.stats = self.steps.stats
        self.results = Results(asks, self.stats)  # what answers ask of other containers (nri.result)
        self.call = PluginCall(self.steps, socket_path, self.results, self._drop)  # one plugin's call (nri.call)
        self._ready = ready  # waits for the store's rebuild after a restart: plugins sync with what exists
        self._plugins: list[PluginSession] = []  # attached, in NRI's order
        # containerd/nri's one lock: each event's fan-out and carry-out (with the stops it caused), and each attach
        # (drop the old session of that plugin, snapshot, Synchronize, insert), one at a time; never held by a
        # plugin's own UpdateContainers.
        self._lock = EventLock()
        self._gate = gate or SyncGate()
        # containerd/nri's built-in default validator (nri.default_validator), when its config enables it.
        self.default_validator = default_validator
        self._server: asyncio.Server | None = None
        self._socket_lock: SocketLock | None = None
        self._inode: int | None = None
        self._watchers: set[asyncio.Task[None]] = set()

    @property
    def plugins(self) -> list[PluginSession]:
        return list(self._plugins)

    @property
    def _session_options(self) -> dict[str, object]:
        return dict(runtime_name=RUNTIME_NAME, runtime_version=__version__,
                    registration_timeout=self.registration_timeout, request_timeout=self.request_timeout,
                    on_update=self._unsolicited_update)

    async def start(self) -> None:
        """Claims the NRI socket as the proxy's own sockets are claimed (a directory others could write is refused,
        a lock file beside it, a live server's socket never taken over) and serves it with mode 0660 whatever the
        umask: whoever connects is sent every container's env and may mount anything into it."""
        try:
            self._socket_lock = claim_socket_path(self.socket_path)
        except SocketInUseError as error:
            raise SocketInUseError(f"NRI socket: {error} (a containerd with NRI enabled? disable NRI there or give "
                                   "the proxy another --nri-socket)") from None
        try:
            sock, self._inode = bind_unix_socket(self.socket_path)
            self._server = await listen(sock, self.serve_stream)
        except BaseException:
            self._release_socket()
            raise
        log.info("NRI: serving plugins on %s", self.socket_path)
        self.launch()

    async def serve_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One plugin's connection: registration and Configure, then attached (or dropped with a log line). The NRI
        socket serves each connection it accepts here; the host's unit tests hand in one end of a socket pair
        instead, no socket bound."""
        await serve_connection(reader, writer, self._attach, **self._session_options)

    def launch(self) -> None:
        """Launches the plugins of the plugin directory, if the host has one (start() does, once it serves the
        socket); each registers and attaches in the background, as connected plugins do (a slow one never holds
        up the proxy's start)."""
        if self.plugin_dir is None:
            return
        for plugin_file in discover(self.plugin_dir, self.plugin_config_dir, self._owners):
            try:
                process = LaunchedProcess.spawn(plugin_file)
            except OSError as error:
                log.warning("NRI: cannot launch plugin %s: %s", plugin_file.path, os_reason(error))
                continue
            self._launched.append(process)
            self._watch(self._start_launched(process), f"nri-launch-{plugin_file.plugin_id}")

    async def _start_launched(self, process: LaunchedProcess) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=process.connection)
        plugin_file = process.plugin
        session = PluginSession(reader, writer, launched_as=(plugin_file.index, plugin_file.name),
                                config=plugin_file.config, **self._session_options)  # type: ignore[arg-type]
        self._watch(self._end_with_process(session, process), f"nri-exit-{plugin_file.plugin_id}")
        try:
            await session.start()
        except PluginDetached as error:
            log.warning("NRI: launched plugin %s dropped: %s", plugin_file.plugin_id, error.message)
            await process.stop()
            return
        await self._attach(session)

    @staticmethod
    async def _end_with_process(session: PluginSession, process: LaunchedProcess) -> None:
        """A launched plugin's connection ends with its process, whoever else holds the other end (a child it
        forked): detached, it is dropped (_forget_when_closed), or never attaches."""
        returncode = await process.exited()
        session.detach(f"its process exited ({returncode})")

    def _watch(self, coroutine: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    @property
    def launched(self) -> list[LaunchedProcess]:
        return list(self._launched)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        plugins, self._plugins = self._plugins, []
        await asyncio.gather(*(plugin.shutdown() for plugin in plugins), return_exceptions=True)
        for task in list(self._watchers):
            task.cancel()
        launched, self._launched = self._launched, []
        await asyncio.gather(*(process.stop() for process in launched), return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)
            self._server = None
        self._release_socket()

    def _release_socket(self) -> None:
        """Only a socket we claimed is ours to remove."""
        if self._socket_lock is not None:
            release_socket(self.socket_path, self._inode)
            self._inode = None
            self._socket_lock.release()
            self._socket_lock = None

    # -- attaching -------------------------------------------------------------------------------

    async def _attach(self, plugin: PluginSession) -> None:
        """A registered, configured plugin: replaces an older connection of the same plugin, synchronized. No
        lifecycle call is between its event and its store write meanwhile (the core's gate), and no event is
        being sent (the lock): the plugin finds each pod and container in its Synchronize or hears its events."""
        if self._ready is not None:
            await self._ready()
        async with self._gate.synchronizing(), self._lock.held():
            for old in [p for p in self._plugins if p.plugin_id == plugin.plugin_id]:
                self._plugins.remove(old)
                old.detach("replaced by a new connection of the same plugin")
            if plugin.detached:
                return
            pods, containers = convert.synchronized(*self.asks.snapshot())
            try:
                updates = await plugin.synchronize(pods, containers)
            except TtrpcError as error:
                plugin.detach(f"synchronize failed: {error}")
                return
            self._plugins.append(plugin)
            self._plugins.sort(key=lambda p: (p.index, p.name))
        log.info("NRI plugin %s attached (events 0x%x; synchronized %d pods, %d containers)",
                 plugin.plugin_id, plugin.events, len(pods), len(containers))
        if self.in_shadow(plugin) or self.switched_off(plugin):
            if updates:
                log.warning("NRI plugin %s (%s) asked to update %d containers at synchronization: not carried out",
                            plugin.plugin_id, "in shadow" if self.in_shadow(plugin) else "toggled off", len(updates))
        else:
            await self.results.update_others(plugin.plugin_id, updates, "")
        self._watch(self._forget_when_closed(plugin), f"nri-{plugin.plugin_id}")

    async def _forget_when_closed(self, plugin: PluginSession) -> None:
        await plugin.wait_closed()
        plugin.detach(plugin.detached_reason or "connection closed")
        self._drop(plugin)

    def _drop(self, plugin: PluginSession) -> None:
        if plugin in self._plugins:
            self._plugins.remove(plugin)
            log.warning("NRI plugin %s detached: %s", plugin.plugin_id, plugin.detached_reason)

    # -- hooks.nri_plugins.NriPlugins ----------------------------------------------------------------

    def _subscribed(self, event: str) -> list[PluginSession]:
        number = WIRE[event].number
        return [plugin for plugin in self._plugins if plugin.subscribed(number) and not plugin.detached]

    def _subscribers(self, event: str) -> list[PluginSession]:
        """The plugins an event is sent to: subscribed, and the node's toggles leave it on for them."""
        allows = self.steps.allows
        return [plugin for plugin in self._subscribed(event) if allows(plugin.plugin_id, event)]

    def statuses(self) -> list[NriPluginStatus]:
        return [NriPluginStatus(
            name=plugin.plugin_id, toggle_name=NRI.toggle_name(plugin.plugin_id),
            kind="launched" if plugin.launched else "connected",
            events=tuple(event.name for event in EVENTS if plugin.subscribed(event.number)),
            since_unix_seconds=plugin.connected_unix_seconds, protocol_version=plugin.nri_version)
            for plugin in self._plugins]

    def switched_off(self, plugin: PluginSession) -> bool:
        """Every event it subscribed to is toggled off on this node (`runtimeproxyctl disable nri:10-name`): it
        stays attached, but what it asks on its own (updates, evictions) is not carried out either."""
        return not any(self.steps.allows(plugin.plugin_id, event.name) for event in EVENTS
                       if plugin.subscribed(event.number))

    def in_shadow(self, plugin: PluginSession) -> bool:
        """On trial (`runtimeproxyctl shadow nri:10-name`): called and traced, its answers never applied."""
        return self.steps.in_shadow(plugin.plugin_id)

    def wants(self, event: str) -> bool:
        """Asked on every hooked call: no list is built."""
        number, allows = WIRE[event].number, self.steps.allows
        return any(plugin.subscribed(number) and not plugin.detached and allows(plugin.plugin_id, event)
                   for plugin in self._plugins)

    def attached(self) -> bool:
        return bool(self._plugins)

    async def notify(self, event: str, subject: Subject) -> None:
        async with self._lock.held():
            stopped = await self._notify(WIRE[event], subject)
            await self._stops_heard(stopped)

    async def _notify(self, wire: WireEvent, subject: Subject) -> list[str]:
        """An event whose answers do not change the call, to every subscribed plugin (the lock held); returns
        the containers what they asked stopped."""
        event = wire.name
        pod = convert.subject_pod(subject)
        container = convert.subject_container(subject)
        fields = convert.event_fields(subject, container)
        record = EventRecord(event, subject, self.steps)
        asked: list[Asked] = []
        for plugin in self._subscribed(event):
            if record.toggled_off(plugin.plugin_id):
                continue
            shadow = self.in_shadow(plugin)
            started = self.steps.started()
            updates: list[nri.ContainerUpdate] = []
            try:
                if wire.row.notification:
                    await plugin.notify(wire.number, pod, container)
                else:
                    answer = await plugin.call(wire.row.method, wire.message(pod=pod, **fields), wire.response)
                    updates = list(answer.update) if wire.row.updates else []  # type: ignore[attr-defined]
            except TtrpcError as error:
                outcome, message = failure_outcome(error)
                record.failed(plugin.plugin_id, started, shadow, outcome, message)
                if isinstance(error, PluginDetached):
                    self._drop(plugin)
                if isinstance(error, PluginFailed) and not error.fails_request:
                    pass  # no answer: the event goes on without it (unless its failure policy says otherwise)
                elif self.steps.fails_call(event, shadow):
                    failure = self.call.failed(event, plugin, grpc.StatusCode.UNKNOWN, f"{outcome}: {message}")
                    record.finish(None, f"the call fails: {plugin.plugin_id} answered {outcome}")
                    raise failure from None
                else:
                    log.warning("NRI plugin %s failed %s%s: %s", plugin.plugin_id, event,
                                " (in shadow)" if shadow else "", error)
                continue
            record.ok(plugin.plugin_id, started, shadow, asked_of_others(updates, [], shadow))
            if shadow:
                self.results.count_shadowed(plugin.plugin_id, [])
            elif updates:
                asked.append(Asked(plugin.plugin_id, updates, []))
        record.finish(None, NOTIFIED)
        return [stopped for request in asked for stopped in await self.results.carry_out(request, subject.container_id)]

    async def adjust(self, event: str, subject: Subject, time_remaining: float | None,
                     chain: ChainRecord | None = None, value: ContainerValue | None = None) -> ContainerValue:
        async with self._lock.held():
            adjusted, stopped = await self._adjust(WIRE[event], subject, value or subject.value(), chain)
            await self._stops_heard(stopped)
            return adjusted

    async def _adjust(self, wire: WireEvent, subject: Subject, start: ContainerValue,
                      chain: ChainRecord | None) -> tuple[ContainerValue, list[str]]:
        """An event whose answers change the call (the lock held): the container as the plugins leave `start`, and
        the containers what they asked stopped. `chain`: the kubelet call's record the steps go into (None: the
        event's own entry)."""
        assert wire.row.adjusts
        event = wire.name
        pod = convert.subject_pod(subject)
        adjustments = Adjustments(start.container)
        record = EventRecord(event, subject, self.steps, chain, start.request)
        asked: list[Asked] = []
        validators = self._subscribers(nri_events.VALIDATE_CONTAINER_ADJUSTMENT) if wire.answers("adjust") else []
        collected, original = None, None
        if validators or (self.default_validator is not None and wire.answers("adjust")):
            original = convert.event_container(wire, subject, start.container)
            collected = Collected(original.id)
            for plugin in self._plugins:  # every plugin attached takes part, as containerd/nri lists them
                collected.took_part(plugin.name, plugin.index)
            if self.default_validator is not None:
                collected.took_part(*DEFAULT_VALIDATOR_ID)
        adjusted = start
        try:
            for plugin in self._subscribed(event):
                if record.toggled_off(plugin.plugin_id):
                    continue
                answer = await self.call.adjust_by(plugin, wire, pod, subject, start, adjustments, record, collected)
                if answer is not None:
                    asked.append(answer)
            adjusted = start.with_container(adjustments.container)
            # Before validators see it, or it is sent (a hook plugin's answer may be folded out of it: the value
            # follows the request the chain settled on).
            adjusted = adjusted.with_request(record.settle(adjusted.request))
        except HookFailed as failure:
            record.finish(start.with_container(adjustments.container).request, self.steps.failed_result(failure))
            raise
        record.finish(adjusted.request, SENT, written_back=True)
        if collected is not None and original is not None:
            await self._validate(collected.request(pod, original), validators, subject, chain)
        stopped = [stopped for request in asked
                   for stopped in await self.results.carry_out(request, subject.container_id)]
        return adjusted, stopped

    async def _validate(self, request: nri.ValidateContainerAdjustmentRequest, validators: list[PluginSession],
                        subject: Subject, chain: ChainRecord | None = None) -> None:
        """ValidateContainerAdjustment to every validator at once (the lock held), as containerd/nri v0.12.5's
        validateContainerAdjustment: a rejection, an error or a timeout of any of them fails the CreateContainer
        whatever its failure policy (which only decides whether a timed-out one stays attached). A validator in
        shadow is called and traced; its verdict is only logged."""
        event = nri_events.VALIDATE_CONTAINER_ADJUSTMENT
        record = EventRecord(event, subject, self.steps, chain)
        failures: list[tuple[PluginSession | None, str]] = []
        if self.default_validator is not None:
            reason = self.default_validator.validate(request)
            if reason is not None:
                failures.append((None, f'validator "{"-".join(reversed(DEFAULT_VALIDATOR_ID))}" rejected '
                                       f"container adjustment, reason: {reason}"))
        called = [plugin for plugin in validators if not record.toggled_off(plugin.plugin_id)]
        started = self.steps.started()
        answers = await asyncio.gather(*(plugin.call(event, request, nri.ValidateContainerAdjustmentResponse)
                                         for plugin in called), return_exceptions=True)
        for plugin, answer in zip(called, answers):
            shadow = self.in_shadow(plugin)
            if isinstance(answer, BaseException):
                if not isinstance(answer, TtrpcError):
                    raise answer
                if isinstance(answer, PluginDetached):
                    self._drop(plugin)
                outcome, message = failure_outcome(answer)
                record.failed(plugin.plugin_id, started, shadow, outcome, message)
                verdict: str | None = f"validator plugin {plugin.plugin_id} failed: {outcome}: {message}"
            else:
                verdict = rejection(plugin.plugin_id, answer)
                if verdict is None:
                    record.ok(plugin.plugin_id, started, shadow, [f"{event}: accepted"])
                else:
                    record.failed(plugin.plugin_id, started, shadow, "rejected", verdict)
            if verdict is not None and shadow:
                log.warning("NRI validator %s (in shadow: the call is unaffected): %s", plugin.plugin_id, verdict)
            elif verdict is not None:
                failures.append((plugin, verdict))
        if not failures:
            record.finish(None, "accepted")
            return
        offender, verdict = failures[0]
        if offender is None:
            failure = self.steps.failure(NriEventRef(NRI.trace_hook(event)), event,
                                         NriPluginRef(DEFAULT_VALIDATOR_NAME, self.socket_path),
                                         grpc.StatusCode.UNKNOWN, verdict, "")
            log.warning("%s", failure)
            failure.logged = True
        else:
            failure = self.call.failed(event, offender, grpc.StatusCode.UNKNOWN, verdict)
        record.finish(None, self.steps.failed_result(failure))
        raise failure

    async def _stops_heard(self, stopped: list[str]) -> None:
        """The follow-on events of a carry-out (the lock held): the plugins hear StopContainer of each container
        an eviction stopped, as the core says it was before the stop; the store then records the stop."""
        for container_id in stopped:
            if self.wants(nri_events.STOP_CONTAINER):
                subject = await self.asks.stopped_subject(container_id)
                if subject is not None:
                    await self._stops_heard(await self._notify(WIRE[nri_events.STOP_CONTAINER], subject))
            self.asks.stop_recorded(container_id)

    async def _stops_heard_later(self, stopped: list[str]) -> None:
        """Stops a plugin's own UpdateContainers caused: heard as a new event once it has its answer (it may be
        waiting for that answer while an event holds the lock: the deadlock containerd/nri fixed in v0.12.1)."""
        async with self._lock.held():
            await self._stops_heard(stopped)

    async def _unsolicited_update(self, plugin: PluginSession,
                                  request: nri.UpdateContainersRequest) -> nri.UpdateContainersResponse:
        """UpdateContainers a plugin sends on its own (maybe while we wait for its answer: served apart). A
        plugin in shadow has none carried out: its updates are answered as failed, its evictions counted."""
        updates, evictions = list(request.update), list(request.evict)
        if self.switched_off(plugin):
            log.warning("NRI plugin %s is toggled off on this node: its UpdateContainers (%d updates, %d evictions) "
                        "is not carried out", plugin.plugin_id, len(updates), len(evictions))
            return nri.UpdateContainersResponse(failed=updates)
        if self.in_shadow(plugin):
            if updates:
                log.warning("NRI plugin %s (in shadow) asked to update %d containers: not carried out",
                            plugin.plugin_id, len(updates))
            self.results.count_shadowed(plugin.plugin_id, evictions)
            return nri.UpdateContainersResponse(failed=updates)
        stopped = await self.results.evict_all(plugin.plugin_id, evictions, "")
        if stopped:
            self._watch(self._stops_heard_later(stopped), f"nri-evicted-{plugin.plugin_id}")
        failed = await self.results.apply_updates(plugin.plugin_id, updates)
        return nri.UpdateContainersResponse(failed=failed)
