"""CRI <-> hook-protocol message conversions and koordlet's merge rules.

The hooked CRI requests are decoded with runtime.v1 classes whatever version the
kubelet spoke: v1alpha2 has the same field numbers for everything used here, and
fields v1 does not know are kept as unknown fields and written back unchanged.
The CRI and hook LinuxContainerResources/PodSandboxMetadata/ContainerMetadata
share their wire layout, so they convert by re-parsing bytes, field-exact.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TypeVar

from google.protobuf.message import Message

from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

M = TypeVar("M", bound=Message)


def convert(message: Message, target: type[M]) -> M:
    """Re-read a message as a wire-compatible type of the other protocol."""
    return target.FromString(message.SerializeToString())


# --- CRI -> hook requests -------------------------------------------------------------


def pod_hook_request(config: cri.PodSandboxConfig, runtime_handler: str) -> hooks.PodSandboxHookRequest:
    linux = config.linux
    request = hooks.PodSandboxHookRequest(
        pod_meta=convert(config.metadata, hooks.PodSandboxMetadata),
        runtime_handler=runtime_handler,
        labels=dict(config.labels),
        annotations=dict(config.annotations),
        cgroup_parent=linux.cgroup_parent,
    )
    if linux.HasField("overhead"):
        request.overhead.CopyFrom(convert(linux.overhead, hooks.LinuxContainerResources))
    if linux.HasField("resources"):
        request.resources.CopyFrom(convert(linux.resources, hooks.LinuxContainerResources))
    return request


def container_hook_request(
    pod: hooks.PodSandboxHookRequest, config: cri.ContainerConfig, container_id: str = ""
) -> hooks.ContainerResourceHookRequest:
    request = hooks.ContainerResourceHookRequest(
        pod_meta=pod.pod_meta,
        container_meta=hooks.ContainerMetadata(
            name=config.metadata.name, attempt=config.metadata.attempt, id=container_id
        ),
        container_annotations=dict(config.annotations),
        pod_annotations=dict(pod.annotations),
        pod_labels=dict(pod.labels),
        pod_cgroup_parent=pod.cgroup_parent,
        container_envs={kv.key: kv.value for kv in config.envs},
    )
    if config.linux.HasField("resources"):
        request.container_resources.CopyFrom(
            convert(config.linux.resources, hooks.LinuxContainerResources)
        )
    if pod.HasField("resources"):
        request.pod_resources.CopyFrom(pod.resources)
    return request


def with_pod(
    container: hooks.ContainerResourceHookRequest, pod: hooks.PodSandboxHookRequest | None
) -> hooks.ContainerResourceHookRequest:
    """A copy of a container's hook request with the pod context as it is now."""
    request = hooks.ContainerResourceHookRequest()
    request.CopyFrom(container)
    if pod is not None:
        request.pod_meta.CopyFrom(pod.pod_meta)
        _replace_map(request.pod_annotations, pod.annotations)
        _replace_map(request.pod_labels, pod.labels)
        request.pod_cgroup_parent = pod.cgroup_parent
        if pod.HasField("resources"):
            request.pod_resources.CopyFrom(pod.resources)
    return request


# --- merge rules: a plugin response folded into the hook request ------------------------


def merge_resources(
    into: hooks.LinuxContainerResources, update: hooks.LinuxContainerResources
) -> None:
    """koordlet echoes the whole request back and edits fields; these are its semantics."""
    for name in ("cpu_period", "cpu_shares", "memory_limit_in_bytes", "memory_swap_limit_in_bytes"):
        value = getattr(update, name)
        if value > 0:
            setattr(into, name, value)
    if update.cpu_quota != 0:
        into.cpu_quota = update.cpu_quota
    into.oom_score_adj = update.oom_score_adj
    into.cpuset_cpus = update.cpuset_cpus
    into.cpuset_mems = update.cpuset_mems
    into.unified.update(update.unified)
    # hugepage_limits: always the request's.


