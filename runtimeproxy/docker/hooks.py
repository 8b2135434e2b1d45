"""The hooked Docker Engine API calls: the same seven hook points as CRI mode, on cri-dockerd's requests.

| request                              | hook point                                            |
|--------------------------------------|-------------------------------------------------------|
| POST /containers/create (sandbox)    | PreRunPodSandbox (body rewritten)                     |
| POST /containers/create (container)  | PreCreateContainer (body rewritten)                   |
| POST /containers/{id}/start          | PreStartContainer, then PostStartContainer            |
| POST /containers/{id}/update         | PreUpdateContainerResources (body rewritten)          |
| POST /containers/{id}/stop           | PostStopContainer or PostStopPodSandbox               |
| DELETE /containers/{id}              | none: the store forgets the sandbox or container      |

Translation only: each route is one row of steps (`DockerHooks.routes`: before dockerd, after its answer); its
body becomes hook values, the hook core (hooks.lifecycle) runs the point, the result is written back into the
body (a create's through `ContainerCreation.write_back`, as CRI mode's); the hook policy (skip rule, cgroup-follow, effective resources, what
the store records) is the core's. Containers Kubernetes did not create (no `io.kubernetes.docker.type` label:
a person's `docker run`) are no hook point at all. A body that is not what Docker expects is relayed untouched
(dockerd answers it). A Fail-policy failure answers 500 with a Docker error body naming plugin and hook;
nothing reaches dockerd. Post-hooks run after dockerd answered 2xx/304 and never change the answer; an NRI
plugin failing RunPodSandbox (after dockerd created the sandbox container) has it removed and answers 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, ExitStack
from dataclasses import dataclass, replace

from runtimeproxy.docker.bodies import convert_large, parse_body, serialize_body
from runtimeproxy.docker.edits import apply_edits, container_edits, process_argv
from runtimeproxy.docker.interception import ErrorReply, InterceptedCall, UpstreamAnswer
from runtimeproxy.docker.messages import (
    CONTAINER_TYPE,
    SANDBOX_TYPE,
    Body,
    BodyError,
    KubeName,
    apply_cgroup_parent,
    apply_to_container_body,
    apply_to_sandbox_body,
    apply_to_update_body,
    container_of_create,
    create_name,
    docker_type,
    parse_kube_name,
    pod_of_container,
    sandbox_of_create,
    update_resources,
)
from runtimeproxy.docker.routes import HookedRoute
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.lifecycle import ContainerCreation, HookPoints, PodSandboxRun
from runtimeproxy.hooks.model import ContainerRecord, PodRecord, Resources
from runtimeproxy.hooks.service import HookService

log = logging.getLogger(__name__)

HOOK_FAILED_STATUS = 500  # Docker clients print the message of any error status
NO_DEADLINE = None  # Docker requests carry no deadline: each plugin's own timeout applies
_EXCHANGE_NOTE = "exchange"  # the call's one note: its _Exchange


@dataclass
class _Exchange:
    """What a hooked request's before() leaves for its after()."""

    created: PodSandboxRun | ContainerCreation | None = None  # a create: the core's run or creation
    resources: Resources | None = None  # an update: the resources sent to dockerd
    # A container's create or start: its entry in the journal of calls in flight (hooks.journal), ended in
    # after(), before the answer goes back; an exchange after() never sees (dockerd unreachable or broken) leaves
    # it open, for the next proxy to reconcile after a restart, as a crash would.
    journaled: ExitStack | None = None

    def journal(self, in_flight: AbstractContextManager[None]) -> None:
        """The call is journaled from here to its after(), or to a pre-hook's failure."""
        self.journaled = ExitStack()
        self.journaled.enter_context(in_flight)

    def end_journal(self) -> None:
        if self.journaled is not None:
            self.journaled.close()
            self.journaled = None


def _exchange(call: InterceptedCall) -> _Exchange:
    exchange = call.notes.get(_EXCHANGE_NOTE)
    if not isinstance(exchange, _Exchange):
        exchange = call.notes[_EXCHANGE_NOTE] = _Exchange()
    return exchange


