"""The hooked CRI calls: decode, ask the hook core (hooks.lifecycle), re-encode.

Each function here wraps the raw relay of one CRI method (see forwarding.UnaryHook) and only translates:
the hook policy (skip rule, cgroup-follow, effective resources, what the store records) is the core's.
Request bytes are only re-encoded when something changed; responses are never changed. A Fail-policy
failure aborts the call with the plugin's code and an ErrorInfo (cri.failures). The same functions serve
runtime.v1 and runtime.v1alpha2.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from runtimeproxy.cri import failures
from runtimeproxy.cri.edits import apply_edits, container_edits, process_argv
from runtimeproxy.cri.seccomp import ProfileFiles
from runtimeproxy.cri.forwarding import UnaryHook, UnaryRelay
from runtimeproxy.cri.messages import (
    SANDBOX_LABELS,
    align_sandbox_cgroup_parent,
    apply_to_container_config,
    apply_to_pod_config,
    apply_to_update_request,
    container_model,
    pod_model,
)
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.nri_plugins import PodResize
from runtimeproxy.hooks.lifecycle import HookPoints
from runtimeproxy.hooks.hook_messages import resources_of
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.service import HookService
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

log = logging.getLogger(__name__)


class _CreateRequest:
    """A CRI CreateContainerRequest as a creation is written back into it (hooks.lifecycle.CreateWriter)."""

    def __init__(self, request: cri.CreateContainerRequest, write_profile: Callable[[str], str]) -> None:
        self._request = request
        self._env_order = [kv.key for kv in request.config.envs]  # as the kubelet sent them
        self._write_profile = write_profile  # a seccomp policy's profile file (cri.seccomp)

    async def container(self, container: ContainerRecord) -> None:
        apply_to_container_config(self._request, container, self._env_order)

    def edits(self, edits: ContainerEdits, kinds: frozenset[str]) -> None:
        apply_edits(self._request, edits, kinds, self._write_profile)

    def cgroup_parent(self, parent: str) -> bool:
        return align_sandbox_cgroup_parent(self._request, parent)  # containerd reads sandbox_config's


Context = grpc.aio.ServicerContext
CRI_VERSIONS = ("runtime.v1", "runtime.v1alpha2")
M = TypeVar("M", bound=Message)


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


@contextlib.asynccontextmanager
async def failing_the_call(context: Context) -> AsyncIterator[None]:
    """A Fail-policy failure inside aborts the call: the kubelet gets the plugin's code, the message and an
    ErrorInfo."""
    try:
        yield
    except HookFailed as failure:
        await context.abort(failure.code, str(failure), failures.trailing_metadata(failure))
        raise


class CriHooks:
    def __init__(self, service: HookService, runtime: Runtime, profile_dir: Path | None = None) -> None:
        self.points = HookPoints(service, runtime, SANDBOX_LABELS)
        self._runtime = runtime  # the image's argv for NRI plugins' view (cri.runtime)
        self._profile_dir = profile_dir  # NRI plugins' seccomp policies as profile files (None: not carried)

    async def _edits(self, request: cri.CreateContainerRequest, with_image: bool) -> ContainerEdits:
        """What the hook model lacks (for NRI plugins and the model), decoded once per create; the image (its
        Entrypoint and Cmd where the config has no command, and who it is) is read only when `with_image` (else
        the argv is () when the config has no command: not known, and the image not known)."""
        profiles, cdi = self._profile_dir is not None, await self._runtime.cdi_enabled()
        if not with_image:
            argv = process_argv(request.config, [], []) if request.config.command else ()
            return container_edits(request, argv, profiles, cdi)
        facts = await self._runtime.image_facts(request.config.image.image)
        argv = process_argv(request.config, list(facts.entrypoint), list(facts.cmd))
        return replace(container_edits(request, argv, profiles, cdi), image=facts.identity)

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
        hooked = {
            f"/{version}.RuntimeService/{method}": self._whole(hook)
            for version in CRI_VERSIONS
            for method, hook in by_method.items()
        }
        # CRI 1.33's in-place pod resize: runtime.v1 only.
        hooked["/runtime.v1.RuntimeService/UpdatePodSandboxResources"] = self._whole(self.update_pod_sandbox_resources)
        return hooked

    def _whole(self, hook: UnaryHook) -> UnaryHook:
        """The hooked call as one change for the plugins' synchronization (hooks.syncgate)."""
        async def whole_call(data: bytes, context: Context, relay: UnaryRelay) -> bytes:
            async with self.points.changing():
                return await hook(data, context, relay)
        return whole_call

    # -- pod calls -------------------------------------------------------------------------

    async def run_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.RunPodSandboxRequest, data, context)
        pod = pod_model(request.config, request.runtime_handler)
        async with failing_the_call(context):
            run = await self.points.pre_run_pod_sandbox(pod, context.time_remaining())
        if run.changed:
            apply_to_pod_config(request.config, run.value.pod)
            data = request.SerializeToString()
        response = await relay(data, context)
        pod_id = response_field(cri.RunPodSandboxResponse, response, "pod_sandbox_id")
        # An NRI plugin failing RunPodSandbox: no sandbox is left behind, as with containerd.
        async with failing_the_call(context):
            await self.points.pod_sandbox_ran(pod_id, run)
        return response

    async def stop_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        pod_id = (await decode(cri.StopPodSandboxRequest, data, context)).pod_sandbox_id
        response = await relay(data, context)
        await self.points.post_stop_pod_sandbox(pod_id, context.time_remaining())
        return response

    async def remove_pod_sandbox(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        pod_id = (await decode(cri.RemovePodSandboxRequest, data, context)).pod_sandbox_id
        try:
            return await relay(data, context)
        finally:  # also on errors (NotFound: already gone); a wrong guess is refilled on a miss
            await self.points.pod_sandbox_removed(pod_id)

    async def update_pod_sandbox_resources(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        """A kubelet's in-place pod resize, as containerd 2.2+ serves it (sandbox_update_resources.go): the NRI
        plugins' UpdatePodSandbox may fail it; after it the pod's new resources are recorded and they hear
        PostUpdatePodSandbox. The runtime's answer is the kubelet's, unchanged; a runtime without the call
        (containerd before 2.2: UNIMPLEMENTED, which the kubelet takes as nothing to do) leaves the proxy to do
        containerd's part."""
        request = await decode(cri.UpdatePodSandboxResourcesRequest, data, context)
        resize = PodResize(resources_of(request.overhead) if request.HasField("overhead") else None,
                           resources_of(request.resources) if request.HasField("resources") else None)
        pod_id = request.pod_sandbox_id
        async with failing_the_call(context):
            await self.points.pre_update_pod_sandbox_resources(pod_id, resize)

        async def failing(code: grpc.StatusCode) -> None:
            if code is grpc.StatusCode.UNIMPLEMENTED:  # before the kubelet hears it, as after a success
                await self.points.pod_sandbox_resources_updated(pod_id, resize)

        response = await relay(data, context, failing)
        await self.points.pod_sandbox_resources_updated(pod_id, resize)
        return response

    # -- container calls -------------------------------------------------------------------

    async def create_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.CreateContainerRequest, data, context)
        # The kubelet sends the pod's config along: the pod's context when the proxy does not know the pod.
        def sandbox() -> PodRecord:
            return pod_model(request.sandbox_config, "")

        container = container_model(request.pod_sandbox_id, request.config)
        container.edits = await self._edits(request, self.points.edits_want_image())
        async with failing_the_call(context):
            creation = await self.points.pre_create_container(
                request.pod_sandbox_id, container, context.time_remaining(), sandbox)
        # A seccomp policy's profile file lives until containerd has read it: the create's end.
        with ProfileFiles(self._profile_dir or Path()) as profiles:
            if await creation.write_back(_CreateRequest(request, profiles.write)):
                data = request.SerializeToString()
            # Journaled until the answer is about to go back: a crash meanwhile is the next proxy's (hooks.reconcile).
            with self.points.creating(creation):
                response = await relay(data, context)
                await self.points.container_created(
                    response_field(cri.CreateContainerResponse, response, "container_id"), creation)
        return response

    async def start_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.StartContainerRequest, data, context)).container_id
        # Journaled from the pre-hooks on: a crash before the runtime's start leaves a container no kubelet starts.
        with self.points.starting(container_id):
            async with failing_the_call(context):
                await self.points.pre_start_container(container_id, context.time_remaining())
            response = await relay(data, context)
            await self.points.post_start_container(container_id, context.time_remaining())
        return response

    async def update_container_resources(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        request = await decode(cri.UpdateContainerResourcesRequest, data, context)
        resources = resources_of(request.linux) if request.HasField("linux") else None
        async with failing_the_call(context):
            update = await self.points.pre_update_container_resources(
                request.container_id, resources, request.annotations, context.time_remaining())
        if update is not None and update.changed:
            apply_to_update_request(request, update)
            data = request.SerializeToString()
            resources = resources_of(request.linux) if request.HasField("linux") else None
        response = await relay(data, context)
        await self.points.container_resources_updated(request.container_id, resources, request.annotations)
        return response

    async def stop_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.StopContainerRequest, data, context)).container_id
        response = await relay(data, context)
        await self.points.post_stop_container(container_id, context.time_remaining())
        return response

    async def remove_container(self, data: bytes, context: Context, relay: UnaryRelay) -> bytes:
        container_id = (await decode(cri.RemoveContainerRequest, data, context)).container_id
        try:
            return await relay(data, context)
        finally:  # as for pods
            await self.points.container_removed(container_id)
