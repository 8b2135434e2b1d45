"""Each hook point's flow, once for both frontends: one short function per point.

A frontend decodes its wire request into hook values, calls the function of the point once, and writes
the result back into its wire request; the store bookkeeping around the calls without a hook (removals)
is here too. Everything policy-like lives here: the skip rule, "is anyone registered" (checked first, so
a call nobody hooks costs a lookup), running the chain, the cgroup-follow rule, the effective resources
an update leaves, filling the pod part of a container's request, and what the store records.

CreateContainer and UpdateContainerResources are one chain each (`_chain`) over the container in the core's
model (hooks.chain_value): the hook plugins, called with its hook projection made at the call, then the NRI
plugins on the value they left, recorded as one run (hooks.step): one trace entry, collisions across kinds. The
store records the container as the chain's value left it.

A Fail-policy failure of a pre-hook is logged here and raised as `HookFailed` (hooks.dispatcher): the
frontend turns it into its own error (a gRPC status with ErrorInfo, a Docker 500) and does not call the
backend. Post-hooks never change a call's outcome. `time_remaining` is the caller's deadline (None: none).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from google.protobuf.message import Message

from runtimeproxy.hooks import dispatcher
from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.context import pod_of, tell_nri
from runtimeproxy.hooks.dispatcher import HookFailed, HookPoint, failure_fields
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.nri_plugins import NriPlugins, PodResize, Subject
from runtimeproxy.hooks.journal import CREATE_CONTAINER, START_CONTAINER, InFlight
from runtimeproxy.hooks.merge import apply_resource_update, changed_resources
from runtimeproxy.hooks.chain_value import ChainValue, ContainerValue, PodValue, RequestValue, differs
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, PodRecord, Resources, now_ns
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.trace import model_key
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)
# The NRI plugins' part of a container call's chain: the value as the hook plugins left it, the call's record
# (None: no hook plugin ran, the NRI plugins' own entry) -> the value as the NRI plugins leave it.
NriPart = Callable[[ContainerValue, "ChainRecord | None"], Awaitable[ContainerValue]]
V = TypeVar("V", bound="ChainValue[Any]")  # of either request type


@dataclass
class PodSandboxRun:
    """The outcome of PreRunPodSandbox: the pod as the runtime is to create it."""

    value: PodValue  # as the plugins left it (its record says whether the pod has the skip label)
    changed: bool  # the plugins changed it: the frontend writes it back into its request
    missed: tuple[str, ...] = ()  # plugins that failed under Ignore: the pod is created without their answer

    @property
    def request(self) -> hooks.PodSandboxHookRequest:
        return self.value.request

    @property
    def skip_hooks(self) -> bool:
        return self.value.pod.skip_hooks


class CreateWriter(Protocol):
    """A frontend's create request (its wire's translator), as a creation's outcome is written back into it."""

    async def container(self, container: ContainerRecord) -> None:
        """The container as the plugins left it (annotations, environment, resources)."""

    def edits(self, edits: ContainerEdits, kinds: frozenset[str]) -> None:
        """The kinds of edits (hooks.edits) the NRI plugins changed, as they left them."""

    def cgroup_parent(self, parent: str) -> bool:
        """The container goes under `parent` ("" leaves it); True if the request changed."""


