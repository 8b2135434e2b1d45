"""The hooked Docker Engine API calls: the same seven hook points as CRI mode, on cri-dockerd's requests.

| request                              | hook point                                            |
|--------------------------------------|-------------------------------------------------------|
| POST /containers/create (sandbox)    | PreRunPodSandbox (body rewritten)                     |
| POST /containers/create (container)  | PreCreateContainer (body rewritten)                   |
| POST /containers/{id}/start          | PreStartContainer, then PostStartContainer            |
| POST /containers/{id}/update         | PreUpdateContainerResources (body rewritten)          |
| POST /containers/{id}/stop           | PostStopContainer or PostStopPodSandbox               |
| DELETE /containers/{id}              | none: the store forgets the sandbox or container      |

Containers Kubernetes did not create (no `io.kubernetes.docker.type` label: a person's `docker run`) and pods
with the skip label get no hooks. A body that is not what Docker expects is relayed untouched (dockerd
answers it). A Fail-policy failure answers 500 with a Docker error body naming plugin and hook; nothing
reaches dockerd. Post-hooks run after dockerd answered 2xx/304 and never change the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from google.protobuf.message import Message

from runtimeproxy.docker.bodies import parse_body, serialize_body
from runtimeproxy.docker.interception import ErrorReply, InterceptedCall, UpstreamAnswer
from runtimeproxy.docker.messages import (
    CONTAINER_TYPE,
    SANDBOX_ID_LABEL,
    SANDBOX_TYPE,
    Body,
    BodyError,
    KubeName,
    apply_to_container_body,
    apply_to_sandbox_body,
    apply_to_update_body,
    container_create_request,
    create_name,
    docker_type,
    parse_kube_name,
    sandbox_create_request,
    update_resources,
)
from runtimeproxy.docker.recovery import DockerRecords
from runtimeproxy.docker.routes import HookedRoute
from runtimeproxy.hooks import dispatcher as points
from runtimeproxy.hooks.dispatcher import HookFailed, HookPoint, failure_fields
from runtimeproxy.hooks.context import HookContext, run_post_hook
from runtimeproxy.hooks.merge import apply_resource_update
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.store import ContainerRecord, PodRecord
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)

HOOK_FAILED_STATUS = 500  # Docker clients print the message of any error status
_POD_NOTE = "pod"  # notes of a sandbox create: (PodRecord)
_CONTAINER_NOTE = "container"  # notes of a container create: (sandbox id, hook request)
_UPDATE_NOTE = "update"  # notes of an update: the resources sent to dockerd


class PreHookFailed(Exception):
    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(reply.message)
        self.reply = reply


def _succeeded(answer: UpstreamAnswer) -> bool:
    return 200 <= answer.status < 300 or answer.status == 304  # 304: already started / stopped


class DockerHooks:
    """The `Interceptor` of Docker mode (see `docker.interception`)."""

    def __init__(self, service: HookService, records: DockerRecords) -> None:
        self.dispatcher = service.dispatcher
        self.store = service.store
        self.skip = service.skip
        self.context = HookContext(service.store, records)

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        route = call.match.route
        try:
            if route is HookedRoute.CREATE:
                return await self.before_create(call, body)
            if route is HookedRoute.START:
                await self.before_start(call.match.container_id or "")
            elif route is HookedRoute.UPDATE:
                return await self.before_update(call, body)
        except PreHookFailed as failure:
            return failure.reply
        except BodyError as error:
            log.info("%s relayed without hooks: %s", route.value, error)
        return body

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> None:
        route, container_id = call.match.route, call.match.container_id or ""
        if route is HookedRoute.REMOVE:
            if _succeeded(answer) or answer.status == 404:
                self.store.remove_pod(container_id)
                self.store.remove_container(container_id)
            return
        if not _succeeded(answer):
            return
        if route is HookedRoute.CREATE:
            await self.after_create(call, answer)
        elif route is HookedRoute.START:
            if self.store.pod(container_id) is None:  # a sandbox's start is part of RunPodSandbox
                await self._post_hook(points.POST_START_CONTAINER, lambda: self.context.container_request(container_id))
        elif route is HookedRoute.UPDATE:
            self.store.update_container(container_id, call.notes.get(_UPDATE_NOTE), {})
        elif route is HookedRoute.STOP:
            await self.after_stop(container_id)

    # -- running hooks ---------------------------------------------------------------------------------

    async def _pre_hook(self, point: HookPoint, request: Message) -> Message:
        try:
            return await self.dispatcher.run(point, request, None)
        except HookFailed as failure:
            log.warning("%s", failure, extra=failure_fields(failure.plugin, failure.point, failure.code))
            raise PreHookFailed(ErrorReply(HOOK_FAILED_STATUS, str(failure))) from None

    async def _post_hook(self, point: HookPoint, request_factory: Callable[[], Awaitable[Message | None]]) -> None:
        await run_post_hook(self.dispatcher, point, request_factory, None)

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
        info = sandbox_create_request(name, body)
        skip = self.skip.applies(info.labels)
        if not skip and self.dispatcher.has_plugins(points.PRE_RUN_POD_SANDBOX):
            changed = await self._pre_hook(points.PRE_RUN_POD_SANDBOX, info)
            if changed != info:
                apply_to_sandbox_body(body, changed)  # type: ignore[arg-type]
                data = await serialize_body(body, len(data))
                info = changed  # type: ignore[assignment]
        call.notes[_POD_NOTE] = PodRecord(info, skip)
        return data

    async def _before_container_create(self, call: InterceptedCall, name: KubeName, body: Body, data: bytes) -> bytes:
        sandbox_id = body["Labels"].get(SANDBOX_ID_LABEL, "")
        # Without PreCreateContainer plugins only a recorded pod matters (its cgroup parent may have moved).
        hooked = self.dispatcher.has_plugins(points.PRE_CREATE_CONTAINER)
        pod = await self.context.pod(sandbox_id) if hooked else self.store.pod(sandbox_id)
        pod_info = pod.info if pod is not None else hooks.PodSandboxHookRequest()
        info = container_create_request(pod_info, name, body)
        if pod is not None and not pod.skip_hooks:
            changed = info
            if self.dispatcher.has_plugins(points.PRE_CREATE_CONTAINER):
                changed = await self._pre_hook(points.PRE_CREATE_CONTAINER, info)  # type: ignore[assignment]
            # A pod moved by PreRunPodSandbox takes its containers along (as in CRI mode).
            moved = bool(changed.pod_cgroup_parent) and \
                (body.get("HostConfig") or {}).get("CgroupParent") != changed.pod_cgroup_parent
            if changed != info or moved:
                apply_to_container_body(body, changed)
                data = await serialize_body(body, len(data))
                info = changed
        call.notes[_CONTAINER_NOTE] = (sandbox_id, info)
        return data

    async def after_create(self, call: InterceptedCall, answer: UpstreamAnswer) -> None:
        try:
            container_id = (await parse_body(answer.body)).get("Id", "")
        except BodyError:
            log.warning("cannot read the new container's ID from dockerd's answer")
            return
        if not container_id:
            return
        if (pod := call.notes.get(_POD_NOTE)) is not None:
            self.store.put_pod(container_id, pod)
        elif (created := call.notes.get(_CONTAINER_NOTE)) is not None:
            sandbox_id, info = created
            info.container_meta.id = container_id
            self.store.put_container(container_id, ContainerRecord(sandbox_id, info))

    # -- start, update, stop ---------------------------------------------------------------------------

    async def before_start(self, container_id: str) -> None:
        if self.dispatcher.has_plugins(points.PRE_START_CONTAINER) and self.store.pod(container_id) is None:
            request = await self.context.container_request(container_id)
            if request is not None:  # the start carries nothing to change: plugins act on cgroups
                await self._pre_hook(points.PRE_START_CONTAINER, request)

    async def before_update(self, call: InterceptedCall, data: bytes) -> bytes:
        body = await parse_body(data)
        update = update_resources(body)
        call.notes[_UPDATE_NOTE] = update
        if not self.dispatcher.has_plugins(points.PRE_UPDATE_CONTAINER_RESOURCES):
            return data
        info = await self.context.container_request(call.match.container_id or "")
        if info is None:
            return data
        # Plugins see the resources the container will have, not the sparse update alone.
        info.container_resources.CopyFrom(apply_resource_update(info.container_resources, update))
        changed = await self._pre_hook(points.PRE_UPDATE_CONTAINER_RESOURCES, info)
        if changed == info:
            return data
        apply_to_update_body(body, info, changed)  # type: ignore[arg-type]
        call.notes[_UPDATE_NOTE] = update_resources(body)
        return await serialize_body(body, len(data))

    async def after_stop(self, container_id: str) -> None:
        if not (self.dispatcher.has_plugins(points.POST_STOP_POD_SANDBOX)
                or self.dispatcher.has_plugins(points.POST_STOP_CONTAINER)):
            return
        if self.store.container(container_id) is None and await self.context.pod(container_id) is not None:
            await self._post_hook(points.POST_STOP_POD_SANDBOX, lambda: self.context.pod_request(container_id))
        else:
            await self._post_hook(points.POST_STOP_CONTAINER, lambda: self.context.container_request(container_id))
