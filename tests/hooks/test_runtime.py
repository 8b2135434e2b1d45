"""hooks.runtime.PluginAsks: the core's one door for plugins of another kind to the store and the runtime."""

from __future__ import annotations

import asyncio

import pytest

from tests.kits.hooks import StubRuntime
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.model import ContainerState
from runtimeproxy.hooks.runtime import NoRuntime, PluginAsks
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.store import Store
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
    store.put_pod("pod", pod_record(hooks.PodSandboxHookRequest()))
    store.put_pod("skipped", pod_record(hooks.PodSandboxHookRequest(), skip_hooks=True))
    for container_id in container_ids:
        store.put_container(container_id, container_record("pod", hooks.ContainerResourceHookRequest(
            container_resources=hooks.LinuxContainerResources(cpu_shares=2))))
    return store


def test_the_sync_snapshot_leaves_out_pods_with_the_skip_label_and_their_containers() -> None:
    store = store_with("c1")
    store.put_container("spared", container_record("skipped", hooks.ContainerResourceHookRequest()))
    store.put_container("orphan", container_record("gone", hooks.ContainerResourceHookRequest()))
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
    assert c1 is not None and c1.resources is not None and c1.resources.cpu_shares == 512
    assert refused is not None and refused.resources is not None
    assert refused.resources.cpu_shares == 2  # the runtime said no


def test_an_eviction_stops_the_container_and_the_core_says_what_the_stop_is_about() -> None:
    looked_up: list[str] = []

    async def subject_of(container_id: str) -> Subject | None:
        looked_up.append(container_id)
        return Subject("p1", None, container_id)

    asked: list[str] = []
    store = store_with("c1")
    asks = PluginAsks(store, recording(asked), subject_of)

    async def evict() -> Subject | None:
        await asks.evict("c1")
        assert looked_up == []  # the caller delivers the stop where it is to be heard (in the event, or after)
        return await asks.stopped_subject("c1")

    subject = asyncio.run(evict())
    assert asked == ["evict c1"] and subject is not None and subject.container_id == "c1"
    asks.stop_recorded("c1")
    record = store.container("c1")
    assert record is not None and record.state is ContainerState.STOPPED


def test_without_a_runtime_nothing_is_carried_out() -> None:
    asks = PluginAsks(store_with("c1"))
    with pytest.raises(NoRuntime, match="takes no updates"):
        asyncio.run(asks.update("c1", hooks.LinuxContainerResources(cpu_shares=512)))
    with pytest.raises(NoRuntime, match="cannot stop containers"):
        asyncio.run(asks.evict("c1"))
    assert asyncio.run(asks.stopped_subject("c1")) is None  # nobody to tell: no error
