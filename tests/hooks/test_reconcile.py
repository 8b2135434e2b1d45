"""The rule for what an interrupted call left (hooks.reconcile), against a runtime of dicts."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from tests.kits.hooks import StubRuntime
from runtimeproxy.hooks.journal import CREATE_CONTAINER, START_CONTAINER, CallJournal, InFlight
from runtimeproxy.hooks.lifecycle import HookPoints
from runtimeproxy.hooks.hook_messages import container_record
from runtimeproxy.hooks.model import ContainerRecord, ContainerState
from runtimeproxy.hooks.rebuild import Listing
from runtimeproxy.hooks.reconcile import RECHECK_SECONDS, reconcile, reconcile_until_found
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.store import Store
from runtimeproxy.options import ProxyOptions
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def record(pod_id: str, name: str, attempt: int, state: ContainerState) -> ContainerRecord:
    info = hooks.ContainerResourceHookRequest(container_meta=hooks.ContainerMetadata(name=name, attempt=attempt))
    return container_record(pod_id, info, state=state)


@dataclass
class Runtime(StubRuntime):
    """What the runtime has now (read fresh by the reconciliation) and what it was asked to remove."""

    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    refuse: bool = False

    def __post_init__(self) -> None:
        super().__init__()

    async def list_objects(self) -> Listing:
        return Listing([], {cid: found.pod_id for cid, found in self.containers.items()})

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        return self.containers.get(container_id)

    async def remove_container(self, container_id: str) -> None:
        if self.refuse:
            raise RuntimeError("RemoveContainer: UNAVAILABLE")
        self.removed.append(container_id)
        del self.containers[container_id]


@dataclass
class Points:
    post_started: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    def changing(self) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def post_start_container(self, container_id: str, time_remaining: float | None) -> None:
        self.post_started.append(container_id)

    async def container_removed(self, container_id: str) -> None:
        self.forgotten.append(container_id)


def world(**containers: ContainerRecord) -> tuple[Store, Runtime]:
    """The store as the rebuild left it, and the runtime holding the same."""
    store = Store()
    for container_id, found in containers.items():
        store.put_container(container_id, found)
    return store, Runtime(containers=dict(containers))


def test_a_create_whose_answer_never_reached_the_kubelet_is_removed_while_it_stays_created() -> None:
    """Found by pod, name and attempt (the ID never came back); the kubelet's next attempt is left alone."""
    store, runtime = world(orphan=record("pod-1", "app", 0, ContainerState.CREATED),
                           retry=record("pod-1", "app", 1, ContainerState.RUNNING),
                           other=record("pod-2", "app", 0, ContainerState.CREATED))
    points = Points()
    done = asyncio.run(reconcile(store, runtime, points, [InFlight(CREATE_CONTAINER, "pod-1", "app", 0)]))
    assert done.removed == ["orphan"] and runtime.removed == ["orphan"] and points.forgotten == ["orphan"]
    assert set(runtime.containers) == {"retry", "other"} and points.post_started == []


def test_a_start_that_went_through_gets_its_post_start_and_one_that_never_did_is_removed() -> None:
    store, runtime = world(started=record("pod-1", "app", 0, ContainerState.RUNNING),
                           never=record("pod-1", "db", 0, ContainerState.CREATED))
    points = Points()
    calls = [InFlight(START_CONTAINER, container_id="started"), InFlight(START_CONTAINER, container_id="never")]
    done = asyncio.run(reconcile(store, runtime, points, calls))
    assert points.post_started == ["started"] and done.removed == ["never"]


def test_a_container_that_exited_is_left_to_the_kubelet() -> None:
    """containerd fails a start whose client went away (exit code 128): the kubelet restarts the container."""
    store, runtime = world(failed=record("pod-1", "app", 0, ContainerState.STOPPED))
    points = Points()
    done = asyncio.run(reconcile(store, runtime, points, [InFlight(START_CONTAINER, container_id="failed"),
                                                          InFlight(CREATE_CONTAINER, "pod-1", "app", 0)]))
    assert done.left == ["failed", "failed"] and runtime.removed == [] and points.post_started == []


def test_the_state_is_read_again_from_the_runtime_before_anything_is_done() -> None:
    """The store may be older than the runtime: the kubelet's call through the new proxy may have started it."""
    store, runtime = world(c=record("pod-1", "app", 0, ContainerState.CREATED))
    runtime.containers["c"] = record("pod-1", "app", 0, ContainerState.RUNNING)
    done = asyncio.run(reconcile(store, runtime, Points(), [InFlight(CREATE_CONTAINER, "pod-1", "app", 0)]))
    assert done.removed == [] and done.left == ["c"]


def test_a_refused_removal_is_logged_and_left() -> None:
    store, runtime = world(c=record("pod-1", "app", 0, ContainerState.CREATED))
    runtime.refuse = True
    points = Points()
    done = asyncio.run(reconcile(store, runtime, points, [InFlight(CREATE_CONTAINER, "pod-1", "app", 0)]))
    assert done.left == ["c"] and points.forgotten == []


def test_a_create_the_runtime_finished_late_is_found_on_a_recheck() -> None:
    store, runtime = world()
    slept: list[float] = []

    async def refill() -> None:  # the rebuild: the runtime finished the create since
        if slept:
            late = record("pod-1", "app", 0, ContainerState.CREATED)
            runtime.containers["late"] = late
            store.put_container("late", late)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    calls = [InFlight(CREATE_CONTAINER, "pod-1", "app", 0), InFlight(CREATE_CONTAINER, "pod-9", "gone", 0)]
    done = asyncio.run(reconcile_until_found(store, runtime, Points(), calls, refill, sleep))
    assert done.removed == ["late"] and [c.pod_id for c in done.not_found] == ["pod-9"]
    assert sum(slept) == RECHECK_SECONDS[-1]


def test_the_service_reads_the_predecessors_journal_and_reconciles_after_its_rebuild(tmp_path: Path) -> None:
    """The whole path in the core: the killed proxy's open entry, the next one's start, rebuild, reconcile."""
    state = tmp_path / "state"
    state.mkdir()
    killed = CallJournal(state)
    killed.start()
    in_flight = killed.in_flight(InFlight(CREATE_CONTAINER, "pod-1", "app", 0))
    in_flight.__enter__()  # never ended: the kill
    killed.close()
    runtime = Runtime(containers={"orphan": record("pod-1", "app", 0, ContainerState.CREATED)})
    options = ProxyOptions(listen_path=tmp_path / "rp.sock", runtime_path=tmp_path / "containerd.sock",
                           hook_config_dir=tmp_path / "hookserver.d", state_dir=state)

    async def restart() -> HookService:
        service = HookService(options)
        await service.start()
        HookPoints(service, runtime)
        service.start_rebuild()
        for _ in range(200):
            if service.reconciled is not None:
                break
            await asyncio.sleep(0.01)
        await service.stop()
        return service

    service = asyncio.run(restart())
    assert [call.call for call in service.interrupted] == [CREATE_CONTAINER]
    assert service.reconciled is not None and service.reconciled.removed == ["orphan"]
    assert runtime.removed == ["orphan"] and service.store.container("orphan") is None
    assert CallJournal(state).start() == []  # the journal starts afresh: nothing is reconciled twice
    del in_flight
