"""The in-memory pod/container store: lookups, cascades, updates, the LRU bound, threads."""

from __future__ import annotations

import random
import threading

from runtimeproxy.hooks.hook_messages import container_record, container_request, pod_record
from runtimeproxy.hooks.model import Resources
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def pod(name: str, skip: bool = False) -> PodRecord:
    return pod_record(hooks.PodSandboxHookRequest(pod_meta=hooks.PodSandboxMetadata(name=name)), skip)


def container(pod_id: str, name: str = "app") -> ContainerRecord:
    info = hooks.ContainerResourceHookRequest(
        container_meta=hooks.ContainerMetadata(name=name),
        container_resources=hooks.LinuxContainerResources(cpu_shares=2, memory_limit_in_bytes=100),
        container_annotations={"a": "1"},
    )
    return container_record(pod_id, info)


def test_put_get_remove_pods_and_containers() -> None:
    store = Store()
    assert store.pod("p1") is None and store.container("c1") is None
    record = pod("web", skip=True)
    store.put_pod("p1", record)
    store.put_container("c1", container("p1"))
    assert store.pod("p1") is record and store.pod("p1").skip_hooks
    assert store.container("c1").pod_id == "p1"
    assert (store.pod_count, store.container_count, len(store)) == (1, 1, 2)

    replacement = pod("web2")
    store.put_pod("p1", replacement)
    assert store.pod("p1") is replacement and store.pod_count == 1

    store.remove_container("c1")
    assert store.container("c1") is None and store.pod("p1") is replacement
    store.remove_pod("p1")
    assert store.pod("p1") is None and len(store) == 0
    store.remove_pod("p1")  # unknown ids are fine
    store.remove_container("nope")


def test_remove_pod_cascades_to_its_containers_only() -> None:
    store = Store()
    store.put_pod("p1", pod("a"))
    store.put_pod("p2", pod("b"))
    for cid, pid in [("c1", "p1"), ("c2", "p1"), ("c3", "p2"), ("c4", "unknown-pod")]:
        store.put_container(cid, container(pid))
    store.remove_pod("p1")
    assert store.pod("p1") is None and store.pod("p2") is not None
    assert store.container("c1") is None and store.container("c2") is None
    assert store.container("c3") is not None and store.container("c4") is not None
    assert store.container_count == 2


def test_remove_pod_also_drops_containers_of_a_pod_it_never_recorded() -> None:
    store = Store()
    store.put_container("c1", container("p1"))
    store.remove_pod("p1")
    assert store.container("c1") is None


def test_update_container_resources_and_annotations() -> None:
    store = Store()
    store.put_container("c1", container("p1"))
    update = Resources(cpu_shares=512, cpuset_cpus="1")
    store.update_container("c1", update, {"b": "2", "a": "10"})
    info = container_request(store.container("c1"), None)
    # Applied as the runtime applies it: the memory limit the update did not name stays.
    assert info.container_resources == hooks.LinuxContainerResources(
        cpu_shares=512, cpuset_cpus="1", memory_limit_in_bytes=100)
    assert dict(info.container_annotations) == {"a": "10", "b": "2"}  # merged
    assert info.container_meta.name == "app"


def test_update_container_without_resources_keeps_them() -> None:
    store = Store()
    store.put_container("c1", container("p1"))
    store.update_container("c1", None, {})
    info = container_request(store.container("c1"), None)
    assert info.container_resources == hooks.LinuxContainerResources(cpu_shares=2, memory_limit_in_bytes=100)
    assert dict(info.container_annotations) == {"a": "1"}


def test_update_of_an_unknown_container_records_nothing() -> None:
    store = Store()
    store.update_container("c1", Resources(cpu_shares=1), {"a": "b"})
    assert store.container("c1") is None and len(store) == 0


def test_pods_are_lru_bounded_touched_ones_kept() -> None:
    store = Store(max_pods=3, max_containers=10)
    for n in range(3):
        store.put_pod(f"p{n}", pod(f"n{n}"))
    assert store.pod("p0") is not None  # touched: now the most recent
    store.put_pod("p3", pod("n3"))
    assert store.pod_count == 3
    assert store.pod("p1") is None  # the least recently used went
    assert all(store.pod(pid) is not None for pid in ("p0", "p2", "p3"))


def test_containers_are_lru_bounded_touched_ones_kept() -> None:
    store = Store(max_pods=10, max_containers=2)
    store.put_container("c0", container("p"))
    store.put_container("c1", container("p"))
    store.container("c0")
    store.put_container("c2", container("p"))
    assert store.container("c1") is None
    assert store.container("c0") is not None and store.container("c2") is not None
    # Re-putting an existing key touches it too.
    store.put_container("c0", container("p"))
    store.put_container("c3", container("p"))
    assert store.container("c2") is None and store.container("c0") is not None
    assert store.container_count == 2


def test_a_missed_lookup_does_not_touch_anything() -> None:
    store = Store(max_pods=2)
    store.put_pod("p0", pod("a"))
    store.put_pod("p1", pod("b"))
    assert store.pod("missing") is None
    store.put_pod("p2", pod("c"))
    assert store.pod("p0") is None and store.pod("p1") is not None


def test_threads_hammering_the_store() -> None:
    store = Store(max_pods=50, max_containers=200)
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(3000):
                pid = f"p{rng.randrange(80)}"
                cid = f"c{rng.randrange(300)}"
                action = rng.randrange(8)
                if action == 0:
                    store.put_pod(pid, pod(pid))
                elif action == 1:
                    store.put_container(cid, container(pid))
                elif action == 2:
                    store.remove_pod(pid)
                elif action == 3:
                    store.remove_container(cid)
                elif action == 4:
                    store.update_container(cid, Resources(cpu_shares=seed + 2), {"w": str(seed)})
                elif action == 5:
                    record = store.pod(pid)
                    assert record is None or record.name == pid
                else:
                    found = store.container(cid)
                    assert found is None or found.pod_id.startswith("p")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    assert store.pod_count <= 50 and store.container_count <= 200
    # Every remaining container's pod id is consistent, and the maps are usable afterwards.
    store.put_pod("final", pod("final"))
    assert store.pod("final") is not None
