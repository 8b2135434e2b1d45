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
    request: cri.UpdateContainerResourcesRequest,
    seen: hooks.ContainerResourceHookRequest,
    changed: hooks.ContainerResourceHookRequest,
) -> None:
    """The kubelet's update with only what the plugins changed (`changed` against what they saw).

    The plugins saw the container's effective resources, not the kubelet's sparse update, so
    what they echoed must not be sent as if the kubelet had asked for it. A plugin's zero or
    empty value is not sent: to containerd it means "unchanged", it cannot clear a field, and it
    must not cancel what the kubelet asked for.
    """
    before, after = seen.container_resources, changed.container_resources
    for field in after.DESCRIPTOR.fields:
        name = field.name
        if field.message_type is None and not field.is_repeated:
            value = getattr(after, name)
            if value and value != getattr(before, name):
                setattr(request.linux, name, value)
    for key, value in after.unified.items():
        if before.unified.get(key) != value:
            request.linux.unified[key] = value
    # hugepage_limits: the merge rules keep the request's, so plugins never change them.
    for key, value in changed.container_annotations.items():
        if seen.container_annotations.get(key) != value:
            request.annotations[key] = value


# --- what an UpdateContainerResources leaves -------------------------------------------------

_UPDATED_WHEN_NONZERO = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes",
                         "cpuset_cpus", "cpuset_mems")


def apply_resource_update(
    current: hooks.LinuxContainerResources, update: hooks.LinuxContainerResources
) -> hooks.LinuxContainerResources:
    """The container's resources after containerd applied `update` to `current`.

    containerd 1.6 (CRI UpdateContainerResources -> opts.WithResources on the container's spec)
    applies field by field, zero or empty meaning "unchanged": CPU period, quota and shares,
    memory limit and cpusets when non-zero; swap when non-zero, and a new memory limit without
    swap moves a swap limit that followed the memory limit (containerd sets swap = limit when
    the swap controller exists); unified keys merged; hugepage limits added per page size.
    oom_score_adj is never updated (it belongs to the process, set at creation).
    """
    result = hooks.LinuxContainerResources()
    result.CopyFrom(current)
    for name in _UPDATED_WHEN_NONZERO:
        value = getattr(update, name)
        if value:
            setattr(result, name, value)
    if update.memory_swap_limit_in_bytes:
        result.memory_swap_limit_in_bytes = update.memory_swap_limit_in_bytes
    elif update.memory_limit_in_bytes and current.memory_swap_limit_in_bytes and \
            current.memory_swap_limit_in_bytes == current.memory_limit_in_bytes:
        result.memory_swap_limit_in_bytes = update.memory_limit_in_bytes
    result.unified.update(update.unified)
    pages = {limit.page_size: limit.limit for limit in current.hugepage_limits}
    pages.update((limit.page_size, limit.limit) for limit in update.hugepage_limits)
    del result.hugepage_limits[:]
    result.hugepage_limits.extend(hooks.HugepageLimit(page_size=size, limit=limit) for size, limit in pages.items())
    return result
