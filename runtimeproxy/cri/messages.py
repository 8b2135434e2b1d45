"""CRI <-> the hook core's model (hooks.model): one function per hooked CRI request.

The merge rules (what a plugin's answer changes) are the hook core's (hooks.merge);
this module only reads CRI requests into the core's records and writes the result back.

The hooked CRI requests are decoded with runtime.v1 classes whatever version the
kubelet spoke: v1alpha2 has the same field numbers for everything used here, and
fields v1 does not know are kept as unknown fields and written back unchanged.
CRI's LinuxContainerResources and the hook protocol's have one layout and one set of field names: the core's
hooks.hook_messages reads and writes either (resources_of, set_resources, merge_sparse); a write leaves the
fields the proxy does not know (a newer CRI's) as they were.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import Message

from runtimeproxy.hooks.envvalues import shown_value, written_value
from runtimeproxy.hooks.hook_messages import merge_sparse, resources_of, set_resources
from runtimeproxy.hooks.merge import is_empty, ordered_env_names, replace_map
from runtimeproxy.hooks.model import ContainerRecord, PodRecord, Resources
from runtimeproxy.hooks.lifecycle import ResourceUpdate
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri


# containerd labels each pod sandbox and container with its kind (its NRI shows the label beside the CRI labels).
KIND_LABEL = "io.cri-containerd.kind"
SANDBOX_LABELS = {KIND_LABEL: "sandbox"}


def container_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A container's labels as containerd keeps them: the CRI labels, and its kind label."""
    return {KIND_LABEL: "container", **labels}


# --- CRI -> the core's model -----------------------------------------------------------


def _resources(parent: Message, name: str) -> Resources | None:
    return resources_of(getattr(parent, name)) if parent.HasField(name) else None


def pod_model(config: cri.PodSandboxConfig, runtime_handler: str) -> PodRecord:
    """The pod a RunPodSandbox (or a container's sandbox_config, a runtime's status) says (the core decides the
    rest: hooks.context.HookContext.admitted)."""
    meta, linux = config.metadata, config.linux
    return PodRecord(name=meta.name, namespace=meta.namespace, uid=meta.uid, attempt=meta.attempt,
                     runtime_handler=runtime_handler, labels=dict(config.labels),
                     annotations=dict(config.annotations), cgroup_parent=linux.cgroup_parent,
                     resources=_resources(linux, "resources"), overhead=_resources(linux, "overhead"))


def container_model(pod_id: str, config: cri.ContainerConfig, container_id: str = "") -> ContainerRecord:
    """The container a CreateContainer (or a runtime's status) says: its labels as containerd keeps them; its
    edits (argv, mounts, devices, ...) are the caller's (cri.edits)."""
    return ContainerRecord(
        pod_id, id=container_id, name=config.metadata.name, attempt=config.metadata.attempt,
        annotations=dict(config.annotations),
        # A name sent twice is one entry with its last value, the one runtimes use.
        env={kv.key: shown_value(kv.value) for kv in config.envs},
        resources=_resources(config.linux, "resources"), labels=container_labels(config.labels))


# --- the plugins' result -> CRI request -----------------------------------------------------


def apply_to_pod_config(config: cri.PodSandboxConfig, pod: PodRecord) -> None:
    replace_map(config.labels, pod.labels)
    replace_map(config.annotations, pod.annotations)
    config.linux.cgroup_parent = pod.cgroup_parent
    if pod.resources is not None:
        set_resources(config.linux.resources, pod.resources)


def apply_to_container_config(
    request: cri.CreateContainerRequest, container: ContainerRecord, env_order: list[str]
) -> None:
    """Write the plugins' result into the request; env values the plugins left as shown keep the kubelet's bytes.
    (The cgroup parent the container goes under is the pod's: align_sandbox_cgroup_parent.)"""
    config = request.config
    replace_map(config.annotations, container.annotations)
    if container.resources is not None:
        set_resources(config.linux.resources, container.resources)
    envs = container.env
    originals = {entry.key: entry for entry in config.envs}  # a name listed twice: its last entry, as runtimes use
    entries = [env_entry(originals.get(name), name, envs[name]) for name in ordered_env_names(envs, env_order)]
    del config.envs[:]
    config.envs.extend(entries)


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
    if not is_empty(changes):
        merge_sparse(request.linux, changes)
    request.annotations.update(update.annotation_changes())
