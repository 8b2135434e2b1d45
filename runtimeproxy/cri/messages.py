"""CRI <-> hook-protocol message conversions: one function per hooked CRI request.

The merge rules (what a plugin's answer changes) are the hook core's (hooks.merge);
this module only reads CRI requests into hook requests and writes the result back.

The hooked CRI requests are decoded with runtime.v1 classes whatever version the
kubelet spoke: v1alpha2 has the same field numbers for everything used here, and
fields v1 does not know are kept as unknown fields and written back unchanged.
The CRI and hook LinuxContainerResources/PodSandboxMetadata/ContainerMetadata
share their wire layout, so they convert by re-parsing bytes, field-exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from google.protobuf.message import Message

from runtimeproxy.hooks.envvalues import shown_value, written_value
from runtimeproxy.hooks.merge import ordered_env_names, replace_map
from runtimeproxy.hooks.lifecycle import ResourceUpdate
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

M = TypeVar("M", bound=Message)


# containerd labels each pod sandbox and container with its kind (its NRI shows the label beside the CRI labels).
KIND_LABEL = "io.cri-containerd.kind"
SANDBOX_LABELS = {KIND_LABEL: "sandbox"}


def container_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A container's labels as containerd keeps them: the CRI labels, and its kind label."""
    return {KIND_LABEL: "container", **labels}


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


def container_hook_request(config: cri.ContainerConfig, container_id: str = "") -> hooks.ContainerResourceHookRequest:
    """The container part of the hook request (the core fills the pod part: hooks.hook_messages.fill_pod_part)."""
    request = hooks.ContainerResourceHookRequest(
        container_meta=hooks.ContainerMetadata(
            name=config.metadata.name, attempt=config.metadata.attempt, id=container_id
        ),
        container_annotations=dict(config.annotations),
        # A name sent twice is one entry with its last value, the one runtimes use.
        container_envs={kv.key: shown_value(kv.value) for kv in config.envs},
    )
    if config.linux.HasField("resources"):
        request.container_resources.CopyFrom(
            convert(config.linux.resources, hooks.LinuxContainerResources)
        )
    return request


# --- hook result -> CRI request -------------------------------------------------------


def apply_to_pod_config(config: cri.PodSandboxConfig, pod: hooks.PodSandboxHookRequest) -> None:
    replace_map(config.labels, pod.labels)
    replace_map(config.annotations, pod.annotations)
    config.linux.cgroup_parent = pod.cgroup_parent
    if pod.HasField("resources"):
        config.linux.resources.CopyFrom(convert(pod.resources, cri.LinuxContainerResources))


def apply_to_container_config(
    request: cri.CreateContainerRequest, container: hooks.ContainerResourceHookRequest, env_order: list[str]
) -> None:
    """Write the hooks' result into the request; env values the plugins left as shown keep the kubelet's bytes."""
    config = request.config
    replace_map(config.annotations, container.container_annotations)
    if container.HasField("container_resources"):
        config.linux.resources.CopyFrom(
            convert(container.container_resources, cri.LinuxContainerResources)
        )
    envs = container.container_envs
    originals = {entry.key: entry for entry in config.envs}  # a name listed twice: its last entry, as runtimes use
    entries = [env_entry(originals.get(name), name, envs[name]) for name in ordered_env_names(envs, env_order)]
    del config.envs[:]
    config.envs.extend(entries)
    align_sandbox_cgroup_parent(request, container.pod_cgroup_parent)


def env_entry(original: cri.KeyValue | None, name: str, value: str) -> cri.KeyValue:
    """A written-back env entry: a copy of the request's own for that name, if any (fields the proxy does not
    know stay), with the plugins' value (the original bytes where they left it as shown: hooks.envvalues)."""
    entry = cri.KeyValue()
    if original is not None:
        entry.CopyFrom(original)
    entry.key = name
    entry.value = written_value(value, original.value if original is not None else None)
    return entry


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


def apply_to_update_request(request: cri.UpdateContainerResourcesRequest, update: ResourceUpdate) -> None:
    """The kubelet's update plus only what the plugins changed (the core's ResourceUpdate decides what)."""
    changes = update.resource_changes()
    if changes.ByteSize():
        request.linux.MergeFrom(convert(changes, cri.LinuxContainerResources))
    request.annotations.update(update.annotation_changes())
