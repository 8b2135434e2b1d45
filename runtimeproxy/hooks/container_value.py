"""A container call's value in the chain (CreateContainer, UpdateContainerResources): the container as the plugins
so far left it, in the core's model, with its hook-protocol projection.

The container part is the model's (hooks.model.ContainerRecord: annotations, environment, resources, and at a
create the edits the hook model lacks: argv, mounts, devices, ...); the pod part (metadata, labels, cgroup
parent, ...) is the projection's, the one a hook plugin may move (pod_cgroup_parent). Each kind folds its
answers into the part it speaks: a hook plugin's merged request becomes the value (`with_request`), an NRI
plugin's adjustments fold into the record (`with_container`), and the other side follows, so both are always
the same container. The chain's record (hooks.chain) names fields, finds collisions and validates over the
projection: the names the trace, the statistics and the plugins' failures have always used.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtimeproxy.hooks.hook_messages import container_request, set_container_part, with_request
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


@dataclass(frozen=True)
class ContainerValue:
    container: ContainerRecord
    request: hooks.ContainerResourceHookRequest  # never changed in place: a fold makes a new value

    @classmethod
    def of(cls, container: ContainerRecord, pod: PodRecord | None) -> ContainerValue:
        """A recorded container's value, its pod's part from `pod` (None: the container part only)."""
        return cls(container, container_request(container, pod))

    def with_request(self, request: hooks.ContainerResourceHookRequest) -> ContainerValue:
        """The value a hook plugin's merged request leaves (the rest of the record, edits included, kept)."""
        return self if request is self.request else ContainerValue(with_request(self.container, request), request)

    def with_container(self, container: ContainerRecord) -> ContainerValue:
        """The value an NRI plugin's folded record leaves (the projection's pod part kept)."""
        request = hooks.ContainerResourceHookRequest()
        request.CopyFrom(self.request)
        set_container_part(request, container)
        return ContainerValue(container, request)
