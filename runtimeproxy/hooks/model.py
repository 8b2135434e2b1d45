"""The core's own model of a pod and a container: what the runtime runs, whichever protocol asks about it.

The store (hooks.store) keeps one `PodRecord` per pod and one `ContainerRecord` per container; the frontends fill
them from their wire requests and answers (cri.hooks, docker.hooks) and the store rebuild fills them from the
runtime (containerd's verbose status, dockerd's inspect: cri.recovery, docker.recovery). Every plugin protocol
sees a projection of a record, made at the call: koordinator's hook messages (hooks.hook_messages) and
NRI's PodSandbox and Container (nri.convert).

A record holds plain values, no protocol's message: the pod's names, labels, annotations, runtime handler, cgroup
parent, resources and overhead; the container's name and attempt, annotations, environment and current Linux
resources (`Resources`, CRI's fields under CRI's names), its CRI labels (the kubelet's, io.kubernetes.* included,
and those the runtime adds itself: containerd's io.cri-containerd.kind), its argv, bind mounts, devices and RDT
class (hooks.edits.ContainerEdits), its state, pid and times; the pod's readiness and the runtime's own labels.
hooks.hook_messages turns a record into the hook protocol's request and a request into a record, value for value.
The requested resources of an update are the update's (hooks.lifecycle.ResourceUpdate); a record holds the current
ones, which follow each update the runtime applied.

State follows the lifecycle calls the proxy sees (created, started, stopped) and the runtime's own word after a
rebuild; the proxy hears no exit events, so a container whose process ended by itself stays RUNNING here until
its StopContainer (containerd's own NRI would already show it STOPPED).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from runtimeproxy.hooks.edits import ContainerEdits


class ContainerState(enum.Enum):
    """A container's state as the runtime reports it (NRI's and CRI's names map onto these)."""

    UNKNOWN = "unknown"  # the proxy has not been told (a record made without the runtime's word)
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"  # CRI's EXITED


def now_ns() -> int:
    """A lifecycle time as the runtimes keep them: nanoseconds since the epoch."""
    return time.time_ns()


@dataclass(frozen=True)
class HugepageLimit:
    page_size: str  # "2MB", "1GB"
    limit: int  # bytes


@dataclass
class Resources:
    """Linux resources as CRI carries them (a container's, a pod's resources or overhead); zero or empty: unset."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0
    oom_score_adj: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    hugepage_limits: tuple[HugepageLimit, ...] = ()
    unified: dict[str, str] = field(default_factory=dict)  # cgroup v2 files
    memory_swap_limit_in_bytes: int = 0  # memory + swap, as cgroup v1's memsw


@dataclass
class PodRecord:
    name: str = ""
    namespace: str = ""
    uid: str = ""
    attempt: int = 0
    runtime_handler: str = ""
    labels: dict[str, str] = field(default_factory=dict)  # the kubelet's (runtime_labels: the runtime's own)
    annotations: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""
    resources: Resources | None = None  # None: the request had none
    overhead: Resources | None = None
    skip_hooks: bool = False  # the skip rule (hooks.skip) spares the pod and its containers every plugin
    # The sandbox is up: False after a StopPodSandbox the proxy saw (NOTREADY). A rebuild records every pod as
    # ready (the frontends' loaders give the pod's hook request only); NRI shows no sandbox state.
    ready: bool = True
    runtime_labels: dict[str, str] = field(default_factory=dict)  # the runtime's own labels beside `labels`
    # The latest in-place resize (CRI UpdatePodSandboxResources), as containerd keeps it in the sandbox's status.
    # `resources` and `overhead` stay RunPodSandbox's: containerd's NRI shows those in every later event (its
    # PodSandbox's pod_resources come from the sandbox config), and so does koord-runtime-proxy's pod context.
    resized_overhead: Resources | None = None
    resized_resources: Resources | None = None

    def all_labels(self) -> dict[str, str]:
        """The pod's labels as the runtime has them: its own, the kubelet's over them."""
        return {**self.runtime_labels, **self.labels}


@dataclass
class ContainerRecord:
    pod_id: str
    id: str = ""  # "" until the runtime created it
    name: str = ""
    attempt: int = 0
    annotations: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    resources: Resources | None = None  # the current ones (None: not known)
    labels: dict[str, str] = field(default_factory=dict)  # the kubelet's CRI labels and the runtime's own
    edits: ContainerEdits | None = None  # argv, bind mounts, devices, RDT class; None: not known
    state: ContainerState = ContainerState.UNKNOWN
    pid: int = 0  # the container's process, where known (0: not known)
    created_ns: int = 0
    started_ns: int = 0
    finished_ns: int = 0
    # Its pod as the create request showed it (the kubelet sends the pod's config along), kept only when the store
    # had no record of the pod then (a failed read of the runtime; a Docker container without its sandbox's label):
    # the pod context its later hooks carry for as long as the store cannot find the pod.
    pod_from_create: PodRecord | None = None

    def started(self, pid: int = 0) -> None:
        """The runtime started it (StartContainer succeeded)."""
        self.state, self.started_ns = ContainerState.RUNNING, now_ns()
        if pid:
            self.pid = pid

    def stopped(self) -> None:
        """The runtime stopped it (StopContainer succeeded, or an eviction): its process is gone."""
        if self.state is not ContainerState.STOPPED:
            self.state, self.finished_ns, self.pid = ContainerState.STOPPED, now_ns(), 0
