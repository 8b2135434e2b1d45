"""The runtime as the core sees it: one interface each frontend implements once, and the core's one door
through which plugins change containers the call is not about.

`Runtime` is everything the core asks of a frontend's backend (containerd through CRI, dockerd): list what runs
and load one pod or container (the store's rebuild after a restart and its fills on a miss, hooks.context and
hooks.rebuild), remove a sandbox a plugin failed or a container an interrupted call left (hooks.reconcile),
update or evict a container a plugin names, an image's entrypoint and command (what NRI plugins see as the
argv of a container created without one) and identity (NRI's Container.image), and whether it injects CDI devices. Translation only: no hook policy.

`PluginAsks` is what the core offers plugins of another kind (NRI; hooks.nri_plugins): the store's snapshot a
plugin is synchronized with, and updates and evictions of other containers, carried out by the runtime and
written to the store by the core (the store has one writer: the core). An eviction is a stop the plugins hear
of: the core says what it is about (`stopped_subject`: hooks.context's subject, the skip rule applied) and the
asking kind delivers it on its own path (NRI: inside the event that evicted, under the host's lock), then
`stop_recorded` writes the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from runtimeproxy.hooks.edits import ImageFacts
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.model import Resources
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store


@dataclass
class Listing:
    """What the backend runs: pod IDs, and each container's pod ID ("" if unknown)."""

    pod_ids: list[str] = field(default_factory=list)
    containers: dict[str, str] = field(default_factory=dict)


class Runtime(Protocol):
    """What the core asks of a frontend's backend, one object per frontend."""

    name: str  # how the log names the backend: "dockerd", "the backend"

    async def list_objects(self) -> Listing:
        """Every pod and container the backend has (raises when it cannot be asked)."""

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        """The pod as the backend has it (what the core decides of it, the skip verdict and its own labels, left
        unset); None when it is unknown or cannot be read (logged)."""

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        """The container as the backend has it (its container_* fields; the pod part is filled when a hook
        runs); None when it is unknown or cannot be read (logged). `pod_id` is a hint from a list."""

    async def remove_sandbox(self, pod_id: str) -> None:
        """Undo a sandbox just created that a plugin failed (errors logged: the caller gets the plugin's)."""

    async def remove_container(self, container_id: str) -> None:
        """Remove a container an interrupted call left Created (hooks.reconcile); raises RuntimeError or OSError
        when the backend refuses it."""

    async def update_container_resources(self, container_id: str, resources: Resources) -> None:
        """The proxy's own update of a container's resources (only the changed, non-zero ones); raises
        RuntimeError or OSError when the backend refuses it."""

    async def evict_container(self, container_id: str) -> None:
        """Stop the container at once (containerd's EvictContainer: a stop with timeout 0); raises as above."""

    async def image_facts(self, image: str) -> ImageFacts:
        """The image's entrypoint, command and identity; empty when they cannot be read (logged)."""

    async def cdi_enabled(self) -> bool:
        """Whether the runtime injects the CDI devices a create names (containerd's `enable_cdi`, dockerd's CDI
        feature); False when it has no CDI or cannot be asked (not remembered then: asked again next time)."""


Snapshot = tuple[list[tuple[str, PodRecord]], list[tuple[str, ContainerRecord]]]


class NoRuntime(RuntimeError):
    """The frontend gave the core no runtime to carry out what a plugin asked."""


class PluginAsks:
    """Updates, evictions and the synchronization snapshot, as plugins of another kind ask them of the core."""

    def __init__(self, store: Store, runtime: Runtime | None = None,
                 subject_of: Callable[[str], Awaitable[Subject | None]] | None = None) -> None:
        """`subject_of`: a recorded container as the NRI plugins hear of it (hooks.context.subject_of; none:
        nobody hears of a stop)."""
        self.store = store
        self.runtime = runtime
        self.subject_of = subject_of

    def snapshot(self) -> Snapshot:
        """The pods and containers a plugin is synchronized with: none of a pod with the skip label (a
        container whose pod the store no longer holds stays: the runtime may still run it)."""
        pods, containers = self.store.snapshot()
        skipped = {pod_id for pod_id, record in pods if record.skip_hooks}
        return ([(pod_id, record) for pod_id, record in pods if pod_id not in skipped],
                [(cid, record) for cid, record in containers if record.pod_id not in skipped])

    def container(self, container_id: str) -> ContainerRecord | None:
        return self.store.container(container_id)

    async def update(self, container_id: str, changes: Resources) -> None:
        """The runtime updates the container, then the store follows (raises NoRuntime, RuntimeError, OSError)."""
        if self.runtime is None:
            raise NoRuntime("this frontend takes no updates")
        await self.runtime.update_container_resources(container_id, changes)
        self.store.update_container(container_id, changes, {})

    async def evict(self, container_id: str) -> None:
        """The runtime stops the container at once (raises NoRuntime, RuntimeError, OSError); the plugins hear of
        the stop where the caller delivers it (`stopped_subject`, then `stop_recorded`)."""
        if self.runtime is None:
            raise NoRuntime("this frontend cannot stop containers")
        await self.runtime.evict_container(container_id)

    async def stopped_subject(self, container_id: str) -> Subject | None:
        """What the plugins hear an eviction's stop about: the container as it was before the stop (as containerd
        tells it); None: nobody is to hear of it (a skip-labelled pod, a container the core cannot find)."""
        return await self.subject_of(container_id) if self.subject_of is not None else None

    def stop_recorded(self, container_id: str) -> None:
        """The store records the eviction's stop, after the plugins heard of it."""
        self.store.container_stopped(container_id)
