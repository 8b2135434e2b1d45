"""What a kubelet call's chain carries from plugin to plugin: its subject in the core's model, with the
hook-protocol projection a hook plugin is called with.

A pre-hook's chain starts from the frontend's request (the pod or container the kubelet asks for), and each
plugin kind folds its answers into the part it speaks: a hook plugin's answer is merged into the projection
(hooks.merge) and the value follows it (`with_request`); an NRI plugin's adjustments fold into the container's
record (nri.adjust) and the projection follows it (`ContainerValue.with_container`). Both sides always describe
one pod or container. The chain's record (hooks.chain) names fields, finds collisions and validates over the
projection: the names the trace, the statistics and the plugins' failures have always used. At the end the store
records the value's model (hooks.lifecycle).

  PodValue        a pod (PreRunPodSandbox): its record; the projection is its whole hook request
  ContainerValue  a container (CreateContainer, UpdateContainerResources): its record (annotations, environment,
                  resources, labels, and at a create the edits the hook model lacks: argv, mounts, devices, ...);
                  the projection's pod part (metadata, labels, cgroup parent, ...) is what a hook plugin may move
  RequestValue    a call that folds nothing into a record (a start's pre-hooks, a post-hook): the request itself
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from google.protobuf.message import Message

from runtimeproxy.hooks.hook_messages import (container_request, pod_request, pod_with_request, set_container_part,
                                              with_request)
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

Req = TypeVar("Req", bound=Message)


def differs(start: ChainValue[Req], left: ChainValue[Req]) -> bool:
    """The plugins left `start` otherwise (its projection differs: what a frontend writes back)."""
    return left is not start and left.request != start.request


class ChainValue(Protocol[Req]):
    @property
    def request(self) -> Req:
        """The hook projection (never changed in place: a fold makes a new value)."""

    def with_request(self, request: Req) -> ChainValue[Req]:
        """The value a hook plugin's merged request leaves (the same value when it is the same request)."""


@dataclass(frozen=True)
class RequestValue(Generic[Req]):
    request: Req

    def with_request(self, request: Req) -> RequestValue[Req]:
        return self if request is self.request else RequestValue(request)


@dataclass(frozen=True)
class PodValue:
    pod: PodRecord
    # The projection, made when first read (a call no hook plugin takes never makes it: a pod of 100,000 labels
    # costs no protobuf map); once made, the one a hook plugin's answer was merged into.
    projected: hooks.PodSandboxHookRequest | None = field(default=None, compare=False, repr=False)

    @property
    def request(self) -> hooks.PodSandboxHookRequest:
        if self.projected is None:
            object.__setattr__(self, "projected", pod_request(self.pod))
        assert self.projected is not None
        return self.projected

    def with_request(self, request: hooks.PodSandboxHookRequest) -> PodValue:
        """The record takes what the request says of the pod; what it does not say (the skip rule's verdict on the
        kubelet's labels, the runtime's own labels) is kept."""
        if request is self.projected:
            return self
        return PodValue(pod_with_request(self.pod, request), request)


@dataclass(frozen=True)
class ContainerValue:
    container: ContainerRecord
    pod: PodRecord | None = None  # what the projection's pod part is made from (None: the container part only)
    # The projection, made when first read; once made, its pod part is the pod as the hook plugins left it (one
    # may move the pod's cgroup parent).
    projected: hooks.ContainerResourceHookRequest | None = field(default=None, compare=False, repr=False)

    @property
    def request(self) -> hooks.ContainerResourceHookRequest:
        if self.projected is None:
            object.__setattr__(self, "projected", container_request(self.container, self.pod))
        assert self.projected is not None
        return self.projected

    @property
    def pod_cgroup_parent(self) -> str:
        """The cgroup parent of the container's pod, as the hook plugins left it."""
        if self.projected is not None:
            return self.projected.pod_cgroup_parent
        return self.pod.cgroup_parent if self.pod is not None else ""

    def with_request(self, request: hooks.ContainerResourceHookRequest) -> ContainerValue:
        """The rest of the record (labels, edits, state, ...) is kept."""
        if request is self.projected:
            return self
        return ContainerValue(with_request(self.container, request), self.pod, request)

    def with_container(self, container: ContainerRecord) -> ContainerValue:
        """The value an NRI plugin's folded record leaves (the projection's pod part kept; the same value when the
        record is unchanged: a plugin that changed nothing costs no projection)."""
        if container == self.container:
            return self
        request = hooks.ContainerResourceHookRequest()
        request.CopyFrom(self.request)
        set_container_part(request, container)
        return ContainerValue(container, self.pod, request)
