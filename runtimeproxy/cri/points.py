"""The hooked CRI calls: decode, run the plugins, re-encode, keep the store current.

Each function here wraps the raw relay of one CRI method (see forwarding.UnaryHook).
Request bytes are only re-encoded when a plugin changed something; responses are
never changed. The same functions serve runtime.v1 and runtime.v1alpha2.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from runtimeproxy.cri.forwarding import UnaryHook, UnaryRelay
from runtimeproxy.hooks import dispatcher as points
from runtimeproxy.hooks.dispatcher import Dispatcher, HookFailed, HookPoint, failure_fields
from runtimeproxy.cri.messages import (
    align_sandbox_cgroup_parent,
    apply_to_container_config,
    apply_to_pod_config,
    apply_to_update_request,
    container_hook_request,
    convert,
    pod_hook_request,
)
from runtimeproxy.cri.recovery import BackendRecords
from runtimeproxy.hooks.context import HookContext, run_post_hook
from runtimeproxy.hooks.merge import apply_resource_update
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.store import ContainerRecord, PodRecord
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext
M = TypeVar("M", bound=Message)
CRI_VERSIONS = ("runtime.v1", "runtime.v1alpha2")


async def decode(message_type: type[M], data: bytes, context: Context) -> M:
    try:
        return message_type.FromString(data)
    except DecodeError as error:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"runtimeproxy: cannot decode {message_type.DESCRIPTOR.name}: {error}",
        )
        raise  # unreachable: abort raises


def response_field(message_type: type[Message], data: bytes, field: str) -> str:
    """An ID from the backend's response; "" if it cannot be read (the call itself succeeded)."""
    try:
        return getattr(message_type.FromString(data), field)
    except DecodeError as error:
        log.warning("cannot read %s from the backend: %s", message_type.DESCRIPTOR.name, error)
        return ""


async def run_pre_hook(
    dispatcher: Dispatcher, point: HookPoint[M, Any], request: M, context: Context
) -> M:
    """The request as changed by the plugins; a Fail-policy failure aborts the call."""
    try:
        return await dispatcher.run(point, request, context.time_remaining())
    except HookFailed as failure:
        log.warning("%s", failure, extra=failure_fields(failure.plugin, failure.point, failure.code))
        await context.abort(failure.code, str(failure), failure.trailing_metadata())
        raise  # unreachable: abort raises


