"""The core's own model of a pod and a container: what the runtime runs, whichever protocol asks about it.

The store (hooks.store) keeps one `PodRecord` per pod and one `ContainerRecord` per container; the frontends fill
them from their wire requests and answers (cri.hooks, docker.hooks) and the store rebuild fills them from the
runtime (containerd's verbose status, dockerd's inspect: cri.recovery, docker.recovery). Every plugin protocol
sees a projection of a record, made at the call: koordinator's hook messages (hooks.context.request_of) and
NRI's PodSandbox and Container (nri.convert).

The fields the hook protocol has (metadata, annotations, env, the container's current resources, the pod's labels,
cgroup parent, resources and overhead) are kept in its message type, `info`: the hook projection is that message
with the pod's part filled in, byte for byte what the kubelet's request said after the hook plugins. The fields
it lacks are plain values here: the container's labels (the kubelet's CRI labels, io.kubernetes.* included, and
those the runtime adds itself: containerd's io.cri-containerd.kind), its argv, bind mounts, devices and RDT class
(hooks.edits.ContainerEdits), its state, pid and times; the pod's readiness and the runtime's own labels.
The requested resources of an update are the update's (hooks.lifecycle.ResourceUpdate); `info` holds the current
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
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


class ContainerState(enum.Enum):
    """A container's state as the runtime reports it (NRI's and CRI's names map onto these)."""

    UNKNOWN = "unknown"  # the proxy has not been told (a record made without the runtime's word)
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"  # CRI's EXITED


def now_ns() -> int:
    """A lifecycle time as the runtimes keep them: nanoseconds since the epoch."""
    return time.time_ns()


@dataclass
class PodRecord:
    info: hooks.PodSandboxHookRequest  # metadata, labels, annotations, cgroup parent, resources, runtime handler
    skip_hooks: bool = False  # the skip rule (hooks.skip) spares the pod and its containers every plugin
    # The sandbox is up: False after a StopPodSandbox the proxy saw (NOTREADY). A rebuild records every pod as
    # ready (the frontends' loaders give the pod's hook request only); NRI shows no sandbox state.
    ready: bool = True
    runtime_labels: dict[str, str] = field(default_factory=dict)  # the runtime's own labels beside info.labels
    # The latest in-place resize (CRI UpdatePodSandboxResources), as containerd keeps it in the sandbox's status.
    # `info` keeps RunPodSandbox's resources: containerd's NRI shows those in every later event (its PodSandbox's
    # pod_resources come from the sandbox config), and so does koord-runtime-proxy's pod context.
    resized_overhead: hooks.LinuxContainerResources | None = None
    resized_resources: hooks.LinuxContainerResources | None = None

    def labels(self) -> dict[str, str]:
        """The pod's labels as the runtime has them: its own, the kubelet's over them."""
        return {**self.runtime_labels, **self.info.labels}


@dataclass
class ContainerRecord:
    pod_id: str
    # A ContainerResourceHookRequest whose container_* fields are what we know of the container (its resources
    # the current ones); its pod_* fields are filled from the pod's record when a hook runs.
    info: hooks.ContainerResourceHookRequest = field(default_factory=hooks.ContainerResourceHookRequest)
    labels: dict[str, str] = field(default_factory=dict)  # the kubelet's CRI labels and the runtime's own
    edits: ContainerEdits | None = None  # argv, bind mounts, devices, RDT class; None: not known
    state: ContainerState = ContainerState.UNKNOWN
    pid: int = 0  # the container's process, where known (0: not known)
    created_ns: int = 0
    started_ns: int = 0
    finished_ns: int = 0

    def started(self, pid: int = 0) -> None:
        """The runtime started it (StartContainer succeeded)."""
        self.state, self.started_ns = ContainerState.RUNNING, now_ns()
        if pid:
            self.pid = pid

    def stopped(self) -> None:
        """The runtime stopped it (StopContainer succeeded, or an eviction): its process is gone."""
        if self.state is not ContainerState.STOPPED:
            self.state, self.finished_ns, self.pid = ContainerState.STOPPED, now_ns(), 0
