"""The NRI host's one lock and the core's sync gate, as containerd/nri's adaptation holds them: one event at a time
(so one call in flight per plugin), an attach (drop the old session, snapshot, Synchronize, insert) never between
a lifecycle call's event and its store write, and registrations of one plugin one after the other."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf.message import Message

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.store import ContainerRecord, Store
from runtimeproxy.hooks.syncgate import SyncGate
from runtimeproxy.nri.session import event_mask
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.nrihost import (attached, connected, container_info, created, creation, host_on, plugin, pod_info,
                                registered, run)
from tests.kits.nri import NriPlugin


def test_concurrent_events_reach_a_plugin_one_at_a_time(socket_path: Path) -> None:
    in_flight, most = 0, 0

    async def slow_post_start(kit: NriPlugin, request: Message) -> Message:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.005)
        in_flight -= 1
        return nri.Empty()

    async def scenario() -> None:
        store = Store()
        store.put_pod("pod-1", pod_record(pod_info()))
        async with host_on(socket_path, store) as host:
            kit = plugin("slow", "10", event_mask(nri.POST_START_CONTAINER),
                         PostStartContainer=(nri.PostStartContainerRequest, slow_post_start))
            await attached(host, kit)
            subject = created()
            await asyncio.gather(*(host.notify(nri_events.POST_START_CONTAINER, subject) for _ in range(20)))
            assert len(kit.requests("PostStartContainer")) == 20
    run(scenario())
    assert most == 1


def test_two_registrations_of_one_plugin_at_once_leave_one_live_session(socket_path: Path) -> None:
    async def scenario() -> None:
        async with host_on(socket_path) as host:
            twins = [NriPlugin(name="twin", index="10", events=event_mask(nri.CREATE_CONTAINER)) for _ in range(2)]
            await connected(host, *twins)
            while not any(session.plugin_id == "10-twin" for session in host.plugins):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # both registrations have gone through the lock
            live = [session for session in host.plugins if session.plugin_id == "10-twin" and not session.detached]
            assert len(live) == 1
    run(scenario())


def _created(pod_id: str = "pod-1", container_id: str = "ctr-1") -> ContainerRecord:
    info = container_info()
    info.container_meta.id = container_id
    return container_record(pod_id, info)


def test_a_plugin_attaching_during_a_create_finds_the_container_in_its_synchronize(socket_path: Path) -> None:
    """The create's CreateContainer event went out before the plugin attached, its store write comes after the
    plugin asked to attach: the attach waits for the store write, so the Synchronize holds the container."""
    async def scenario() -> tuple[list[str], list[str]]:
        store, gate = Store(), SyncGate()
        store.put_pod("pod-1", pod_record(pod_info()))
        async with host_on(socket_path, store, gate=gate) as host:
            relayed = asyncio.Event()
            late = NriPlugin(name="late", index="20", events=event_mask(nri.CREATE_CONTAINER))

            async def create() -> None:
                async with gate.changing():
                    await host.adjust(nri_events.CREATE_CONTAINER, creation(),
                                      None)
                    await relayed.wait()  # the runtime creates the container meanwhile
                    store.put_container("ctr-1", _created())

            creating = asyncio.create_task(create())
            await asyncio.sleep(0.01)
            await connected(host, late)
            await asyncio.sleep(0.1)
            assert late.requests("Synchronize") == []  # waits for the store write
            relayed.set()
            await creating
            await registered(host, late)
            (sync,) = late.requests("Synchronize")
            return [c.id for c in sync.containers], [name for name, _ in late.received]

    in_sync, received = run(scenario())  # type: ignore[misc]
    assert in_sync == ["ctr-1"] and "CreateContainer" not in received


def test_a_create_starting_while_a_plugin_synchronizes_sends_it_the_event(socket_path: Path) -> None:
    async def scenario() -> tuple[list[str], int]:
        store, gate = Store(), SyncGate()
        store.put_pod("pod-1", pod_record(pod_info()))
        sync_held = asyncio.Event()

        async def held_synchronize(kit: NriPlugin, request: Message) -> Message:
            await sync_held.wait()
            return nri.SynchronizeResponse()

        async with host_on(socket_path, store, gate=gate) as host:
            late = NriPlugin(name="late", index="20", events=event_mask(nri.CREATE_CONTAINER), every_event=True,
                             methods={"Synchronize": (nri.SynchronizeRequest, held_synchronize)})
            await connected(host, late)
            while not late.requests("Synchronize"):
                await asyncio.sleep(0.01)

            async def create() -> None:
                async with gate.changing():
                    await host.adjust(nri_events.CREATE_CONTAINER, creation(),
                                      None)
                    store.put_container("ctr-1", _created())

            creating = asyncio.create_task(create())
            await asyncio.sleep(0.05)
            assert not creating.done()  # waits for the synchronization
            sync_held.set()
            await creating
            (sync,) = late.requests("Synchronize")
            return [c.id for c in sync.containers], len(late.requests("CreateContainer"))

    in_sync, creates = run(scenario())  # type: ignore[misc]
    assert in_sync == [] and creates == 1