class RuntimeHooks:
    def __init__(self, service: HookService, records: BackendRecords) -> None:
        self.dispatcher = service.dispatcher
        self.store = service.store
        self.context = HookContext(service.store, records)
        self.skip = service.skip

    def interceptors(self) -> dict[str, UnaryHook]:
        by_method: dict[str, UnaryHook] = {
            "RunPodSandbox": self.run_pod_sandbox,
            "StopPodSandbox": self.stop_pod_sandbox,
            "RemovePodSandbox": self.remove_pod_sandbox,
            "CreateContainer": self.create_container,
            "StartContainer": self.start_container,
            "UpdateContainerResources": self.update_container_resources,
            "StopContainer": self.stop_container,
            "RemoveContainer": self.remove_container,
        }
        return {
            f"/{version}.RuntimeService/{method}": hook
            for version in CRI_VERSIONS
            for method, hook in by_method.items()
        }

    async def _post_hook(self, point: HookPoint, request_factory: Callable[[], Awaitable[Message | None]],
                         context: Context) -> None:
        await run_post_hook(self.dispatcher, point, request_factory, context.time_remaining())

    # -- pod calls -------------------------------------------------------------------------

    async def run_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.RunPodSandboxRequest, data, context)
        info = pod_hook_request(request.config, request.runtime_handler)
        skip = self.skip.applies(info.labels)
        if not skip and self.dispatcher.has_plugins(points.PRE_RUN_POD_SANDBOX):
            changed = await run_pre_hook(self.dispatcher, points.PRE_RUN_POD_SANDBOX, info, context)
            if changed != info:
                apply_to_pod_config(request.config, changed)
                data = request.SerializeToString()
                info = changed
        response = await relay(data, context)
        pod_id = response_field(cri.RunPodSandboxResponse, response, "pod_sandbox_id")
        if pod_id:
            self.store.put_pod(pod_id, PodRecord(info, skip))
        return response

    async def stop_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        pod_id = (await decode(cri.StopPodSandboxRequest, data, context)).pod_sandbox_id
        response = await relay(data, context)
        await self._post_hook(points.POST_STOP_POD_SANDBOX, lambda: self.context.pod_request(pod_id), context)
        return response

    async def remove_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        pod_id = (await decode(cri.RemovePodSandboxRequest, data, context)).pod_sandbox_id
        try:
            return await relay(data, context)
        finally:  # also on errors (NotFound: already gone); a wrong guess is refilled on a miss
            self.store.remove_pod(pod_id)

    # -- container calls -------------------------------------------------------------------

    async def create_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.CreateContainerRequest, data, context)
        pod = await self.context.pod(request.pod_sandbox_id)
        if pod is None:  # the kubelet sends the pod's config along: use it
            sandbox = pod_hook_request(request.sandbox_config, "")
            pod = PodRecord(sandbox, self.skip.applies(sandbox.labels))
        info = container_hook_request(pod.info, request.config)
        rewritten = False
        if not pod.skip_hooks and self.dispatcher.has_plugins(points.PRE_CREATE_CONTAINER):
            changed = await run_pre_hook(self.dispatcher, points.PRE_CREATE_CONTAINER, info, context)
            if changed != info:
                env_order = [kv.key for kv in request.config.envs]
                apply_to_container_config(request, changed, env_order)
                info = changed
                rewritten = True
        # A pod moved by PreRunPodSandbox takes its containers along, even when no
        # PreCreateContainer plugin changed anything.
        if not pod.skip_hooks and align_sandbox_cgroup_parent(request, info.pod_cgroup_parent):
            rewritten = True
        if rewritten:
            data = request.SerializeToString()
        response = await relay(data, context)
        container_id = response_field(cri.CreateContainerResponse, response, "container_id")
        if container_id:
            info.container_meta.id = container_id
            self.store.put_container(container_id, ContainerRecord(request.pod_sandbox_id, info))
        return response

    async def start_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.StartContainerRequest, data, context)).container_id
        if self.dispatcher.has_plugins(points.PRE_START_CONTAINER):
            request = await self.context.container_request(container_id)
            if request is not None:
                # StartContainer has nothing to carry changes: plugins act on the cgroups themselves.
                await run_pre_hook(self.dispatcher, points.PRE_START_CONTAINER, request, context)
        response = await relay(data, context)
        await self._post_hook(
            points.POST_START_CONTAINER, lambda: self.context.container_request(container_id), context
        )
        return response

    async def update_container_resources(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.UpdateContainerResourcesRequest, data, context)
        container_id = request.container_id
        info = None
        if self.dispatcher.has_plugins(points.PRE_UPDATE_CONTAINER_RESOURCES):
            info = await self.context.container_request(container_id)
        if info is not None:
            # Plugins see the resources the container will have: the recorded ones with the
            # kubelet's sparse update applied, not the update alone.
            if request.HasField("linux"):
                update = convert(request.linux, hooks.LinuxContainerResources)
                info.container_resources.CopyFrom(apply_resource_update(info.container_resources, update))
            info.container_annotations.update(request.annotations)
            changed = await run_pre_hook(self.dispatcher, points.PRE_UPDATE_CONTAINER_RESOURCES, info, context)
            if changed != info:
                apply_to_update_request(request, info, changed)
                data = request.SerializeToString()
        response = await relay(data, context)
        resources = convert(request.linux, hooks.LinuxContainerResources) if request.HasField("linux") else None
        self.store.update_container(container_id, resources, dict(request.annotations))
        return response

    async def stop_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.StopContainerRequest, data, context)).container_id
        response = await relay(data, context)
        await self._post_hook(
            points.POST_STOP_CONTAINER, lambda: self.context.container_request(container_id), context
        )
        return response

    async def remove_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.RemoveContainerRequest, data, context)).container_id
        try:
            return await relay(data, context)
        finally:  # as for pods
            self.store.remove_container(container_id)
