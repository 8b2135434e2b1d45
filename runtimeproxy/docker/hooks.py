"""The hooked Docker Engine API calls: the same seven hook points as CRI mode, on cri-dockerd's requests.

| request                              | hook point                                            |
|--------------------------------------|-------------------------------------------------------|
| POST /containers/create (sandbox)    | PreRunPodSandbox (body rewritten)                     |
| POST /containers/create (container)  | PreCreateContainer (body rewritten)                   |
| POST /containers/{id}/start          | PreStartContainer, then PostStartContainer            |
| POST /containers/{id}/update         | PreUpdateContainerResources (body rewritten)          |
| POST /containers/{id}/stop           | PostStopContainer or PostStopPodSandbox               |
| DELETE /containers/{id}              | none: the store forgets the sandbox or container      |

Translation only: each route's body becomes hook values, the hook core (hooks.lifecycle) runs the point, the
result is written back into the body; the hook policy (skip rule, cgroup-follow, effective resources, what
the store records) is the core's. Containers Kubernetes did not create (no `io.kubernetes.docker.type` label:
a person's `docker run`) are no hook point at all. A body that is not what Docker expects is relayed untouched
(dockerd answers it). A Fail-policy failure answers 500 with a Docker error body naming plugin and hook;
nothing reaches dockerd. Post-hooks run after dockerd answered 2xx/304 and never change the answer; an NRI
plugin failing RunPodSandbox (after dockerd created the sandbox container) has it removed and answers 500.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from contextlib import AbstractAsyncContextManager, AbstractContextManager, ExitStack

from runtimeproxy.docker.bodies import convert_large, parse_body, serialize_body
from runtimeproxy.docker.edits import apply_edits, container_edits, process_argv
from runtimeproxy.docker.interception import ErrorReply, InterceptedCall, UpstreamAnswer
from runtimeproxy.docker.messages import (
    CONTAINER_TYPE,
    SANDBOX_ID_LABEL,
    SANDBOX_TYPE,
    Body,
    BodyError,
    KubeName,
    apply_cgroup_parent,
    apply_to_container_body,
    apply_to_sandbox_body,
    apply_to_update_body,
    container_create_request,
    container_labels_of,
    create_name,
    docker_type,
    parse_kube_name,
    pod_of_container,
    sandbox_create_request,
    update_resources,
)
from runtimeproxy.docker.routes import HookedRoute
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.lifecycle import ContainerCreation, HookPoints, PodSandboxRun
from runtimeproxy.hooks.service import HookService
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)

HOOK_FAILED_STATUS = 500  # Docker clients print the message of any error status
_CREATED_NOTE = "created"  # notes of a create: the core's PodSandboxRun or ContainerCreation
_UPDATE_NOTE = "update"  # notes of an update: the resources sent to dockerd
# Notes of a container's create or start: its entry in the journal of calls in flight (hooks.journal), ended
# in after(), before the answer goes back; an exchange after() never sees (dockerd unreachable or broken) leaves
# it open, for the next proxy to reconcile after a restart, as a crash would.
_JOURNAL_NOTE = "journaled"
NO_DEADLINE = None  # Docker requests carry no deadline: each plugin's own timeout applies


def _succeeded(answer: UpstreamAnswer) -> bool:
    return 200 <= answer.status < 300 or answer.status == 304  # 304: already started / stopped


class DockerHooks:
    """The `Interceptor` of Docker mode (see `docker.interception`)."""

    def __init__(self, service: HookService, runtime: Runtime) -> None:
        self.points = HookPoints(service, runtime)
        self._runtime = runtime  # an image's Entrypoint and Cmd, for NRI plugins' view of the argv (docker.runtime)

    async def _edits(self, body: Body, read_image: bool) -> ContainerEdits:
        """What the hook model lacks (for NRI plugins and the model); the image is read only when `read_image`
        and the body leaves the argv to it (else the argv is () then: not known)."""
        cdi = await self._runtime.cdi_enabled()
        if not read_image or not isinstance(body.get("Image"), str):
            return container_edits(body, process_argv(body, [], []) if body.get("Entrypoint") else (), cdi)
        facts = await self._runtime.image_facts(body["Image"])
        argv = process_argv(body, list(facts.entrypoint), list(facts.cmd))
        return replace(container_edits(body, argv, cdi), image=facts.identity)

    def changing(self) -> AbstractAsyncContextManager[None]:
        return self.points.changing()

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        route = call.match.route
        try:
            if route is HookedRoute.CREATE:
                return await self.before_create(call, body)
            if route is HookedRoute.START:
                await self.before_start(call, call.match.container_id or "")
            elif route is HookedRoute.UPDATE:
                return await self.before_update(call, body)
        except HookFailed as failure:
            _journal_end(call)  # the start is failed here: nothing reaches dockerd
            return ErrorReply(HOOK_FAILED_STATUS, str(failure))
        except BodyError as error:
            log.info("%s relayed without hooks: %s", route.value, error)
        return body

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        try:
            return await self._after(call, answer)
        finally:
            _journal_end(call)

    async def _after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        route, container_id = call.match.route, call.match.container_id or ""
        if route is HookedRoute.REMOVE:
            if _succeeded(answer) or answer.status == 404:
                await self.points.pod_sandbox_removed(container_id)
                await self.points.container_removed(container_id)
            return None
        if not _succeeded(answer):
            return None
        if route is HookedRoute.CREATE:
            try:
                await self.after_create(call, answer)
            except HookFailed as failure:  # RunPodSandbox failed by an NRI plugin: the sandbox was removed
                return ErrorReply(HOOK_FAILED_STATUS, str(failure))
        elif route is HookedRoute.START:
            if not self.points.recorded_pod(container_id):  # a sandbox's start is part of RunPodSandbox
                await self.points.post_start_container(container_id, NO_DEADLINE)
        elif route is HookedRoute.UPDATE:
            await self.points.container_resources_updated(container_id, call.notes.get(_UPDATE_NOTE), {})
        elif route is HookedRoute.STOP:
            await self.points.post_stop(container_id, NO_DEADLINE)
        return None

    # -- create ----------------------------------------------------------------------------------------

    async def before_create(self, call: InterceptedCall, data: bytes) -> bytes:
        name = parse_kube_name(create_name(call.match.query))
        if name is None:  # known from the query alone: the body is not even decoded
            log.debug("create %s: not created by Kubernetes (no hooks)", call.match.query)
            return data
        body = await parse_body(data)
        labels = body.get("Labels") or {}
        kind = docker_type(labels) if isinstance(labels, dict) else ""
        if kind not in (SANDBOX_TYPE, CONTAINER_TYPE):
            log.debug("create %s: not created by Kubernetes (no hooks)", call.match.query)
            return data  # not created by Kubernetes: no hooks, not recorded
        if kind == SANDBOX_TYPE:
            return await self._before_sandbox_create(call, name, body, data)
        return await self._before_container_create(call, name, body, data)

    async def _before_sandbox_create(self, call: InterceptedCall, name: KubeName, body: Body, data: bytes) -> bytes:
        request = await convert_large(len(data), sandbox_create_request, name, body)
        run = await self.points.pre_run_pod_sandbox(request, NO_DEADLINE)
        call.notes[_CREATED_NOTE] = run
        if not run.changed:
            return data
        await convert_large(len(data), apply_to_sandbox_body, body, run.request)
        return await serialize_body(body, len(data))

    async def _before_container_create(self, call: InterceptedCall, name: KubeName, body: Body, data: bytes) -> bytes:
        def sandbox() -> hooks.PodSandboxHookRequest:
            return pod_of_container(name, body)

        request = await convert_large(len(data), container_create_request, name, body)
        creation = await self.points.pre_create_container(
            body["Labels"].get(SANDBOX_ID_LABEL, ""), request, NO_DEADLINE, sandbox,
            lambda read_image: self._edits(body, read_image), container_labels_of(body["Labels"]))
        call.notes[_CREATED_NOTE] = creation
        _journal(call, self.points.creating(creation.pod_id, creation.request))
        rewritten = await creation.write_back(_CreateBody(body, len(data)))
        return await serialize_body(body, len(data)) if rewritten else data

    async def after_create(self, call: InterceptedCall, answer: UpstreamAnswer) -> None:
        try:
            container_id = str((await parse_body(answer.body)).get("Id", ""))
        except BodyError:
            log.warning("cannot read the new container's ID from dockerd's answer")
            return
        created = call.notes.get(_CREATED_NOTE)
        if isinstance(created, PodSandboxRun):
            await self.points.pod_sandbox_ran(container_id, created)
        elif isinstance(created, ContainerCreation):
            await self.points.container_created(container_id, created)

    # -- start, update, stop ---------------------------------------------------------------------------

    async def before_start(self, call: InterceptedCall, container_id: str) -> None:
        if not self.points.recorded_pod(container_id):  # a sandbox's start is part of RunPodSandbox
            _journal(call, self.points.starting(container_id))
            await self.points.pre_start_container(container_id, NO_DEADLINE)

    async def before_update(self, call: InterceptedCall, data: bytes) -> bytes:
        body = await parse_body(data)
        call.notes[_UPDATE_NOTE] = update_resources(body)
        # A Docker update carries no annotations.
        update = await self.points.pre_update_container_resources(
            call.match.container_id or "", call.notes[_UPDATE_NOTE], {}, NO_DEADLINE)
        if update is None or not update.changed:
            return data
        apply_to_update_body(body, update)
        call.notes[_UPDATE_NOTE] = update_resources(body)
        return await serialize_body(body, len(data))


class _CreateBody:
    """A Docker create body as a creation is written back into it (hooks.lifecycle.CreateWriter)."""

    def __init__(self, body: Body, size: int) -> None:
        self._body = body
        self._size = size  # the body's bytes: a large one is converted off the event loop

    async def container(self, request: hooks.ContainerResourceHookRequest) -> None:
        await convert_large(self._size, apply_to_container_body, self._body, request)

    def edits(self, edits: ContainerEdits, kinds: frozenset[str]) -> None:
        apply_edits(self._body, edits, kinds)

    def cgroup_parent(self, parent: str) -> bool:
        return apply_cgroup_parent(self._body, parent)  # dockerd reads HostConfig.CgroupParent


def _journal(call: InterceptedCall, in_flight: AbstractContextManager[None]) -> None:
    """The call is journaled from here to its after() (hooks.journal), or to a pre-hook's failure."""
    stack = ExitStack()
    stack.enter_context(in_flight)
    call.notes[_JOURNAL_NOTE] = stack


def _journal_end(call: InterceptedCall) -> None:
    journaled = call.notes.pop(_JOURNAL_NOTE, None)
    if isinstance(journaled, ExitStack):
        journaled.close()