def _merge_map(into: MutableMapping[str, str], update: Mapping[str, str]) -> None:
    into.update(update)  # response keys win; nothing is deleted


def merged_envs(current: Mapping[str, str], update: Mapping[str, str]) -> dict[str, str]:
    """A non-empty env map replaces the set: known names keep their order, new ones follow."""
    if not update:
        return dict(current)
    kept = {name: update[name] for name in current if name in update}
    kept.update((name, update[name]) for name in sorted(update) if name not in current)
    return kept


def merge_pod_response(
    request: hooks.PodSandboxHookRequest, response: hooks.PodSandboxHookResponse
) -> hooks.PodSandboxHookRequest:
    merged = hooks.PodSandboxHookRequest()
    merged.CopyFrom(request)
    _merge_map(merged.labels, response.labels)
    _merge_map(merged.annotations, response.annotations)
    if response.cgroup_parent:
        merged.cgroup_parent = response.cgroup_parent
    if response.HasField("resources"):
        merge_resources(merged.resources, response.resources)
    return merged


def merge_container_response(
    request: hooks.ContainerResourceHookRequest, response: hooks.ContainerResourceHookResponse
) -> hooks.ContainerResourceHookRequest:
    merged = hooks.ContainerResourceHookRequest()
    merged.CopyFrom(request)
    _merge_map(merged.container_annotations, response.container_annotations)
    if response.HasField("container_resources"):
        merge_resources(merged.container_resources, response.container_resources)
    if response.pod_cgroup_parent:
        merged.pod_cgroup_parent = response.pod_cgroup_parent
    if response.container_envs:
        envs = merged_envs(request.container_envs, response.container_envs)
        merged.ClearField("container_envs")
        merged.container_envs.update(envs)
    return merged


# --- hook result -> CRI request -------------------------------------------------------


def _replace_map(target: MutableMapping[str, str], source: Mapping[str, str]) -> None:
    target.clear()
    target.update(source)


def apply_to_pod_config(config: cri.PodSandboxConfig, pod: hooks.PodSandboxHookRequest) -> None:
    _replace_map(config.labels, pod.labels)
    _replace_map(config.annotations, pod.annotations)
    config.linux.cgroup_parent = pod.cgroup_parent
    if pod.HasField("resources"):
        config.linux.resources.CopyFrom(convert(pod.resources, cri.LinuxContainerResources))


def apply_to_container_config(
    request: cri.CreateContainerRequest, container: hooks.ContainerResourceHookRequest, env_order: list[str]
) -> None:
    config = request.config
    _replace_map(config.annotations, container.container_annotations)
    if container.HasField("container_resources"):
        config.linux.resources.CopyFrom(
            convert(container.container_resources, cri.LinuxContainerResources)
        )
    envs = container.container_envs
    # A name the kubelet listed twice appears once, with the last value (what runtimes use).
    ordered = [name for name in dict.fromkeys(env_order) if name in envs]
    ordered += sorted(name for name in envs if name not in set(env_order))
    del config.envs[:]
    config.envs.extend(cri.KeyValue(key=name, value=envs[name]) for name in ordered)
    align_sandbox_cgroup_parent(request, container.pod_cgroup_parent)


def align_sandbox_cgroup_parent(request: cri.CreateContainerRequest, cgroup_parent: str) -> bool:
    """containerd places the container under sandbox_config's cgroup parent: make it the pod's
    (as hooks left it). True if the request changed; a missing sandbox_config is not invented."""
    if not cgroup_parent or not request.HasField("sandbox_config"):
        return False
    linux = request.sandbox_config.linux
    if linux.cgroup_parent == cgroup_parent:
        return False
    linux.cgroup_parent = cgroup_parent
    return True


def apply_to_update_request(
    request: cri.UpdateContainerResourcesRequest, container: hooks.ContainerResourceHookRequest
) -> None:
    if container.HasField("container_resources"):
        request.linux.CopyFrom(convert(container.container_resources, cri.LinuxContainerResources))
    _replace_map(request.annotations, container.container_annotations)
