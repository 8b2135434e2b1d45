"""In-memory record of pods and containers (the core's model, hooks.model), so that hooks of ID-only calls get
full context.

StartContainer, StopContainer, UpdateContainerResources and StopPodSandbox carry only
an ID; plugins need the pod's metadata, labels, cgroup parent and the container's
resources and environment. What RunPodSandbox and CreateContainer sent (after the
hooks changed it) is kept here until the pod or container is removed; container resources
follow UpdateContainerResources as the runtime applies it (hooks.merge.apply_resource_update). No disk IO:
after a restart the store is rebuilt from the backend (see the frontends' recovery).

All access happens on the event loop; the lock makes it safe from other threads too.
Both maps are bounded: past the bound the least recently used entry is dropped, and a
later miss is filled from the backend again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TypeVar

from runtimeproxy.hooks.merge import apply_resource_update
from runtimeproxy.hooks.model import ContainerRecord, PodRecord, Resources

DEFAULT_MAX_PODS = 16_384
DEFAULT_MAX_CONTAINERS = 65_536

_Record = TypeVar("_Record", PodRecord, ContainerRecord)


class Store:
    def __init__(self, max_pods: int = DEFAULT_MAX_PODS, max_containers: int = DEFAULT_MAX_CONTAINERS) -> None:
        self._pods: OrderedDict[str, PodRecord] = OrderedDict()
        self._containers: OrderedDict[str, ContainerRecord] = OrderedDict()
        self._max_pods = max_pods
        self._max_containers = max_containers
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pods) + len(self._containers)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def container_count(self) -> int:
        return len(self._containers)

    def put_pod(self, pod_id: str, record: PodRecord) -> None:
        with self._lock:
            _put_bounded(self._pods, pod_id, record, self._max_pods)

    def pod(self, pod_id: str) -> PodRecord | None:
        with self._lock:
            return _touch(self._pods, pod_id)

    def remove_pod(self, pod_id: str) -> None:
        """Forget the pod and every container recorded in it."""
        with self._lock:
            self._pods.pop(pod_id, None)
            for container_id in [cid for cid, c in self._containers.items() if c.pod_id == pod_id]:
                del self._containers[container_id]

    def put_container(self, container_id: str, record: ContainerRecord) -> None:
        with self._lock:
            _put_bounded(self._containers, container_id, record, self._max_containers)

    def container(self, container_id: str) -> ContainerRecord | None:
        with self._lock:
            return _touch(self._containers, container_id)

    def remove_container(self, container_id: str) -> None:
        with self._lock:
            self._containers.pop(container_id, None)

    def snapshot(self) -> tuple[list[tuple[str, PodRecord]], list[tuple[str, ContainerRecord]]]:
        """Every recorded pod and container (to tell a plugin that attaches what exists)."""
        with self._lock:
            return list(self._pods.items()), list(self._containers.items())

    def update_container(
        self, container_id: str, update: Resources | None, annotations: dict[str, str]
    ) -> None:
        """After a successful UpdateContainerResources that sent `update`: the container's resources
        are the recorded ones with the update applied the way the runtime applies it (field by
        field, zero meaning unchanged), not the update alone."""
        with self._lock:
            record = self._containers.get(container_id)
            if record is None:
                return
            if update is not None:
                record.resources = apply_resource_update(record.resources, update)
            record.annotations.update(annotations)

    def container_started(self, container_id: str, pid: int = 0) -> None:
        with self._lock:
            record = self._containers.get(container_id)
            if record is not None:
                record.started(pid)

    def container_stopped(self, container_id: str) -> None:
        with self._lock:
            record = self._containers.get(container_id)
            if record is not None:
                record.stopped()

    def pod_resized(self, pod_id: str, overhead: Resources | None, resources: Resources | None) -> None:
        """An in-place resize: the pod's overhead and resources as given (None: unset), as containerd records
        them at UpdatePodSandboxResources (in the sandbox's status, not in the config its NRI events show)."""
        with self._lock:
            record = self._pods.get(pod_id)
            if record is not None:
                record.resized_overhead, record.resized_resources = overhead, resources

    def pod_stopped(self, pod_id: str) -> None:
        with self._lock:
            record = self._pods.get(pod_id)
            if record is not None:
                record.ready = False


def _put_bounded(table: OrderedDict[str, _Record], key: str, value: _Record, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


def _touch(table: OrderedDict[str, _Record], key: str) -> _Record | None:
    value = table.get(key)
    if value is not None:
        table.move_to_end(key)
    return value
