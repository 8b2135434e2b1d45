"""NRI plugins in the hook core's trace and shadow (nri.explain through nri.host): each event's calls kept in the
pod's trace with outcome, latency and field changes; refusals and failures with their reason; a plugin in shadow
called and traced but nothing of it carried out."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.message import Message

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.edits import BindMount, ContainerEdits, Device
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.hook_messages import container_record
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.hooks.trace import FAILED, OK, REFUSED, TraceEntry, TraceRecorder
from runtimeproxy.nri.explain import edit_changes
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.hooks.model import Resources
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.nrihost import (adjusting, attached, container_info, cpu_update, created, creation, host_on, plugin,
                                pod_model, run, StubRuntime)
from tests.kits.nri import NriPlugin

CREATE = event_mask(nri.CREATE_CONTAINER)


def shares_to(value: int) -> nri.ContainerAdjustment:
    return nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(
        cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=value)))))


def create_with_shares_plugin(socket_path: Path, recorder: TraceRecorder) -> None:
    """One CreateContainer through a host with one plugin setting CPU shares."""
    async def scenario() -> None:
        async with host_on(socket_path, trace=recorder) as host:
            await attached(host, plugin("cpu", "10", CREATE, CreateContainer=(
                nri.CreateContainerRequest, adjusting(shares_to(1024)))))
            await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
    run(scenario())


def entries(recorder: TraceRecorder) -> list[TraceEntry]:
    pod = recorder.find("default/web")
    assert pod is not None
    return list(pod.entries)


def changes(entry: TraceEntry, step: int) -> list[tuple[str, object, object]]:
    return [(change.field, change.before, change.after) for change in entry.steps[step].changes]


def test_an_adjustment_is_traced_field_by_field_under_the_plugins_toggle_name(socket_path: Path) -> None:
    recorder = TraceRecorder()
    create_with_shares_plugin(socket_path, recorder)
    entry, = entries(recorder)
    assert (entry.hook, entry.target, entry.result) == ("NRI CreateContainer", "container app", "sent to the runtime")
    step, = entry.steps
    assert (step.plugin, step.outcome, step.shadow) == ("nri:10-cpu", OK, False) and step.seconds > 0
    assert changes(entry, 0) == [("container_resources.cpu_shares", 512, 1024)]
    assert [(c.field, c.before, c.after) for c in entry.sent_changes] == [("container_resources.cpu_shares", 512, 1024)]
    assert "cpu_shares=512" in entry.request_line()


def test_a_conflict_is_traced_as_refused_with_its_reason_and_the_call_not_sent(socket_path: Path) -> None:
    recorder = TraceRecorder()

    async def scenario() -> None:
        async with host_on(socket_path, trace=recorder) as host:
            await attached(host, *(plugin(name, index, CREATE, CreateContainer=(
                nri.CreateContainerRequest, adjusting(shares_to(value))))
                for name, index, value in (("a", "10", 100), ("b", "20", 200))))
            with pytest.raises(HookFailed):
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
    run(scenario())
    entry, = entries(recorder)
    first, second = entry.steps
    assert first.outcome == OK and changes(entry, 0) == [("container_resources.cpu_shares", 512, 100)]
    assert (second.outcome, second.code) == (REFUSED, "conflict") and "both tried to set" in second.details
    assert entry.result.startswith("not sent: 20-b failed") and entry.sent_changes == ()


def test_notifications_are_traced_with_failures_and_what_a_plugin_asks_of_others(socket_path: Path) -> None:
    recorder = TraceRecorder()
    store = Store()
    store.put_container("ctr-other", container_record("pod-1", container_info("other")))

    async def failing(kit: NriPlugin, request: Message) -> Message:
        raise TtrpcError(Code.UNAVAILABLE, "busy")

    async def stopped(kit: NriPlugin, request: Message) -> Message:
        return nri.StopContainerResponse(update=[cpu_update("ctr-other", 64)])

    async def updater(container_id: str, resources: Resources) -> None:
        return None

    async def empty(kit: NriPlugin, request: Message) -> Message:
        return nri.Empty()

    async def scenario() -> None:
        async with host_on(socket_path, store, StubRuntime(updater), trace=recorder) as host:
            await attached(host, plugin("post", "10", event_mask(nri.POST_START_CONTAINER, nri.STOP_CONTAINER,
                                                                 nri.STOP_POD_SANDBOX),
                                        PostStartContainer=(nri.PostStartContainerRequest, failing),
                                        StopContainer=(nri.StopContainerRequest, stopped),
                                        StopPodSandbox=(nri.StopPodSandboxRequest, empty)))
            subject = created()
            await host.notify(nri_events.POST_START_CONTAINER, subject)
            await host.notify(nri_events.STOP_CONTAINER, subject)
            await host.notify(nri_events.STOP_POD_SANDBOX, Subject("pod-1", pod_model()))
    run(scenario())
    started, stopped_entry, pod_stopped = entries(recorder)
    assert started.hook == "NRI PostStartContainer" and started.target == "container app (ctr-1)"
    step, = started.steps
    assert (step.outcome, step.code, step.details) == (FAILED, "UNAVAILABLE", "busy")
    assert started.result == "notification: the call is unaffected"
    assert stopped_entry.steps[0].details == "update container ctr-other"
    assert pod_stopped.target == "pod" and pod_stopped.hook == "NRI StopPodSandbox"


def test_a_plugin_in_shadow_is_traced_but_nothing_of_it_is_carried_out(socket_path: Path) -> None:
    recorder = TraceRecorder()
    store = Store()
    store.put_container("ctr-other", container_record("pod-1", container_info("other")))
    done: list[str] = []

    async def updater(container_id: str, resources: Resources) -> None:
        done.append(f"update {container_id}")

    async def evictor(container_id: str) -> None:
        done.append(f"evict {container_id}")

    async def greedy(kit: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(adjust=shares_to(2048), update=[cpu_update("ctr-other", 2)],
                                           evict=[nri.ContainerEviction(container_id="ctr-other", reason="mine")])

    async def scenario() -> None:
        toggles = Toggles(None)
        toggles.set_shadow("nri:20-next", True, configured_shadow=False)
        async with host_on(socket_path, store, StubRuntime(updater, evictor), trace=recorder, toggles=toggles) as host:
            live = plugin("live", "10", CREATE, CreateContainer=(nri.CreateContainerRequest, adjusting(shares_to(1024))))
            trial = plugin("next", "20", CREATE, CreateContainer=(nri.CreateContainerRequest, greedy))
            await attached(host, live, trial)
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert result.request.container_resources.cpu_shares == 1024  # the live plugin's, never the shadow's
            answer = await trial.update_containers(cpu_update("ctr-other", 3), evict=(
                nri.ContainerEviction(container_id="ctr-other"),))
            assert [update.container_id for update in answer.failed] == ["ctr-other"]
            assert done == []
            calls = host.stats.of("20-next", nri_events.CREATE_CONTAINER)
            assert (calls.shadow_changes, calls.shadow_disagreements) == (1, 1)
            assert host.stats.evictions == {("20-next", "shadow"): 2}
    run(scenario())
    entry, = entries(recorder)
    live_step, shadow_step = entry.steps
    assert not live_step.shadow and shadow_step.shadow and shadow_step.outcome == OK
    assert changes(entry, 1) == [("container_resources.cpu_shares", 1024, 2048)]
    assert [(c.field, c.before, c.after) for c in shadow_step.disagreements] == \
        [("container_resources.cpu_shares", 1024, 2048)]
    assert "would evict container ctr-other (mine)" in shadow_step.details
    assert "in shadow: not carried out" in shadow_step.details


def test_a_shadow_plugins_failure_never_fails_the_call(socket_path: Path) -> None:
    async def refuse(kit: NriPlugin, request: Message) -> Message:
        raise TtrpcError(Code.INVALID_ARGUMENT, "no")

    async def scenario() -> None:
        toggles = Toggles(None)
        toggles.set_shadow("nri:10-trial", True, configured_shadow=False)
        async with host_on(socket_path, toggles=toggles) as host:
            await attached(host, plugin("trial", "10", event_mask(nri.CREATE_CONTAINER, nri.RUN_POD_SANDBOX),
                                        CreateContainer=(nri.CreateContainerRequest, refuse),
                                        RunPodSandbox=(nri.RunPodSandboxRequest, refuse)))
            assert await host.adjust(nri_events.CREATE_CONTAINER, creation(), None) == creation().value()
            await host.notify(nri_events.RUN_POD_SANDBOX, Subject("pod-1", pod_model()))
    run(scenario())


def test_nothing_is_traced_with_the_trace_off(socket_path: Path) -> None:
    recorder = TraceRecorder(entries_per_pod=0)
    create_with_shares_plugin(socket_path, recorder)
    assert recorder.pod_count == 0


def test_edits_a_plugin_made_are_told_in_words() -> None:
    before = ContainerEdits(args=("sh",), mounts=(BindMount("/etc/hosts", "/var/lib/pod/hosts"),))
    after = ContainerEdits(args=("/wrap", "sh"), mounts=(BindMount("/data", "/srv/data", readonly=True),),
                           devices=(Device("/dev/null", "/dev/null"),), rdt_class="gold")
    assert edit_changes(before, after, shadow=False) == [
        'set args ["sh"] -> ["/wrap", "sh"]', "remove mount /etc/hosts", "mount /srv/data at /data (ro)",
        "add device /dev/null (rwm)", 'set RDT class "" -> "gold"']
    assert edit_changes(before, after, shadow=True)[0].startswith("would set args")
    assert edit_changes(before, before, shadow=False) == []
    assert edit_changes(None, after, shadow=False) == []
