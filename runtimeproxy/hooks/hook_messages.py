"""The core's model (hooks.model) as koordinator's hook messages, and back: value for value, presence kept.

A hook plugin is called with a request made from the records at the call (`pod_request`, `container_request`);
what a frontend's translator decodes into a hook request becomes a record (`pod_record`, `container_record`)
once the call went through. A container's request carries its pod's part (pod_*: metadata, labels, annotations,
cgroup parent, resources) filled from the pod's record, the one place it is filled for both frontends
(`fill_pod_part`; a frontend's translator builds only the container part).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.merge import RESOURCE_SCALARS, replace_map
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, HugepageLimit, PodRecord, Resources
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


# A LinuxContainerResources of either protocol: CRI's and the hook protocol's have one layout and one set of
# field names, so a frontend reads and writes its own with the same two functions (typed Any: two message types).
ResourcesMessage = Any


def resources_of(message: ResourcesMessage) -> Resources:
    return Resources(
        cpu_period=message.cpu_period, cpu_quota=message.cpu_quota, cpu_shares=message.cpu_shares,
        memory_limit_in_bytes=message.memory_limit_in_bytes, oom_score_adj=message.oom_score_adj,
        cpuset_cpus=message.cpuset_cpus, cpuset_mems=message.cpuset_mems,
        hugepage_limits=tuple(HugepageLimit(limit.page_size, limit.limit) for limit in message.hugepage_limits),
        unified=dict(message.unified), memory_swap_limit_in_bytes=message.memory_swap_limit_in_bytes)


def set_resources(message: ResourcesMessage, resources: Resources) -> None:
    """`message` holds `resources` (every field set; the message's field is present afterwards; fields it has
    that the model does not know are kept)."""
    message.SetInParent()
    message.cpu_period, message.cpu_quota, message.cpu_shares = \
        resources.cpu_period, resources.cpu_quota, resources.cpu_shares
    message.memory_limit_in_bytes, message.oom_score_adj = resources.memory_limit_in_bytes, resources.oom_score_adj
    message.cpuset_cpus, message.cpuset_mems = resources.cpuset_cpus, resources.cpuset_mems
    # Rewritten only when they differ: an entry keeps the fields the proxy does not know (a newer CRI's).
    if [(limit.page_size, limit.limit) for limit in message.hugepage_limits] != \
            [(limit.page_size, limit.limit) for limit in resources.hugepage_limits]:
        del message.hugepage_limits[:]
        for limit in resources.hugepage_limits:
            message.hugepage_limits.add(page_size=limit.page_size, limit=limit.limit)
    message.unified.clear()
    message.unified.update(resources.unified)
    message.memory_swap_limit_in_bytes = resources.memory_swap_limit_in_bytes


def merge_sparse(message: ResourcesMessage, changes: Resources) -> None:
    """A sparse update (zero: unchanged; hooks.merge.changed_resources) merged into `message` as protobuf's
    MergeFrom merges one: its non-zero values set, its unified keys and hugepage limits added."""
    for name in RESOURCE_SCALARS:
        value = getattr(changes, name)
        if value:
            setattr(message, name, value)
    message.unified.update(changes.unified)
    for limit in changes.hugepage_limits:
        message.hugepage_limits.add(page_size=limit.page_size, limit=limit.limit)


def resources_message(resources: Resources) -> hooks.LinuxContainerResources:
    message = hooks.LinuxContainerResources()
    set_resources(message, resources)
    return message


def _optional(message: hooks.PodSandboxHookRequest | hooks.ContainerResourceHookRequest, name: str
              ) -> Resources | None:
    return resources_of(getattr(message, name)) if message.HasField(name) else None


# --- pods ------------------------------------------------------------------------------------------------


def pod_record(request: hooks.PodSandboxHookRequest, skip_hooks: bool = False,
               runtime_labels: Mapping[str, str] | None = None) -> PodRecord:
    """The record of a pod as its hook request has it."""
    meta = request.pod_meta
    return PodRecord(
        name=meta.name, namespace=meta.namespace, uid=meta.uid, attempt=meta.attempt,
        runtime_handler=request.runtime_handler, labels=dict(request.labels), annotations=dict(request.annotations),
        cgroup_parent=request.cgroup_parent, resources=_optional(request, "resources"),
        overhead=_optional(request, "overhead"), skip_hooks=skip_hooks, runtime_labels=dict(runtime_labels or {}))


def pod_with_request(pod: PodRecord, request: hooks.PodSandboxHookRequest) -> PodRecord:
    """The record with what a hook request says of the pod taken from `request` (as the plugins left it); the rest
    (the skip rule's verdict, the runtime's own labels, readiness, a resize) is the record's."""
    taken = pod_record(request)
    return replace(pod, name=taken.name, namespace=taken.namespace, uid=taken.uid, attempt=taken.attempt,
                   runtime_handler=taken.runtime_handler, labels=taken.labels, annotations=taken.annotations,
                   cgroup_parent=taken.cgroup_parent, resources=taken.resources, overhead=taken.overhead)


