"""hooks.runtime.PluginAsks: the core's one door for plugins of another kind to the store and the runtime."""

from __future__ import annotations

import asyncio

import pytest

from hookkit import StubRuntime
from runtimeproxy.hooks.runtime import NoRuntime, PluginAsks
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def recording(asked: list[str]) -> StubRuntime:
    """A runtime that records the updates and evictions it is asked, refusing the container "refused"."""
    async def update(container_id: str, resources: hooks.LinuxContainerResources) -> None:
        if container_id == "refused":
            raise RuntimeError("UpdateContainerResources: NOT_FOUND")
        asked.append(f"update {container_id} {resources.cpu_shares}")

    async def evict(container_id: str) -> None:
        asked.append(f"evict {container_id}")

    return StubRuntime(update, evict)


def store_with(*container_ids: str) -> Store:
    store = Store()
    store.put_pod("pod", PodRecord(hooks.PodSandboxHookRequest()))
    store.put_pod("skipped", PodRecord(hooks.PodSandboxHookRequest(), skip_hooks=True))
    for container_id in container_ids:
        store.put_container(container_id, ContainerRecord("pod", hooks.ContainerResourceHookRequest(
            container_resources=hooks.LinuxContainerResources(cpu_shares=2))))
    return store


def test_the_sync_snapshot_leaves_out_pods_with_the_skip_label_and_their_containers() -> None:
    store = store_with("c1")
    store.put_container("spared", ContainerRecord("skipped", hooks.ContainerResourceHookRequest()))
    store.put_container("orphan", ContainerRecord("gone", hooks.ContainerResourceHookRequest()))
    pods, containers = PluginAsks(store).snapshot()
    assert [pod_id for pod_id, _ in pods] == ["pod"] and [cid for cid, _ in containers] == ["c1", "orphan"]


def test_an_update_reaches_the_runtime_first_and_then_the_store() -> None:
    store, asked = store_with("c1", "refused"), list[str]()
    asks = PluginAsks(store, recording(asked))
    asyncio.run(asks.update("c1", hooks.LinuxContainerResources(cpu_shares=512)))
    with pytest.raises(RuntimeError):
        asyncio.run(asks.update("refused", hooks.LinuxContainerResources(cpu_shares=512)))
    assert asked == ["update c1 512"]
    c1, refused = store.container("c1"), store.container("refused")
    assert c1 is not None and c1.info.container_resources.cpu_shares == 512
    assert refused is not None and refused.info.container_resources.cpu_shares == 2  # the runtime said no


def test_an_eviction_stops_the_container_and_the_plugins_hear_it_when_told() -> None:
    told: list[str] = []

    async def stopped(container_id: str) -> None:
        told.append(container_id)

    asked: list[str] = []
    asks = PluginAsks(store_with("c1"), recording(asked), stopped)

    async def evict() -> None:
        await asks.evict("c1")
        assert told == []  # the caller decides when the stop is heard (inside the event, or after an answer)
        await asks.tell_stopped("c1")

    asyncio.run(evict())
    assert asked == ["evict c1"] and told == ["c1"]


def test_without_a_runtime_nothing_is_carried_out() -> None:
    asks = PluginAsks(store_with("c1"))
    with pytest.raises(NoRuntime, match="takes no updates"):
        asyncio.run(asks.update("c1", hooks.LinuxContainerResources(cpu_shares=512)))
    with pytest.raises(NoRuntime, match="cannot stop containers"):
        asyncio.run(asks.evict("c1"))
    asyncio.run(asks.tell_stopped("c1"))  # nobody to tell: no error
