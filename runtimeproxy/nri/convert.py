"""The core's model of pods and containers (hooks.model) as NRI messages (PodSandbox, Container, LinuxResources).

A container shows what the model records: its name, CRI labels, annotations, environment, the Linux resources
CRI carries (the current ones, which follow each applied update), its argv, bind mounts, devices and RDT class
(hooks.edits), its state, pid where known, and its created/started/finished times; its pod shows names, labels,
annotations, runtime handler, cgroup parent, resources and overhead. Synchronize shows what containerd's own
NRI lists of the core's snapshot (hooks.runtime.PluginAsks, which leaves out the pods the skip rule spares and
their containers): every pod, and the containers not stopped.

Left empty, as no request tells the proxy (an NRI plugin on containerd sees the runtime's values there): the
mounts, devices and labels the runtime adds itself beyond containerd's kind label (containerd's /etc/hostname,
/dev/shm, the image's labels), the OCI hooks, rlimits, namespaces, the cgroups path, a pod's pid and IPs, a
container's exit code and status reason.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import Message

from runtimeproxy.hooks import nri_plugins
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, PodRecord, Resources
from runtimeproxy.nri.edits import fill_container
from runtimeproxy.nri.events import WireEvent
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

STATES = {
    ContainerState.UNKNOWN: nri.CONTAINER_UNKNOWN,
    ContainerState.CREATED: nri.CONTAINER_CREATED,
    ContainerState.RUNNING: nri.CONTAINER_RUNNING,
    ContainerState.STOPPED: nri.CONTAINER_STOPPED,
}


def subject_pod(subject: nri_plugins.Subject) -> nri.PodSandbox:
    """An event's pod, as its record has it."""
    return pod_sandbox(subject.pod_id, subject.pod)


def pod_sandbox(pod_id: str, record: PodRecord | None) -> nri.PodSandbox:
    message = nri.PodSandbox(id=pod_id)
    if record is None:
        return message
    message.name = record.name
    message.uid = record.uid
    message.namespace = record.namespace
    message.labels.update(record.all_labels())
    message.annotations.update(record.annotations)
    message.runtime_handler = record.runtime_handler
    message.linux.cgroup_parent = record.cgroup_parent
    if record.overhead is not None:
        message.linux.pod_overhead.CopyFrom(linux_resources(record.overhead))
    if record.resources is not None:
        message.linux.pod_resources.CopyFrom(linux_resources(record.resources))
    return message


def container(container_id: str, record: ContainerRecord) -> nri.Container:
    """The container as its model has it."""
    message = nri.Container(id=container_id, pod_sandbox_id=record.pod_id, name=record.name,
                            state=STATES[record.state], pid=record.pid, created_at=record.created_ns,
                            started_at=record.started_ns, finished_at=record.finished_ns)
    message.labels.update(record.labels)
    message.annotations.update(record.annotations)
    message.env.extend(f"{name}={value}" for name, value in record.env.items())
    resources = record.resources or Resources()
    message.linux.resources.CopyFrom(linux_resources(resources))
    if resources.oom_score_adj:
        message.linux.oom_score_adj.value = resources.oom_score_adj
    if record.edits is not None:
        fill_container(message, record.edits)
    return message


def event_container(event: WireEvent, subject: nri_plugins.Subject, folded: ContainerRecord) -> nri.Container:
    """The container of an adjusting event: as the plugins before this one left it (`folded`: CreateContainer);
    where the request carries the change apart (UpdateContainer's linux_resources), as it is now, with its current
    resources, as containerd shows its spec."""
    shown = subject.container if event.carries("linux_resources") else folded
    assert shown is not None
    return container(subject.container_id, shown)


def subject_container(subject: nri_plugins.Subject) -> nri.Container | None:
    """The container an event is about, as recorded (None: a pod event)."""
    return container(subject.container_id, subject.container) if subject.container is not None else None


def event_fields(subject: nri_plugins.Subject, shown: nri.Container | None) -> dict[str, Message]:
    """What an event's request may carry besides the pod (nri.events.WireEvent.message takes those its message
    has): the container it is about (`shown`); a pod resize's overhead and resources."""
    fields: dict[str, Message] = {}
    if shown is not None:
        fields["container"] = shown
    if subject.resize is not None:
        if subject.resize.overhead is not None:
            fields["overhead_linux_resources"] = linux_resources(subject.resize.overhead)
        if subject.resize.resources is not None:
            fields["linux_resources"] = linux_resources(subject.resize.resources)
    return fields


def synchronized(pods: Iterable[tuple[str, PodRecord]], containers: Iterable[tuple[str, ContainerRecord]]
                 ) -> tuple[list[nri.PodSandbox], list[nri.Container]]:
    """What a plugin's Synchronize lists of the core's snapshot (hooks.runtime.PluginAsks), as containerd's NRI
    lists it (its ListPodSandboxes, ListContainers): every pod, and every container that is not stopped."""
    shown_containers = [container(container_id, record) for container_id, record in containers
                        if record.state is not ContainerState.STOPPED]
    return [pod_sandbox(pod_id, pod) for pod_id, pod in pods], shown_containers


def update_resources(resources: Resources) -> nri.LinuxResources:
    """An update's resources as containerd's NRI sends them in UpdateContainer (its fromCRILinuxResources): CPU
    shares, quota, period and the memory limit always set, zero too; the rest as linux_resources."""
    message = linux_resources(resources)
    cpu, memory = message.cpu, message.memory
    cpu.shares.value, cpu.quota.value, cpu.period.value = \
        resources.cpu_shares, resources.cpu_quota, resources.cpu_period
    memory.limit.value = resources.memory_limit_in_bytes
    memory.ClearField("swap")  # CRI's update has no swap for containerd's NRI to show
    return message


def linux_resources(resources: Resources) -> nri.LinuxResources:
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
