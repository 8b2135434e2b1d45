"""Filling the hook store from dockerd: at start-up (proxy restart) and lazily on a miss.

dockerd keeps what it was asked to create, after our hooks changed it: labels (pod labels and
`annotation.*`), `Config.Env` and `HostConfig` (cgroup parent, resources — current ones, since
`/update` changes HostConfig). So cgroup parent, resources and env survive a proxy restart.
"""

from __future__ import annotations

import asyncio
import logging

from runtimeproxy.docker.engine import EngineClient, EngineError
from runtimeproxy.docker.messages import (
    CONTAINER_TYPE,
    SANDBOX_TYPE,
    TYPE_LABEL,
    Inspected,
    container_from_inspect,
    inspected,
    pod_from_inspect,
)
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store

log = logging.getLogger(__name__)
PARALLEL_INSPECTS = 8


class DockerRecords:
    """Reads sandboxes and containers back from dockerd with inspect calls."""

    def __init__(self, engine: EngineClient, skip: SkipRule) -> None:
        self._engine = engine
        self._skip = skip

    async def find(self, container_id: str) -> Inspected | None:
        """The Kubernetes sandbox or container with this ID; None if dockerd does not know it or
        Kubernetes did not create it."""
        try:
            return inspected(await self._engine.inspect(container_id))
        except EngineError as error:
            log.warning("cannot read %s from dockerd: %s", container_id, error)
            return None

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        found = await self.find(pod_id)
        return self.pod_record(found) if found is not None and found.kind == SANDBOX_TYPE else None

    async def load_container(self, container_id: str) -> ContainerRecord | None:
        """The container with its pod's context as dockerd has it (one more inspect for the pod)."""
        found = await self.find(container_id)
        if found is None or found.kind != CONTAINER_TYPE:
            return None
        return self.container_record(found, await self.load_pod(found.sandbox_id))

    def pod_record(self, found: Inspected) -> PodRecord:
        info = pod_from_inspect(found)
        return PodRecord(info, self._skip.applies(info.labels))

    @staticmethod
    def container_record(found: Inspected, pod: PodRecord | None) -> ContainerRecord:
        return ContainerRecord(found.sandbox_id, container_from_inspect(found, pod.info if pod else None))

    async def rebuild(self, store: Store) -> None:
        """Record every Kubernetes sandbox and container dockerd has (sandboxes first)."""
        ids = await self._engine.list_labelled(TYPE_LABEL)
        limit = asyncio.Semaphore(PARALLEL_INSPECTS)

        async def load(container_id: str) -> Inspected | None:
            async with limit:
                return await self.find(container_id)

        found = [each for each in await asyncio.gather(*(load(cid) for cid in ids)) if each is not None]
        for each in found:
            if each.kind == SANDBOX_TYPE:
                store.put_pod(each.container_id, self.pod_record(each))
        for each in found:
            if each.kind == CONTAINER_TYPE:
                store.put_container(each.container_id, self.container_record(each, store.pod(each.sandbox_id)))
        log.info("store rebuilt from dockerd: %d pods, %d containers", store.pod_count, store.container_count)


async def rebuild_store(records: DockerRecords, store: Store) -> None:
    try:
        await records.rebuild(store)
    except EngineError as error:  # lazy fills on a miss still cover what this missed
        log.warning("could not rebuild the store from dockerd: %s", error)