def pod_meta(pod: PodRecord) -> hooks.PodSandboxMetadata:
    return hooks.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=pod.attempt)


def pod_request(pod: PodRecord) -> hooks.PodSandboxHookRequest:
    """The pod's hook request (PostStopPodSandbox), as RunPodSandbox's was after the plugins."""
    request = hooks.PodSandboxHookRequest(pod_meta=pod_meta(pod), runtime_handler=pod.runtime_handler,
                                          labels=pod.labels, annotations=pod.annotations,
                                          cgroup_parent=pod.cgroup_parent)
    if pod.overhead is not None:
        set_resources(request.overhead, pod.overhead)
    if pod.resources is not None:
        set_resources(request.resources, pod.resources)
    return request


# --- containers ------------------------------------------------------------------------------------------


def container_record(pod_id: str, request: hooks.ContainerResourceHookRequest,
                     labels: Mapping[str, str] | None = None, edits: ContainerEdits | None = None,
                     state: ContainerState = ContainerState.UNKNOWN, pid: int = 0, created_ns: int = 0,
                     started_ns: int = 0, finished_ns: int = 0) -> ContainerRecord:
    """The record of a container as the container part of its hook request has it (the pod part is its pod's)."""
    return ContainerRecord(
        pod_id, id=request.container_meta.id, **_container_fields(request), labels=dict(labels or {}), edits=edits,
        state=state, pid=pid, created_ns=created_ns, started_ns=started_ns, finished_ns=finished_ns)


def with_request(container: ContainerRecord, request: hooks.ContainerResourceHookRequest) -> ContainerRecord:
    """The record with what a hook request says of the container taken from `request` (its name, attempt,
    annotations, environment and resources: as the plugins left them); the rest is the record's."""
    return replace(container, **_container_fields(request))


def _container_fields(request: hooks.ContainerResourceHookRequest) -> dict[str, Any]:
    """What a hook request says of its container, as ContainerRecord's fields (all but the id)."""
    meta = request.container_meta
    return {"name": meta.name, "attempt": meta.attempt, "annotations": dict(request.container_annotations),
            "env": dict(request.container_envs), "resources": _optional(request, "container_resources")}


def container_request(container: ContainerRecord, pod: PodRecord | None) -> hooks.ContainerResourceHookRequest:
    """The container's hook request with its pod's part as the pod is now (`pod` None: the container part only)."""
    request = hooks.ContainerResourceHookRequest(
        container_meta=hooks.ContainerMetadata(name=container.name, attempt=container.attempt, id=container.id),
        container_annotations=container.annotations, container_envs=container.env)
    if container.resources is not None:
        set_resources(request.container_resources, container.resources)
    if pod is not None:
        fill_pod_part(request, pod)
    return request


def set_container_part(request: hooks.ContainerResourceHookRequest, container: ContainerRecord) -> None:
    """`request`'s container part (annotations, environment, resources) made the record's; metadata and the pod's
    part kept."""
    replace_map(request.container_annotations, container.annotations)
    replace_map(request.container_envs, container.env)
    if container.resources is None:
        request.ClearField("container_resources")
    else:
        set_resources(request.container_resources, container.resources)


def container_answer(container: ContainerRecord) -> hooks.ContainerResourceHookResponse:
    """The container part of a record as a hook plugin would answer it (what hooks.validate judges an answer by)."""
    answer = hooks.ContainerResourceHookResponse(container_annotations=container.annotations,
                                                 container_envs=container.env)
    if container.resources is not None:
        set_resources(answer.container_resources, container.resources)
    return answer


def fill_pod_part(request: hooks.ContainerResourceHookRequest, pod: PodRecord) -> None:
    """The pod part of a container's hook request (pod_*), from the pod's record."""
    request.pod_meta.CopyFrom(pod_meta(pod))
    replace_map(request.pod_annotations, pod.annotations)
    replace_map(request.pod_labels, pod.labels)
    request.pod_cgroup_parent = pod.cgroup_parent
    if pod.resources is not None:
        set_resources(request.pod_resources, pod.resources)
