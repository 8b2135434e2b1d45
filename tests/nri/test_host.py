"""The proxy as an NRI runtime (nri.host) driven by the project's own NRI plugins (nrikit) over a real unix
socket, with the hook core's store: attach and Synchronize, CreateContainer adjustments applied / refused /
in conflict, timeouts that detach, reconnects that replace, notifications by subscription, updates of other
containers, evictions, notifications whose error fails the call, events the node's toggles turn off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from runtimeproxy import __version__
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.nri_plugins import PodResize, Subject
from runtimeproxy.hooks.model import ContainerState, Resources
from runtimeproxy.hooks.hook_messages import container_record, pod_record, with_request
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.hooks.trace import OK, SKIPPED_TOGGLE, TraceRecorder
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.nrihost import (adjusting, attached, connected, container_info, cpu_update, created, creation, host_on,
                                plugin, pod_info, pod_model, run, StubRuntime)
from tests.kits.nri import NriPlugin

CREATE = event_mask(nri.CREATE_CONTAINER)


def test_a_plugin_is_configured_as_nri_does_and_synchronized_with_the_store(socket_path: Path) -> None:
    store = Store()
    store.put_pod("pod-1", pod_record(pod_info()))
    store.put_pod("pod-skip", pod_record(pod_info("skipped"), skip_hooks=True))
    record = container_info()
    record.container_meta.id = "ctr-1"
    store.put_container("ctr-1", container_record("pod-1", record, {"io.kubernetes.container.name": "app"},
                                                 state=ContainerState.RUNNING, pid=4242))
    # Not listed, as containerd's NRI lists them: a stopped container, a container of a skip-labelled pod.
    store.put_container("ctr-stopped", container_record("pod-1", container_info("done"),
                                                       state=ContainerState.STOPPED))
    store.put_container("ctr-skip", container_record("pod-skip", container_info("s"), state=ContainerState.RUNNING))

    async def scenario() -> None:
        async with host_on(socket_path, store) as host:
            kit = NriPlugin(events=CREATE)
            await attached(host, kit)
            configure, = kit.requests("Configure")
            assert (configure.runtime_name, configure.runtime_version) == ("runtimeproxy", __version__)
            assert (configure.registration_timeout, configure.request_timeout) == (5000, 2000)
            sync, = kit.requests("Synchronize")
            assert [(p.id, p.name, p.namespace, p.linux.cgroup_parent) for p in sync.pods] == \
                [("pod-1", "web", "default", "/kubepods/burstable/poduid-web")]
            ctr, = sync.containers
            assert (ctr.id, ctr.pod_sandbox_id, ctr.name, list(ctr.env)) == ("ctr-1", "pod-1", "app", ["PATH=/bin"])
            assert ctr.linux.resources.cpu.shares.value == 512
            assert (dict(ctr.labels), ctr.state, ctr.pid) == \
                ({"io.kubernetes.container.name": "app"}, nri.CONTAINER_RUNNING, 4242)
            assert host.wants(nri_events.CREATE_CONTAINER) and not host.wants(nri_events.START_CONTAINER)
        await kit.shut_down.wait()
    run(scenario())


def test_adjustments_of_plugins_apply_in_index_order_each_seeing_the_previous(socket_path: Path) -> None:
    seen: list[dict[str, str]] = []

    async def second(kit: NriPlugin, request: Message) -> Message:
        seen.append(dict(request.container.annotations))  # type: ignore[attr-defined]
        return nri.CreateContainerResponse(adjust=nri.ContainerAdjustment(annotations={"-a": "", "b": "2"}))

    first = adjusting(nri.ContainerAdjustment(
        annotations={"first": "yes"}, env=[nri.KeyValue(key="FROM_NRI", value="1")],
        linux=nri.LinuxContainerAdjustment(
            oom_score_adj=nri.OptionalInt(value=-500),
            resources=nri.LinuxResources(
                cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=1024), cpus="0"),
                memory=nri.LinuxMemory(limit=nri.OptionalInt64(value=128 << 20)),
                hugepage_limits=[nri.HugepageLimit(page_size="2MB", limit=2 << 20)],
                unified={"memory.high": "100000000"}))))

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            late = plugin("late", "20", CREATE, CreateContainer=(nri.CreateContainerRequest, second))
            early = plugin("early", "10", CREATE, CreateContainer=(nri.CreateContainerRequest, first))
            await attached(host, late, early)
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert seen == [{"a": "1", "first": "yes"}]
            assert dict(result.request.container_annotations) == {"first": "yes", "b": "2"}
            assert dict(result.request.container_envs) == {"PATH": "/bin", "FROM_NRI": "1"}
            resources = result.request.container_resources
            assert (resources.cpu_shares, resources.cpuset_cpus, resources.memory_limit_in_bytes,
                    resources.oom_score_adj) == (1024, "0", 128 << 20, -500)
            assert [(h.page_size, h.limit) for h in resources.hugepage_limits] == [("2MB", 2 << 20)]
            assert dict(resources.unified) == {"memory.high": "100000000"}
    run(scenario())


def test_two_plugins_setting_one_field_fail_the_call(socket_path: Path) -> None:
    shares = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(
        cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=1024)))))

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("one", "10", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                           adjusting(shares))),
                           plugin("two", "20", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                         adjusting(shares))))
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert failed.value.plugin.name == "20-two"
            assert "plugins '10-one' and '20-two' both tried to set cpu shares" in str(failed.value)
    run(scenario())


@pytest.mark.parametrize(("adjust", "field"), [
    (nri.ContainerAdjustment(rlimits=[nri.POSIXRlimit(type="RLIMIT_NOFILE", hard=1, soft=1)]), "rlimits"),
    (nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(cgroups_path="/x")), "linux.cgroups_path"),
    (nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(
        pids=nri.LinuxPids(limit=10)))), "linux.resources.pids"),
    (nri.ContainerAdjustment(hooks=nri.Hooks(prestart=[nri.Hook(path="/bin/true")])), "hooks"),
])
def test_what_the_request_cannot_carry_is_refused_naming_plugin_and_field(
        socket_path: Path, adjust: nri.ContainerAdjustment, field: str) -> None:
    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("wide", "10", CREATE,
                                        CreateContainer=(nri.CreateContainerRequest, adjusting(adjust))))
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert failed.value.field == field
            assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION
            assert f"NRI plugin 10-wide set {field}" in str(failed.value)
    run(scenario())


def test_an_answer_hooks_validation_refuses_fails_the_call(socket_path: Path) -> None:
    bad = nri.ContainerAdjustment(env=[nri.KeyValue(key="BAD=NAME", value="x")])

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("bad", "10", CREATE,
                                        CreateContainer=(nri.CreateContainerRequest, adjusting(bad))))
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert failed.value.code is grpc.StatusCode.INTERNAL and "invalid answer" in str(failed.value)
    run(scenario())


def test_a_plugin_that_misses_the_request_timeout_is_detached_and_the_call_goes_on(socket_path: Path) -> None:
    release = asyncio.Event()

    async def stall(kit: NriPlugin, request: Message) -> Message:
        await release.wait()
        return nri.CreateContainerResponse()

    async def scenario() -> None:
        async with host_on(socket_path, request_timeout=0.2) as host:
            await attached(host, plugin("slow", "10", CREATE, CreateContainer=(nri.CreateContainerRequest, stall)))
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert result == creation().value()
            assert host.plugins == [] and not host.wants(nri_events.CREATE_CONTAINER)
            release.set()
    run(scenario())


@pytest.mark.parametrize("fail_request", [False, True])
@pytest.mark.parametrize("keep_connected", [False, True])
def test_a_timeout_does_what_the_plugin_s_failure_policy_says(
        socket_path: Path, fail_request: bool, keep_connected: bool) -> None:
    """containerd/nri v0.12.5's FailurePolicy: `fail_request` fails the call as an error answered would (the
    plugins after it are not asked), `keep_connected` leaves it attached after a timeout."""
    release = asyncio.Event()

    async def stall(kit: NriPlugin, request: Message) -> Message:
        await release.wait()
        return nri.CreateContainerResponse()

    slow = NriPlugin(name="slow", index="10", events=CREATE, failure_policy=nri.FailurePolicy(
        fail_request=fail_request, keep_connected=keep_connected),
        methods={"CreateContainer": (nri.CreateContainerRequest, stall)})
    after = plugin("after", "20", CREATE, CreateContainer=(nri.CreateContainerRequest, _empty_create))

    async def scenario() -> None:
        async with host_on(socket_path, request_timeout=0.2) as host:
            await attached(host, slow, after)
            if fail_request:
                with pytest.raises(HookFailed) as failed:
                    await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
                assert "10-slow" in str(failed.value) and "DEADLINE_EXCEEDED" in str(failed.value)
                assert after.requests("CreateContainer") == []
            else:
                assert await host.adjust(nri_events.CREATE_CONTAINER, creation(), None) == creation().value()
                assert len(after.requests("CreateContainer")) == 1
            outcome = "timeout" if keep_connected else "detached"
            assert host.stats.of("10-slow", nri_events.CREATE_CONTAINER).outcomes == {outcome: 1}
            assert [p.plugin_id for p in host.plugins] == (["10-slow", "20-after"] if keep_connected
                                                           else ["20-after"])
            release.set()
    run(scenario())


async def _empty_create(kit: NriPlugin, request: Message) -> Message:
    return nri.CreateContainerResponse()


def test_a_reconnecting_plugin_replaces_its_old_connection(socket_path: Path) -> None:
    async def scenario() -> None:
        async with host_on(socket_path) as host:
            old, new = NriPlugin(events=CREATE), NriPlugin(events=CREATE)
            await attached(host, old)
            first = host.plugins[0]
            await connected(host, new)
            while host.plugins == [first]:
                await asyncio.sleep(0.01)
            assert [session.plugin_id for session in host.plugins] == ["10-nrikit"]
            assert first.detached and "replaced" in (first.detached_reason or "")
    run(scenario())


def test_notifications_go_only_to_subscribers_and_stop_container_updates_reach_the_runtime(
        socket_path: Path) -> None:
    store = Store()
    store.put_container("ctr-other", container_record("pod-1", container_info("other")))
    sent: list[tuple[str, Resources]] = []

    async def updater(container_id: str, resources: Resources) -> None:
        sent.append((container_id, resources))

    async def stopped(kit: NriPlugin, request: Message) -> Message:
        return nri.StopContainerResponse(update=[cpu_update("ctr-other", 2048)])

    async def scenario() -> None:
        async with host_on(socket_path, store, StubRuntime(updater)) as host:
            starts = plugin("starts", "10", event_mask(nri.START_CONTAINER),
                            StartContainer=(nri.StartContainerRequest, _empty))
            stops = plugin("stops", "20", event_mask(nri.STOP_CONTAINER),
                           StopContainer=(nri.StopContainerRequest, stopped))
            await attached(host, starts, stops)
            subject = created()
            await host.notify(nri_events.START_CONTAINER, subject)
            await host.notify(nri_events.STOP_CONTAINER, subject)
            assert [name for name, _ in starts.received if name not in ("Configure", "Synchronize")] == \
                ["StartContainer"]
            assert [name for name, _ in stops.received if name not in ("Configure", "Synchronize")] == \
                ["StopContainer"]
            assert sent == [("ctr-other", Resources(cpu_shares=2048))]
            record = store.container("ctr-other")
            assert record is not None and record.resources is not None and record.resources.cpu_shares == 2048
            # An unsolicited update, while nothing waits on the plugin.
            answer = await stops.update_containers(cpu_update("ctr-other", 300), cpu_update("ctr-gone", 5))
            assert [update.container_id for update in answer.failed] == ["ctr-gone"]
            assert sent[-1] == ("ctr-other", Resources(cpu_shares=300))
    run(scenario())


async def _empty(kit: NriPlugin, request: Message) -> Message:
    return nri.Empty()


def test_an_update_of_the_container_itself_changes_the_update_request(socket_path: Path) -> None:
    async def update(kit: NriPlugin, request: Message) -> Message:
        return nri.UpdateContainerResponse(update=[cpu_update("ctr-1", 777), cpu_update("ctr-x", 1)])

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("upd", "10", event_mask(nri.UPDATE_CONTAINER),
                                        UpdateContainer=(nri.UpdateContainerRequest, update)))
            result = await host.adjust(nri_events.UPDATE_CONTAINER, created(), None)
            assert result.request.container_resources.cpu_shares == 777
    run(scenario())


def test_update_container_shows_the_current_resources_and_the_update_apart(socket_path: Path) -> None:
    """As containerd's NRI: the container as it runs (its spec's resources), the update in linux_resources."""
    current = container_record("pod-1", container_info(), {"io.kubernetes.container.name": "app"},
                              state=ContainerState.RUNNING)
    asked = container_info()
    asked.container_resources.cpu_shares = 1024

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            kit = plugin("upd", "10", event_mask(nri.UPDATE_CONTAINER),
                         UpdateContainer=(nri.UpdateContainerRequest, _updated))
            await attached(host, kit)
            subject = Subject("pod-1", pod_model(), "ctr-1", current)
            await host.adjust(nri_events.UPDATE_CONTAINER, subject, None, None,
                              ContainerValue(with_request(current, asked), projected=asked))
            request, = kit.requests("UpdateContainer")
            assert request.container.linux.resources.cpu.shares.value == 512  # type: ignore[attr-defined]
            assert request.linux_resources.cpu.shares.value == 1024  # type: ignore[attr-defined]
            assert request.linux_resources.cpu.HasField("quota")  # type: ignore[attr-defined]  # 0, as containerd
            assert (request.container.state, dict(request.container.labels)) == (  # type: ignore[attr-defined]
                nri.CONTAINER_RUNNING, {"io.kubernetes.container.name": "app"})
    run(scenario())


async def _updated(kit: NriPlugin, request: Message) -> Message:
    return nri.UpdateContainerResponse()


# --- evictions --------------------------------------------------------------------------------------------


def eviction(container_id: str, reason: str = "no room") -> nri.ContainerEviction:
    return nri.ContainerEviction(container_id=container_id, reason=reason)


def test_evictions_a_plugin_answers_or_sends_stop_those_containers_and_are_counted(socket_path: Path) -> None:
    store = Store()
    for cid in ("ctr-victim", "ctr-stubborn", "ctr-late"):
        store.put_container(cid, container_record("pod-1", container_info(cid), state=ContainerState.RUNNING))
    stopped: list[str] = []

    async def evictor(container_id: str) -> None:
        if container_id == "ctr-stubborn":
            raise RuntimeError("StopContainer: NOT_FOUND: gone")
        stopped.append(container_id)

    async def evicting(kit: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(evict=[eviction("ctr-victim"), eviction("ctr-stubborn"),
                                                  eviction("ctr-unknown")])

    async def scenario() -> None:
        async with host_on(socket_path, store, StubRuntime(evict=evictor)) as host:
            kit = plugin("evicts", "10", event_mask(nri.CREATE_CONTAINER, nri.STOP_CONTAINER),
                         CreateContainer=(nri.CreateContainerRequest, evicting),
                         StopContainer=(nri.StopContainerRequest, _stopped))
            await attached(host, kit)
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert result == creation().value()  # a failed eviction never fails the call (as containerd)
            assert stopped == ["ctr-victim"]
            answer = await kit.update_containers(evict=(eviction("ctr-late", "pressure"),))
            assert list(answer.failed) == [] and stopped == ["ctr-victim", "ctr-late"]
            # As containerd's own StopContainer, an eviction is a StopContainer event for the plugins.
            assert [request.container.id for request in kit.requests("StopContainer")] == \
                ["ctr-victim", "ctr-late"]  # type: ignore[attr-defined]
            # ... showing the container as it was before the stop, as containerd; the model then says stopped.
            assert {request.container.state for request in kit.requests("StopContainer")} == \
                {nri.CONTAINER_RUNNING}  # type: ignore[attr-defined]
            states = [ContainerState.STOPPED, ContainerState.RUNNING, ContainerState.STOPPED]
            while [store.container(cid).state for cid in ("ctr-victim", "ctr-stubborn",  # type: ignore[union-attr]
                                                          "ctr-late")] != states:
                await asyncio.sleep(0.01)  # the unsolicited one's StopContainer is told after the answer
            assert host.stats.evictions == {("10-evicts", "ok"): 2, ("10-evicts", "failed"): 1,
                                            ("10-evicts", "unknown"): 1}
    run(scenario())


async def _stopped(kit: NriPlugin, request: Message) -> Message:
    return nri.StopContainerResponse()


# --- failing notifications ----------------------------------------------------------------------------------


async def _refuse(kit: NriPlugin, request: Message) -> Message:
    raise TtrpcError(Code.INVALID_ARGUMENT, "no room on this node")


def test_an_error_answered_to_run_pod_sandbox_or_start_container_fails_the_call_others_are_logged(
        socket_path: Path) -> None:
    refuser = plugin("refuser", "10", event_mask(nri.RUN_POD_SANDBOX, nri.START_CONTAINER, nri.POST_START_CONTAINER),
                     RunPodSandbox=(nri.RunPodSandboxRequest, _refuse),
                     StartContainer=(nri.StartContainerRequest, _refuse),
                     PostStartContainer=(nri.PostStartContainerRequest, _refuse))
    after = plugin("after", "20", event_mask(nri.RUN_POD_SANDBOX), RunPodSandbox=(nri.RunPodSandboxRequest, _empty))

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, refuser, after)
            for event, point in ((nri_events.RUN_POD_SANDBOX, "NRI RunPodSandbox"),
                                 (nri_events.START_CONTAINER, "NRI StartContainer")):
                subject = created() \
                    if event == nri_events.START_CONTAINER else Subject("pod-1", pod_model())
                with pytest.raises(HookFailed) as failed:
                    await host.notify(event, subject)
                assert failed.value.point.name == point and failed.value.code is grpc.StatusCode.UNKNOWN
                assert "10-refuser" in str(failed.value) and "no room on this node" in str(failed.value)
                # NRI has no failure policy: the kubelet is told in NRI's terms (hooks.kinds' NRI row)
                assert f"NRI plugin 10-refuser (unix://{socket_path}) failed {event}, which fails the call as " \
                       "containerd's NRI does" in str(failed.value)
                assert "failure-policy" not in str(failed.value)
            assert after.requests("RunPodSandbox") == []  # the first error ends the event, as NRI's adaptation
            await host.notify(nri_events.POST_START_CONTAINER, created())
            assert host.stats.of("10-refuser", nri_events.POST_START_CONTAINER).outcomes == {"INVALID_ARGUMENT": 1}
            assert [p.plugin_id for p in host.plugins] == ["10-refuser", "20-after"]  # an error detaches no one
    run(scenario())


def test_an_event_the_toggles_turn_off_is_not_sent_to_that_plugin_and_the_trace_says_why(socket_path: Path) -> None:
    """`disable nri:10-a --hook CreateContainer`: 10-a is not sent CreateContainer (as if it had not subscribed; its
    other events still come), 20-b is; the trace shows 10-a skipped with the reason, as a hook plugin whose hook is
    off; once enabled again, 10-a's adjustment applies. A plugin toggled off whole has its own UpdateContainers
    answered as failed."""
    toggles, recorder = Toggles(None), TraceRecorder()
    events = event_mask(nri.CREATE_CONTAINER, nri.START_CONTAINER)
    first = NriPlugin(name="a", index="10", events=events, every_event=True, methods={"CreateContainer": (
        nri.CreateContainerRequest, adjusting(nri.ContainerAdjustment(annotations={"from-a": "yes"})))})
    second = plugin("b", "20", CREATE, CreateContainer=(nri.CreateContainerRequest, adjusting(nri.ContainerAdjustment(
        annotations={"from-b": "yes"}))))
    started = created()

    store = Store()
    sent: list[str] = []
    store.put_container("ctr-other", container_record("pod-1", container_info("other")))

    async def updater(container_id: str, resources: Resources) -> None:
        sent.append(container_id)

    async def scenario() -> None:
        async with host_on(socket_path, store, StubRuntime(updater), toggles=toggles, trace=recorder) as host:
            await attached(host, first, second)
            toggles.disable("nri:10-a", frozenset({nri_events.CREATE_CONTAINER}), "cpuset bug")
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert dict(result.request.container_annotations) == {"a": "1", "from-b": "yes"}
            await host.notify(nri_events.START_CONTAINER, started)
            assert first.requests("CreateContainer") == [] and len(first.requests("StartContainer")) == 1
            assert host.stats.of("10-a", nri_events.CREATE_CONTAINER).calls == 0  # not called, not counted

            toggles.disable("nri:20-b", frozenset(), "off too")
            assert not host.wants(nri_events.CREATE_CONTAINER) and host.wants(nri_events.START_CONTAINER)
            # Wholly off: what it asks on its own is not carried out either.
            answer = await second.update_containers(cpu_update("ctr-other", 300))
            assert [update.container_id for update in answer.failed] == ["ctr-other"] and sent == []
            answer = await first.update_containers(cpu_update("ctr-other", 300))
            assert list(answer.failed) == [] and sent == ["ctr-other"]  # 10-a still has an event on
            toggles.enable("nri:10-a", frozenset({nri_events.CREATE_CONTAINER}))
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert dict(result.request.container_annotations) == {"a": "1", "from-a": "yes"}
            assert len(first.requests("CreateContainer")) == 1 and len(second.requests("CreateContainer")) == 1
    run(scenario())
    pod = recorder.find("default/web")
    assert pod is not None
    skipped, applied = (entry.steps for entry in pod.entries if entry.hook == "NRI CreateContainer")
    assert [(s.plugin, s.outcome, s.details) for s in skipped] == [
        ("nri:10-a", SKIPPED_TOGGLE, "cpuset bug"), ("nri:20-b", OK, "")]
    assert [(s.plugin, s.outcome, s.details) for s in applied] == [
        ("nri:10-a", OK, ""), ("nri:20-b", SKIPPED_TOGGLE, "off too")]


def test_an_update_naming_100000_unknown_containers_takes_one_log_line_each_way(
        socket_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: one warning per ID on the event loop (every CRI call waited up to 1.1 s, the log grew 26 MB)."""
    unknown = [f"g{n}" for n in range(100_000)]  # short: the whole request fits one ttrpc message

    async def updater(container_id: str, resources: Resources) -> None:
        raise AssertionError("no known container was named")

    async def scenario() -> None:
        async with host_on(socket_path, runtime=StubRuntime(updater)) as host:
            kit = plugin("flood", "10", event_mask(nri.STOP_CONTAINER), StopContainer=(nri.StopContainerRequest,
                                                                                       _stopped))
            await attached(host, kit)
            caplog.clear()
            answer = await kit.update_containers(*(nri.ContainerUpdate(container_id=cid) for cid in unknown),
                                                 evict=tuple(eviction(cid, "flood") for cid in unknown))
            assert len(answer.failed) == len(unknown)
            assert host.stats.evictions == {("10-flood", "unknown"): len(unknown)}
    run(scenario())
    lines = [record.getMessage() for record in caplog.records if record.name.startswith("runtimeproxy.nri.")]
    assert lines == [
        "NRI plugin 10-flood asked to evict 100000 containers the proxy does not know (g0, g1, g2 and 99997 more): "
        "nothing done",
        "NRI plugin 10-flood: cannot update 100000 containers the proxy does not know (g0, g1, g2 and 99997 more)",
    ]