def _succeeded(answer: UpstreamAnswer) -> bool:
    return 200 <= answer.status < 300 or answer.status == 304  # 304: already started / stopped


def _succeeded_or_gone(answer: UpstreamAnswer) -> bool:
    return _succeeded(answer) or answer.status == 404  # a removal: the container is gone either way


Before = Callable[[InterceptedCall, _Exchange, bytes], Awaitable[bytes]]
After = Callable[[InterceptedCall, _Exchange, UpstreamAnswer], Awaitable[None]]


@dataclass(frozen=True)
class _RouteHooks:
    """One hooked route's steps: `before` rewrites the body (None: relayed as sent), `after` runs on the answers
    `hears` (None: nothing after). A new route is a row of routes._PATTERNS and a row of DockerHooks.routes."""

    before: Before | None
    after: After | None
    hears: Callable[[UpstreamAnswer], bool] = _succeeded


class DockerHooks:
    """The `Interceptor` of Docker mode (see `docker.interception`)."""

    def __init__(self, service: HookService, runtime: Runtime) -> None:
        self.points = HookPoints(service, runtime)
        self._runtime = runtime  # an image's Entrypoint and Cmd, for NRI plugins' view of the argv (docker.runtime)
        self.routes: dict[HookedRoute, _RouteHooks] = {
            HookedRoute.CREATE: _RouteHooks(self._before_create, self._after_create),
            HookedRoute.START: _RouteHooks(self._before_start, self._after_start),
            HookedRoute.UPDATE: _RouteHooks(self._before_update, self._after_update),
            HookedRoute.STOP: _RouteHooks(None, self._after_stop),
            HookedRoute.REMOVE: _RouteHooks(None, self._after_remove, _succeeded_or_gone),
        }

    async def _edits(self, body: Body, with_image: bool) -> ContainerEdits:
        """What the hook model lacks (for NRI plugins and the model), decoded once per create; the image is read
        only when `with_image` and the body leaves the argv to it (else the argv is () then: not known)."""
        cdi = await self._runtime.cdi_enabled()
        if not with_image or not isinstance(body.get("Image"), str):
            return container_edits(body, process_argv(body, [], []) if body.get("Entrypoint") else (), cdi)
        facts = await self._runtime.image_facts(body["Image"])
        argv = process_argv(body, list(facts.entrypoint), list(facts.cmd))
        return replace(container_edits(body, argv, cdi), image=facts.identity)

    def changing(self) -> AbstractAsyncContextManager[None]:
        return self.points.changing()

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        route = self.routes[call.match.route]
        if route.before is None:
            return body
        exchange = _exchange(call)
        try:
            return await route.before(call, exchange, body)
        except HookFailed as failure:
            exchange.end_journal()  # the call is failed here: nothing reaches dockerd
            return ErrorReply(HOOK_FAILED_STATUS, str(failure))
        except BodyError as error:
            log.info("%s relayed without hooks: %s", call.match.route.value, error)
        return body

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        route = self.routes[call.match.route]
        exchange = _exchange(call)
        try:
            if route.after is not None and route.hears(answer):
                await route.after(call, exchange, answer)
        except HookFailed as failure:  # RunPodSandbox failed by an NRI plugin: the sandbox was removed
            return ErrorReply(HOOK_FAILED_STATUS, str(failure))
        finally:
            exchange.end_journal()
        return None

    # -- create ----------------------------------------------------------------------------------------

    async def _before_create(self, call: InterceptedCall, exchange: _Exchange, data: bytes) -> bytes:
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
            return await self._before_sandbox_create(exchange, name, body, data)
        return await self._before_container_create(exchange, name, body, data)

    async def _before_sandbox_create(self, exchange: _Exchange, name: KubeName, body: Body, data: bytes) -> bytes:
        pod = await convert_large(len(data), sandbox_of_create, name, body)
        run = exchange.created = await self.points.pre_run_pod_sandbox(pod, NO_DEADLINE)
        if not run.changed:
            return data
        await convert_large(len(data), apply_to_sandbox_body, body, run.value.pod)
        return await serialize_body(body, len(data))

    async def _before_container_create(self, exchange: _Exchange, name: KubeName, body: Body, data: bytes) -> bytes:
        def sandbox() -> PodRecord:
            return pod_of_container(name, body)

        container = await convert_large(len(data), container_of_create, name, body)
        container.edits = await self._edits(body, self.points.edits_want_image())
        creation = exchange.created = await self.points.pre_create_container(
            container.pod_id, container, NO_DEADLINE, sandbox)
        exchange.journal(self.points.creating(creation))
        rewritten = await creation.write_back(_CreateBody(body, len(data)))
        return await serialize_body(body, len(data)) if rewritten else data

    async def _after_create(self, call: InterceptedCall, exchange: _Exchange, answer: UpstreamAnswer) -> None:
        try:
            container_id = str((await parse_body(answer.body)).get("Id", ""))
        except BodyError:
            log.warning("cannot read the new container's ID from dockerd's answer")
            return
        if isinstance(exchange.created, PodSandboxRun):
            await self.points.pod_sandbox_ran(container_id, exchange.created)
        elif isinstance(exchange.created, ContainerCreation):
            await self.points.container_created(container_id, exchange.created)

    # -- start, update, stop, remove -------------------------------------------------------------------

    async def _before_start(self, call: InterceptedCall, exchange: _Exchange, data: bytes) -> bytes:
        container_id = call.match.container_id or ""
        if not self.points.recorded_pod(container_id):  # a sandbox's start is part of RunPodSandbox
            exchange.journal(self.points.starting(container_id))
            await self.points.pre_start_container(container_id, NO_DEADLINE)
        return data

    async def _after_start(self, call: InterceptedCall, exchange: _Exchange, answer: UpstreamAnswer) -> None:
        container_id = call.match.container_id or ""
        if not self.points.recorded_pod(container_id):
            await self.points.post_start_container(container_id, NO_DEADLINE)

    async def _before_update(self, call: InterceptedCall, exchange: _Exchange, data: bytes) -> bytes:
        body = await parse_body(data)
        exchange.resources = update_resources(body)
        # A Docker update carries no annotations.
        update = await self.points.pre_update_container_resources(
            call.match.container_id or "", exchange.resources, {}, NO_DEADLINE)
        if update is None or not update.changed:
            return data
        apply_to_update_body(body, update)
        exchange.resources = update_resources(body)
        return await serialize_body(body, len(data))

    async def _after_update(self, call: InterceptedCall, exchange: _Exchange, answer: UpstreamAnswer) -> None:
        await self.points.container_resources_updated(call.match.container_id or "", exchange.resources, {})

    async def _after_stop(self, call: InterceptedCall, exchange: _Exchange, answer: UpstreamAnswer) -> None:
        await self.points.post_stop(call.match.container_id or "", NO_DEADLINE)

    async def _after_remove(self, call: InterceptedCall, exchange: _Exchange, answer: UpstreamAnswer) -> None:
        container_id = call.match.container_id or ""
        await self.points.pod_sandbox_removed(container_id)
        await self.points.container_removed(container_id)


class _CreateBody:
    """A Docker create body as a creation is written back into it (hooks.lifecycle.CreateWriter)."""

    def __init__(self, body: Body, size: int) -> None:
        self._body = body
        self._size = size  # the body's bytes: a large one is converted off the event loop

    async def container(self, container: ContainerRecord) -> None:
        await convert_large(self._size, apply_to_container_body, self._body, container)

    def edits(self, edits: ContainerEdits, kinds: frozenset[str]) -> None:
        apply_edits(self._body, edits, kinds)

    def cgroup_parent(self, parent: str) -> bool:
        return apply_cgroup_parent(self._body, parent)  # dockerd reads HostConfig.CgroupParent

