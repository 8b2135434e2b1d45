"""The hook core's view of pods and containers as NRI messages (PodSandbox, Container, LinuxResources).

What the store records is what the kubelet's requests said (after the hook plugins): names, labels,
annotations, environment, the Linux resources CRI carries, the pod's cgroup parent. At CreateContainer the
container also shows what the frontend's request carries beyond the hook model (hooks.edits: args, bind
mounts, devices, RDT class; nri.edits). Otherwise (the other events, Synchronize) and for what no request
carries (the runtime's own mounts and devices, the process's pid, rlimits, the OCI hooks) it is left empty:
an NRI plugin on containerd would see the runtime's values there, a plugin behind the proxy sees nothing.
"""

from __future__ import annotations

from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.nri.edits import fill_container
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri


def pod_sandbox(pod_id: str, pod: hooks.PodSandboxHookRequest | None) -> nri.PodSandbox:
    message = nri.PodSandbox(id=pod_id)
    if pod is None:
        return message
    message.name = pod.pod_meta.name
    message.uid = pod.pod_meta.uid
    message.namespace = pod.pod_meta.namespace
    message.labels.update(pod.labels)
    message.annotations.update(pod.annotations)
    message.runtime_handler = pod.runtime_handler
    message.linux.cgroup_parent = pod.cgroup_parent
    if pod.HasField("overhead"):
        message.linux.pod_overhead.CopyFrom(linux_resources(pod.overhead))
    if pod.HasField("resources"):
        message.linux.pod_resources.CopyFrom(linux_resources(pod.resources))
    return message


def container(container_id: str, pod_id: str, request: hooks.ContainerResourceHookRequest,
              state: nri.ContainerState = nri.CONTAINER_UNKNOWN, edits: ContainerEdits | None = None) -> nri.Container:
    message = nri.Container(id=container_id, pod_sandbox_id=pod_id, name=request.container_meta.name,
                            state=state)
    message.annotations.update(request.container_annotations)
    message.env.extend(f"{name}={value}" for name, value in request.container_envs.items())
    resources = request.container_resources
    message.linux.resources.CopyFrom(linux_resources(resources))
    if resources.oom_score_adj:
        message.linux.oom_score_adj.value = resources.oom_score_adj
    if edits is not None:
        fill_container(message, edits)
    return message


def linux_resources(resources: hooks.LinuxContainerResources) -> nri.LinuxResources:
    """CRI's resources as NRI's (zero: not set, as CRI means it)."""
    message = nri.LinuxResources()
    cpu, memory = message.cpu, message.memory
    if resources.cpu_shares:
        cpu.shares.value = resources.cpu_shares
    if resources.cpu_quota:
        cpu.quota.value = resources.cpu_quota
    if resources.cpu_period:
        cpu.period.value = resources.cpu_period
    cpu.cpus = resources.cpuset_cpus
    cpu.mems = resources.cpuset_mems
    if resources.memory_limit_in_bytes:
        memory.limit.value = resources.memory_limit_in_bytes
    if resources.memory_swap_limit_in_bytes:
        memory.swap.value = resources.memory_swap_limit_in_bytes
    message.hugepage_limits.extend(nri.HugepageLimit(page_size=limit.page_size, limit=limit.limit)
                                   for limit in resources.hugepage_limits)
    message.unified.update(resources.unified)
    return message