@dataclass
class ContainerCreation:
    """The outcome of PreCreateContainer: the container as the runtime is to create it."""

    pod_id: str
    # The container as the plugins left it: the model (labels, edits: argv, mounts, ... as the frontend decoded
    # them and the NRI plugins changed them) with its hook projection (with its pod's context).
    value: ContainerValue
    changed: bool  # the plugins changed the projection: the frontend writes it back into its request
    hooked: bool  # False for a container of a pod with the skip label
    decoded_edits: ContainerEdits | None = None  # as the frontend decoded its request (None: not given)
    missed: tuple[str, ...] = ()  # plugins that failed under Ignore: created without their answer
    unrecorded_pod: PodRecord | None = None  # the pod as the request showed it, when the store had no record of it

    @property
    def request(self) -> hooks.ContainerResourceHookRequest:
        return self.value.request

    @property
    def edits(self) -> ContainerEdits | None:
        """The edits the runtime creates the container with (None: the frontend decoded none)."""
        return self.value.container.edits

    def changed_edits(self) -> frozenset[str]:
        """The kinds of edits (hooks.edits) the frontend must write back into its request."""
        if self.edits is None or self.decoded_edits is None:
            return frozenset()
        return self.edits.changed_kinds(self.decoded_edits)

    async def write_back(self, writer: CreateWriter) -> bool:
        """What the plugins changed, written into the frontend's request; True if it changed (re-encode it)."""
        rewritten = False
        if self.changed:
            await writer.container(self.value.container)
            rewritten = True
        edited = self.changed_edits()
        if edited:
            assert self.edits is not None
            writer.edits(self.edits, edited)
            rewritten = True
        return writer.cgroup_parent(self.cgroup_parent) or rewritten

    @property
    def cgroup_parent(self) -> str:
        """The cgroup parent the container must be created under: its pod's, as the hooks left it (a pod moved
        by PreRunPodSandbox takes its containers along, with or without PreCreateContainer plugins).
        "" leaves the frontend's request as it is."""
        return self.value.pod_cgroup_parent if self.hooked else ""


@dataclass
class ResourceUpdate:
    """The outcome of PreUpdateContainerResources: what the plugins saw and what they left."""

    seen: ContainerValue  # the container with the update applied: its effective resources, the update's annotations
    left: ContainerValue

    @property
    def changed(self) -> bool:
        return differs(self.seen, self.left)

    def resource_changes(self) -> Resources:
        """Only what the plugins changed, to add to the kubelet's sparse update. The plugins saw the effective
        resources, so what they echoed must not be sent as if the kubelet had asked for it; a zero or empty
        value is never sent: to the runtimes it means "unchanged", it cannot clear a field, and it must not
        cancel what the kubelet asked for. hugepage_limits: the merge keeps the request's."""
        return changed_resources(self.seen.container.resources, self.left.container.resources)

    def annotation_changes(self) -> dict[str, str]:
        before = self.seen.container.annotations
        return {key: value for key, value in self.left.container.annotations.items() if before.get(key) != value}


# A value of more entries (labels, annotations, variables) has its hook projection made on a worker thread: one of
# 100,000 labels takes ~100 ms of Python putting them into protobuf maps, which on the event loop would stall every
# other caller (as dockerd's huge creates did: docs/failure-modes.md).
PROJECTED_OFF_LOOP_ENTRIES = 10_000


async def projected(value: ChainValue[Any], entries: int) -> None:
    """The value's projection made before the chain reads it, off the event loop when it is large."""
    if entries > PROJECTED_OFF_LOOP_ENTRIES:
        await asyncio.to_thread(lambda: value.request)