def test_a_pod_resize_sends_update_pod_sandbox_with_the_resources_and_its_error_fails_the_call(
        socket_path: Path) -> None:
    """containerd 2.2+'s UpdatePodSandboxResources: UpdatePodSandbox (an error fails the call) with the overhead
    and resources to be, then PostUpdatePodSandbox (an error is logged); a v0.6 plugin's own method either way."""
    resizer = plugin("resizer", "10", event_mask(nri.UPDATE_POD_SANDBOX, nri.POST_UPDATE_POD_SANDBOX),
                     UpdatePodSandbox=(nri.UpdatePodSandboxRequest, _empty),
                     PostUpdatePodSandbox=(nri.PostUpdatePodSandboxRequest, _refuse))
    refuser = plugin("refuser", "20", event_mask(nri.UPDATE_POD_SANDBOX),
                     UpdatePodSandbox=(nri.UpdatePodSandboxRequest, _refuse))
    resize = PodResize(Resources(cpu_shares=10), Resources(cpu_shares=2048, memory_limit_in_bytes=1 << 30))

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, resizer)
            assert host.statuses()[0].events == (nri_events.UPDATE_POD_SANDBOX, nri_events.POST_UPDATE_POD_SANDBOX)
            await host.notify(nri_events.UPDATE_POD_SANDBOX, Subject("pod-1", pod_model(), resize=resize))
            (sent,) = resizer.requests("UpdatePodSandbox")
            assert sent.pod.id == "pod-1" and sent.linux_resources.cpu.shares.value == 2048
            assert sent.linux_resources.memory.limit.value == 1 << 30
            assert sent.overhead_linux_resources.cpu.shares.value == 10
            await host.notify(nri_events.POST_UPDATE_POD_SANDBOX, Subject("pod-1", pod_model()))
            assert host.stats.of("10-resizer", nri_events.POST_UPDATE_POD_SANDBOX).outcomes == {
                "INVALID_ARGUMENT": 1}  # logged, the call goes on
            await attached(host, refuser)
            with pytest.raises(HookFailed) as failed:
                await host.notify(nri_events.UPDATE_POD_SANDBOX, Subject("pod-1", pod_model(), resize=resize))
            assert failed.value.point.name == "NRI UpdatePodSandbox" and "no room on this node" in str(failed.value)
    run(scenario())