class HookPoints:
    def __init__(self, service: HookService, runtime: Runtime, pod_labels: Mapping[str, str] | None = None) -> None:
        """`runtime`: the frontend's backend (hooks.runtime), given to the core once here; `pod_labels`: the
        labels that runtime gives every pod itself (containerd's kind label)."""
        self.dispatcher = service.dispatcher
        self.store = service.store
        self.context = service.use_runtime(runtime, pod_labels)
        self.runtime = runtime
        self._service = service
        service.resumer = self  # a restart's reconciliation runs the post-starts and removals it finishes here
        self.missed = service.missed

    def creating(self, creation: ContainerCreation) -> AbstractContextManager[None]:
        """Held by a frontend around the runtime's CreateContainer and the store write, until the answer is about to
        go back: a crash meanwhile leaves the call in the journal for the next proxy (hooks.reconcile)."""
        container = creation.value.container
        return self._service.journal.in_flight(InFlight(CREATE_CONTAINER, creation.pod_id, container.name,
                                                        container.attempt))

    def starting(self, container_id: str) -> AbstractContextManager[None]:
        """As `creating`, around the whole StartContainer: its pre-hooks, the runtime's start, the post-start hooks."""
        return self._service.journal.in_flight(InFlight(START_CONTAINER, container_id=container_id))

    def changing(self) -> AbstractAsyncContextManager[None]:
        """Held by a frontend around a whole hooked call (pre-event, the runtime's answer, the store write), so
        a plugin's synchronization never falls in between (hooks.syncgate)."""
        return self._service.sync_gate.changing()

    @property
    def nri(self) -> NriPlugins:
        """Plugins of another protocol (NRI; hooks.nri_plugins), called after the hook-protocol chain."""
        return self._service.nri

    def edits_want_image(self) -> bool:
        """Whether a frontend decodes a create's edits with its image read (its Entrypoint and Cmd where the
        request has no command, and who it is: a runtime call): only while an NRI plugin is attached, the only
        kind that sees them (cheap: asked on every create)."""
        return self.nri.attached()

    async def _notify_nri(self, event: str, pod_id: str = "", container_id: str = "",
                            resize: PodResize | None = None) -> None:
        """An event for the NRI plugins about a recorded pod or container (hooks.context.tell_nri)."""
        await tell_nri(self.context, self.nri, event, pod_id, container_id, resize)

    async def _chain(self, point: HookPoint, value: V, time_remaining: float | None,
                     nri_part: NriPart | None, ignored: list[str], hooked: bool = True) -> V:
        """One kubelet call's chain: the point's hook plugins, then `nri_part` (a container's value) on the value
        they left, into the same record (finished once, also when either kind's plugin fails the call).
        `ignored` gets the hook plugins the call went on without; `hooked`: the point has plugins (the caller
        asked once)."""
        if not hooked:
            return await nri_part(value, None) if nri_part is not None else value  # type: ignore[arg-type,return-value]
        try:
            async with self.dispatcher.chain(point, value) as chain:
                await self.dispatcher.run_hooks(chain, time_remaining)
                if nri_part is not None:
                    chain.value = await nri_part(chain.value, chain.record)  # type: ignore[arg-type]
        except HookFailed as failure:
            if not failure.logged:
                log.warning("%s", failure, extra=failure_fields(failure.plugin, failure.point, failure.code))
            raise
        ignored.extend(chain.without)
        return chain.value  # type: ignore[return-value]

    async def _post_hook(self, point: HookPoint, request_factory: Callable[[], Awaitable[Message | None]],
                         time_remaining: float | None) -> None:
        """The request is only built (maybe a backend read) when the point has plugins."""
        if not self.dispatcher.has_plugins(point):
            return
        request = await request_factory()
        if request is None:
            return
        try:
            await self.dispatcher.run(point, request, time_remaining)
        except HookFailed as failure:  # only pre-hooks raise; kept for safety
            log.warning("%s", failure, extra=failure_fields(failure.plugin, failure.point, failure.code))

    # -- pods ------------------------------------------------------------------------------------------

    async def pre_run_pod_sandbox(self, pod: PodRecord, time_remaining: float | None) -> PodSandboxRun:
        """`pod`: as the frontend decoded the kubelet's request (the skip rule reads its labels)."""
        admitted = self.context.admitted(pod)
        start = PodValue(admitted)
        hooked = self.dispatcher.has_plugins(dispatcher.PRE_RUN_POD_SANDBOX)
        if admitted.skip_hooks or not hooked:
            if hooked:
                self.dispatcher.trace_skipped(dispatcher.PRE_RUN_POD_SANDBOX, start.request)
            return PodSandboxRun(start, False)
        ignored: list[str] = []
        await projected(start, len(admitted.labels) + len(admitted.annotations))
        left = await self._chain(dispatcher.PRE_RUN_POD_SANDBOX, start, time_remaining, None, ignored)
        return PodSandboxRun(left, differs(start, left), tuple(ignored))

    async def pod_sandbox_ran(self, pod_id: str, run: PodSandboxRun) -> None:
        """The runtime created the pod: record it as created. An NRI plugin failing RunPodSandbox raises
        HookFailed, as containerd fails the call: the plugins are told the pod stopped and was removed, the
        store forgets it (its trace stays: it says why), and the runtime's `remove_sandbox` (the frontend's
        stop and remove) takes away the sandbox just created."""
        if pod_id:
            pod = run.value.pod
            self.store.put_pod(pod_id, pod)
            self.dispatcher.trace.learn_sandbox(model_key(pod), pod_id)
            self.missed.note(pod_id, pod_id, f"{pod.namespace}/{pod.name}", "", dispatcher.PRE_RUN_POD_SANDBOX.name,
                             run.missed)
            try:
                await self._notify_nri(nri_events.RUN_POD_SANDBOX, pod_id)
            except HookFailed as failure:  # logged where it was raised
                log.warning("RunPodSandbox failed by %s: the sandbox %s is stopped and removed", failure.plugin.name,
                            pod_id, extra=failure_fields(failure.plugin, failure.point, failure.code))
                await self._notify_nri(nri_events.STOP_POD_SANDBOX, pod_id)
                await self._notify_nri(nri_events.REMOVE_POD_SANDBOX, pod_id)
                self.store.remove_pod(pod_id)
                await self.runtime.remove_sandbox(pod_id)
                raise

    async def post_stop_pod_sandbox(self, pod_id: str, time_remaining: float | None) -> None:
        await self._post_hook(dispatcher.POST_STOP_POD_SANDBOX, lambda: self.context.pod_request(pod_id), time_remaining)
        await self._notify_nri(nri_events.STOP_POD_SANDBOX, pod_id)
        self.store.pod_stopped(pod_id)

    async def pod_sandbox_removed(self, pod_id: str) -> None:
        """Forget the pod and its containers (also after the runtime said it did not know it)."""
        if self.store.pod(pod_id) is not None:  # only a recorded pod: the runtime no longer has it
            await self._notify_nri(nri_events.REMOVE_POD_SANDBOX, pod_id)
        self.store.remove_pod(pod_id)
        self.missed.forget_pod(pod_id)
        self.dispatcher.trace.forget_pod(pod_id)

    async def pre_update_pod_sandbox_resources(self, pod_id: str, resize: PodResize) -> None:
        """An in-place pod resize (CRI's UpdatePodSandboxResources, a kubelet of 1.33+): the NRI plugins hear
        UpdatePodSandbox with the resources as they are to be and may fail the call (HookFailed), as containerd
        2.2+'s NRI does. The hook protocol has no such point."""
        await self._notify_nri(nri_events.UPDATE_POD_SANDBOX, pod_id, resize=resize)

    async def pod_sandbox_resources_updated(self, pod_id: str, resize: PodResize) -> None:
        """The resize went through (or the runtime has no such call: the proxy plays containerd 2.2+'s part):
        the store records the pod's new resources, then the NRI plugins hear PostUpdatePodSandbox."""
        self.store.pod_resized(pod_id, resize.overhead, resize.resources)
        await self._notify_nri(nri_events.POST_UPDATE_POD_SANDBOX, pod_id)

    # -- containers ------------------------------------------------------------------------------------

    async def pre_create_container(
        self, pod_id: str, container: ContainerRecord, time_remaining: float | None,
        sandbox: Callable[[], PodRecord] | None = None,
    ) -> ContainerCreation:
        """`container`: as the frontend decoded the kubelet's request: its name, attempt, annotations,
        environment, resources, its labels as its runtime keeps them (the CRI labels and the runtime's own), and
        its edits: what the hook model lacks (the image read when `edits_want_image()`), shown to the NRI plugins
        subscribed to CreateContainer and recorded as those plugins left them once the container is created.
        Its pod is the recorded one (read from the backend on a miss), else `sandbox()`: what the frontend's
        request says of the pod. A pod the proxy does not know still gets its containers' hooks (the skip rule
        reads `sandbox()`'s labels)."""
        pod = await self.context.pod(pod_id)
        unrecorded = self.context.admitted(sandbox()) if pod is None and sandbox is not None else None
        pod = pod or unrecorded
        start = ContainerValue(container, pod)  # not created yet: its state is unknown
        edits = container.edits
        if pod is not None and pod.skip_hooks:
            if self.dispatcher.has_plugins(dispatcher.PRE_CREATE_CONTAINER):
                self.dispatcher.trace_skipped(dispatcher.PRE_CREATE_CONTAINER, start.request)
            return ContainerCreation(pod_id, start, False, False, edits, unrecorded_pod=unrecorded)
        ignored: list[str] = []

        async def nri_part(value: ContainerValue, chain: ChainRecord | None) -> ContainerValue:
            return await self.nri.adjust(nri_events.CREATE_CONTAINER, Subject(pod_id, pod, "", value.container),
                                         time_remaining, chain, value)

        wants_nri = self.nri.wants(nri_events.CREATE_CONTAINER)
        await projected(start, len(container.env) + len(container.annotations) +
                        (len(pod.labels) + len(pod.annotations) if pod is not None else 0))
        left = await self._chain(dispatcher.PRE_CREATE_CONTAINER, start, time_remaining,
                                 nri_part if wants_nri else None, ignored,
                                 self.dispatcher.has_plugins(dispatcher.PRE_CREATE_CONTAINER))
        return ContainerCreation(pod_id, left, differs(start, left), True, edits, tuple(ignored), unrecorded)

    async def _pid_of(self, container_id: str) -> int:
        """The started container's pid for the model, read back from the runtime only while an NRI plugin is
        attached (the hook protocol has no pid: no read on its path); 0 when not read or not known."""
        if not self.nri.attached():
            return 0
        loaded = await self.context.source.load_container(container_id)
        return loaded.pid if loaded is not None else 0

    async def container_created(self, container_id: str, creation: ContainerCreation) -> None:
        """The runtime created the container: record it as created, under its new ID."""
        if container_id:
            record = replace(creation.value.container, pod_id=creation.pod_id, id=container_id,
                             state=ContainerState.CREATED, created_ns=now_ns(), pod_from_create=creation.unrecorded_pod)
            self.store.put_container(container_id, record)
            pod = creation.value.pod or PodRecord()
            self.dispatcher.trace.learn_container(model_key(pod, record), container_id, creation.pod_id)
            self.missed.note(container_id, creation.pod_id, f"{pod.namespace}/{pod.name}", record.name,
                             dispatcher.PRE_CREATE_CONTAINER.name, creation.missed)
            await self._notify_nri(nri_events.POST_CREATE_CONTAINER, container_id=container_id)

    async def pre_start_container(self, container_id: str, time_remaining: float | None) -> None:
        """The start carries nothing to change: plugins act on the container's cgroups themselves. An NRI plugin
        failing StartContainer fails the start (HookFailed) and the NRI plugins hear StopContainer, as
        containerd does for a start NRI failed."""
        if self.dispatcher.has_plugins(dispatcher.PRE_START_CONTAINER):
            request = await self.context.container_request(container_id)
            if request is not None:
                await self._chain(dispatcher.PRE_START_CONTAINER, RequestValue(request), time_remaining, None, [])
        try:
            await self._notify_nri(nri_events.START_CONTAINER, container_id=container_id)
        except HookFailed:
            await self._notify_nri(nri_events.STOP_CONTAINER, container_id=container_id)
            raise

    async def post_start_container(self, container_id: str, time_remaining: float | None) -> None:
        self.store.container_started(container_id, await self._pid_of(container_id))
        await self._post_hook(dispatcher.POST_START_CONTAINER, lambda: self.context.container_request(container_id),
                              time_remaining)
        await self._notify_nri(nri_events.POST_START_CONTAINER, container_id=container_id)

    async def pre_update_container_resources(
        self, container_id: str, update: Resources | None, annotations: Mapping[str, str],
        time_remaining: float | None,
    ) -> ResourceUpdate | None:
        """Plugins see the container as it will be: the recorded resources with the sparse `update` applied
        the way the runtime applies it, and the recorded annotations with the update's. None: no hook ran."""
        hooked = self.dispatcher.has_plugins(dispatcher.PRE_UPDATE_CONTAINER_RESOURCES)
        nri_wants = self.nri.wants(nri_events.UPDATE_CONTAINER)
        if not hooked and not nri_wants:
            return None
        found = await self.context.container(container_id)
        if found is None:
            return None
        record, recorded_pod = found
        pod = pod_of(record, recorded_pod)
        if pod is not None and pod.skip_hooks:
            return None
        resources = apply_resource_update(record.resources, update) if update is not None else record.resources
        seen = ContainerValue(replace(record, resources=resources, annotations={**record.annotations, **annotations}),
                              pod)
        subject = Subject(record.pod_id, pod, container_id, record)

        async def nri_part(value: ContainerValue, chain: ChainRecord | None) -> ContainerValue:
            return await self.nri.adjust(nri_events.UPDATE_CONTAINER, subject, time_remaining, chain, value)

        left = await self._chain(dispatcher.PRE_UPDATE_CONTAINER_RESOURCES, seen, time_remaining,
                                 nri_part if nri_wants else None, [], hooked)
        return ResourceUpdate(seen, left)

    async def container_resources_updated(self, container_id: str, sent: Resources | None,
                                          annotations: Mapping[str, str]) -> None:
        """The runtime applied the update as sent: the recorded resources follow it."""
        self.store.update_container(container_id, sent, dict(annotations))
        await self._notify_nri(nri_events.POST_UPDATE_CONTAINER, container_id=container_id)

    async def post_stop_container(self, container_id: str, time_remaining: float | None) -> None:
        await self._post_hook(dispatcher.POST_STOP_CONTAINER, lambda: self.context.container_request(container_id),
                              time_remaining)
        # As containerd's NRI: StopContainer shows the container as it was before the stop (RUNNING).
        await self._notify_nri(nri_events.STOP_CONTAINER, container_id=container_id)
        self.store.container_stopped(container_id)

    async def container_removed(self, container_id: str) -> None:
        if self.store.container(container_id) is not None:  # only a recorded one: the runtime no longer has it
            await self._notify_nri(nri_events.REMOVE_CONTAINER, container_id=container_id)
        self.store.remove_container(container_id)
        self.missed.forget_container(container_id)

    # -- for frontends whose pods and containers share one ID space (Docker) -------------------------

    def recorded_pod(self, object_id: str) -> bool:
        """The ID is a pod the store holds (no backend read)."""
        return self.store.pod(object_id) is not None

    async def post_stop(self, object_id: str, time_remaining: float | None) -> None:
        """PostStopPodSandbox for a pod, PostStopContainer for a container (the pod read from the backend on
        a miss; nothing is looked up when neither point has plugins)."""
        if not (self.dispatcher.has_plugins(dispatcher.POST_STOP_POD_SANDBOX)
                or self.dispatcher.has_plugins(dispatcher.POST_STOP_CONTAINER)
                or self.nri.wants(nri_events.STOP_POD_SANDBOX) or self.nri.wants(nri_events.STOP_CONTAINER)):
            self.store.pod_stopped(object_id)  # the model's state (whichever it is)
            self.store.container_stopped(object_id)
            return
        if self.store.container(object_id) is None and await self.context.pod(object_id) is not None:
            await self.post_stop_pod_sandbox(object_id, time_remaining)
        else:
            await self.post_stop_container(object_id, time_remaining)

