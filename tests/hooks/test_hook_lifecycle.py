"""hooks.lifecycle and hooks.rebuild driven directly: each hook point's flow with in-process plugins and a backend
in miniature (a hooks.runtime.Runtime of dicts), neither a gRPC server in front nor HTTP. The rules here are the ones
both frontends share, so where CRI and Docker mode once disagreed, this is where the choice is pinned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import pytest

from tests.kits.hooks import PluginBench, ScriptedPlugin, container_request, pod_request, resources
from runtimeproxy.hooks.dispatcher import Dispatcher, HookFailed, HookPoint
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.context import HookContext
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.model import ContainerState, PodRecord, Resources
from runtimeproxy.hooks.nri_plugins import NO_NRI_PLUGINS, NriPlugins, PodResize, Subject
from runtimeproxy.hooks.journal import CallJournal
from runtimeproxy.hooks import chain_value
from runtimeproxy.hooks.lifecycle import PROJECTED_OFF_LOOP_ENTRIES, HookPoints, ResourceUpdate, projected
from runtimeproxy.hooks.missed import MissedPlugins
from runtimeproxy.hooks.rebuild import Listing, rebuild
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.hook_messages import container_record, pod_record, resources_of
from runtimeproxy.hooks.store import ContainerRecord, Store
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

SKIP = SkipRule("skip-hooks", "true")


@dataclass
class Backend:
    """A hooks.runtime.Runtime of dicts that counts its reads (and the sandboxes it was asked to remove)."""

    pods: dict[str, hooks.PodSandboxHookRequest] = field(default_factory=dict)
    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    name: str = "the backend"

    async def remove_sandbox(self, pod_id: str) -> None:
        self.removed.append(pod_id)

    async def remove_container(self, container_id: str) -> None:
        self.removed.append(container_id)
        self.containers.pop(container_id, None)

    async def list_objects(self) -> Listing:
        return Listing(list(self.pods), {cid: record.pod_id for cid, record in self.containers.items()})

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        self.reads.append(pod_id)
        pod = self.pods.get(pod_id)
        return pod_record(pod) if pod is not None else None

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        self.reads.append(container_id)
        return self.containers.get(container_id)


@dataclass
class Core:
    """What HookPoints takes of the hook service."""

    dispatcher: Dispatcher
    store: Store = field(default_factory=Store)
    skip: SkipRule = field(default_factory=lambda: SKIP)
    nri: NriPlugins = NO_NRI_PLUGINS
    missed: MissedPlugins = field(default_factory=MissedPlugins)
    journal: CallJournal = field(default_factory=lambda: CallJournal(None))
    resumer: object = None

    def use_runtime(self, runtime: Backend, pod_labels: Mapping[str, str] | None = None) -> HookContext:
        return HookContext(self.store, runtime, self.skip, pod_labels)  # type: ignore[arg-type]


class Points:
    def __init__(self, loop: LoopThread, base: Path) -> None:
        self.bench = PluginBench(loop, base)
        self.backend = Backend()
        self.core = Core(self.bench.dispatcher)
        self.points = HookPoints(self.core, self.backend)  # type: ignore[arg-type]

    def plugin(self, answers: dict, hooks_: list[str], policy: str = "Ignore") -> ScriptedPlugin:
        plugin = ScriptedPlugin(answers)
        self.bench.register(f"{len(self.bench.registry.plugins) + 10}-p.json", self.bench.serve(plugin), hooks_, policy)
        return plugin

    def run(self, work):  # type: ignore[no-untyped-def]
        return self.bench.loop.run(work)


@pytest.fixture
def core(loop_thread: LoopThread, tmp_path: Path) -> Iterator[Points]:
    points = Points(loop_thread, tmp_path)
    yield points
    points.bench.close()


def bare_request() -> hooks.ContainerResourceHookRequest:
    """The container part of a hook request only (no pod part)."""
    request = container_request()
    for name in ("pod_meta", "pod_resources", "pod_annotations", "pod_labels", "pod_cgroup_parent"):
        request.ClearField(name)
    return request


def bare_container(edits: ContainerEdits | None = None, labels: Mapping[str, str] | None = None) -> ContainerRecord:
    """The container as a frontend decodes it: its own part, its labels and edits (no pod part)."""
    return container_record("", bare_request(), labels, edits)


def move_pod(_: hooks.PodSandboxHookRequest, __: object) -> hooks.PodSandboxHookResponse:
    return hooks.PodSandboxHookResponse(cgroup_parent="/kubepods/koord-be")


# --- PreRunPodSandbox ---------------------------------------------------------------------------------


def test_a_pod_the_plugins_changed_is_recorded_as_changed(core: Points) -> None:
    core.plugin({"PreRunPodSandbox": move_pod}, ["PreRunPodSandbox"])
    run = core.run(core.points.pre_run_pod_sandbox(pod_record(pod_request()), None))
    assert run.changed and run.request.cgroup_parent == "/kubepods/koord-be"
    core.run(core.points.pod_sandbox_ran("p1", run))
    record = core.core.store.pod("p1")
    assert record is not None and record.cgroup_parent == "/kubepods/koord-be" and not record.skip_hooks


def test_a_pod_with_the_skip_label_gets_no_hooks_and_is_recorded_so(core: Points) -> None:
    plugin = core.plugin({"PreRunPodSandbox": move_pod}, ["PreRunPodSandbox", "PreCreateContainer"], "Fail")
    pod = pod_request()
    pod.labels["skip-hooks"] = "true"
    run = core.run(core.points.pre_run_pod_sandbox(pod_record(pod), None))
    assert not run.changed and run.skip_hooks
    core.run(core.points.pod_sandbox_ran("p1", run))
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    assert plugin.seen == [] and not creation.changed and creation.cgroup_parent == ""


def test_a_fail_policy_failure_raises_the_one_core_exception(core: Points) -> None:
    core.bench.register("10-dead.json", core.bench.socket("nobody"), ["PreRunPodSandbox"], "Fail")
    with pytest.raises(HookFailed) as raised:
        core.run(core.points.pre_run_pod_sandbox(pod_record(pod_request()), None))
    assert raised.value.plugin.name == "10-dead.json" and raised.value.code is grpc.StatusCode.UNAVAILABLE
    assert len(core.core.store) == 0


# --- PreCreateContainer -------------------------------------------------------------------------------


def test_the_pod_part_is_filled_from_the_recorded_pod(core: Points) -> None:
    plugin = core.plugin({}, ["PreCreateContainer"])
    core.core.store.put_pod("p1", pod_record(pod_request()))
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert seen.pod_meta == pod_request().pod_meta and dict(seen.pod_labels) == dict(pod_request().labels)
    assert seen.pod_cgroup_parent == pod_request().cgroup_parent and seen.pod_resources == pod_request().resources
    core.run(core.points.container_created("c-9", creation))
    record = core.core.store.container("c-9")
    assert record is not None and record.pod_id == "p1" and record.id == "c-9"


def test_a_pod_the_proxy_does_not_know_still_gets_its_containers_hooks(core: Points) -> None:
    """Both modes: the pod's context is what the frontend's request says of it (CRI: sandbox_config; Docker:
    the container's name and cgroup parent); the backend was asked first."""
    plugin = core.plugin({}, ["PreCreateContainer"])
    sandbox = hooks.PodSandboxHookRequest(pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1"),
                                          cgroup_parent="/kubepods/pod-u-1")
    creation = core.run(core.points.pre_create_container("p-unknown", bare_container(), None, lambda: pod_record(sandbox)))
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert seen.pod_meta.uid == "u-1" and seen.pod_cgroup_parent == "/kubepods/pod-u-1"
    assert creation.cgroup_parent == "/kubepods/pod-u-1" and core.backend.reads == ["p-unknown"]


def test_the_later_hooks_of_a_container_of_a_pod_the_proxy_does_not_know_carry_its_create_requests_pod(
        core: Points) -> None:
    """Until the store can find the pod, the pod's part of the container's requests is what its create showed."""
    plugin = core.plugin({}, ["PreStartContainer"])
    sandbox = hooks.PodSandboxHookRequest(pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1"),
                                          cgroup_parent="/kubepods/pod-u-1")
    creation = core.run(core.points.pre_create_container("p-unknown", bare_container(), None, lambda: pod_record(sandbox)))
    core.run(core.points.container_created("c-9", creation))
    core.run(core.points.pre_start_container("c-9", None))
    (seen,) = plugin.seen_by("PreStartContainer")
    assert seen.pod_meta.uid == "u-1" and seen.pod_cgroup_parent == "/kubepods/pod-u-1"
    core.backend.pods["p-unknown"] = pod_request()  # found now: the store's record wins
    core.run(core.points.pre_start_container("c-9", None))
    assert plugin.seen_by("PreStartContainer")[1].pod_meta == pod_request().pod_meta


def test_an_unknown_pod_with_the_skip_label_in_its_request_gets_no_hooks(core: Points) -> None:
    plugin = core.plugin({}, ["PreCreateContainer"], "Fail")
    sandbox = hooks.PodSandboxHookRequest(labels={"skip-hooks": "true"}, cgroup_parent="/kubepods/x")
    creation = core.run(core.points.pre_create_container("p-unknown", bare_container(), None, lambda: pod_record(sandbox)))
    assert plugin.seen == [] and creation.cgroup_parent == ""


def test_a_pod_moved_by_pre_run_pod_sandbox_takes_its_containers_along_without_create_plugins(core: Points) -> None:
    core.plugin({"PreRunPodSandbox": move_pod}, ["PreRunPodSandbox"])
    core.run(core.points.pod_sandbox_ran("p1", core.run(core.points.pre_run_pod_sandbox(pod_record(pod_request()), None))))
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    assert not creation.changed and creation.cgroup_parent == "/kubepods/koord-be"


def test_a_pod_recorded_before_a_restart_is_read_from_the_backend_for_its_containers(core: Points) -> None:
    moved = pod_request()
    moved.cgroup_parent = "/kubepods/koord-be"
    core.backend.pods["p1"] = moved
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    assert creation.cgroup_parent == "/kubepods/koord-be" and core.core.store.pod("p1") is not None


# --- PreStartContainer, PreUpdateContainerResources, post-hooks -----------------------------------------


def test_nothing_is_looked_up_for_a_point_nobody_hooks(core: Points) -> None:
    core.run(core.points.pre_start_container("c1", None))
    core.run(core.points.post_start_container("c1", None))
    assert core.run(core.points.pre_update_container_resources("c1", resources(cpu_shares=2), {}, None)) is None
    core.run(core.points.post_stop_container("c1", None))
    core.run(core.points.post_stop_pod_sandbox("p1", None))
    core.run(core.points.post_stop("x1", None))
    assert core.backend.reads == []


def test_an_update_hook_sees_the_effective_resources_and_annotations(core: Points) -> None:
    """Both modes: the recorded resources with the sparse update applied, the recorded annotations with the
    update's (a Docker update has none)."""
    def add_period(request: hooks.ContainerResourceHookRequest, _: object) -> hooks.ContainerResourceHookResponse:
        changed = hooks.LinuxContainerResources()
        changed.CopyFrom(request.container_resources)
        changed.cpu_period = 50_000
        return hooks.ContainerResourceHookResponse(container_resources=changed, container_annotations={"v": "2"})

    plugin = core.plugin({"PreUpdateContainerResources": add_period}, ["PreUpdateContainerResources"])
    recorded = bare_request()
    recorded.container_resources.CopyFrom(resources(cpu_shares=2, memory_limit_in_bytes=96 << 20))
    core.core.store.put_container("c1", container_record("p1", recorded))
    update = core.run(core.points.pre_update_container_resources("c1", resources_of(resources(cpu_shares=300)),
                                                                 {"u": "1"}, None))
    (seen,) = plugin.seen_by("PreUpdateContainerResources")
    assert seen.container_resources == resources(cpu_shares=300, memory_limit_in_bytes=96 << 20)
    assert seen.container_annotations["u"] == "1" and seen.container_annotations["c"] == "1"
    assert isinstance(update, ResourceUpdate) and update.changed
    assert update.resource_changes() == Resources(cpu_period=50_000)  # the echoed values are not sent
    assert update.annotation_changes() == {"v": "2"}
    core.run(core.points.container_resources_updated("c1", Resources(cpu_shares=300, cpu_period=50_000), {"u": "1"}))
    record = core.core.store.container("c1")
    assert record is not None and record.resources == resources_of(resources(
        cpu_shares=300, cpu_period=50_000, memory_limit_in_bytes=96 << 20))


def test_a_stop_of_a_shared_id_runs_the_hook_of_what_it_is(core: Points) -> None:
    plugin = core.plugin({}, ["PostStopContainer", "PostStopPodSandbox"])
    core.core.store.put_pod("p1", pod_record(pod_request()))
    core.core.store.put_container("c1", container_record("p1", bare_request()))
    core.run(core.points.post_stop("c1", None))
    core.run(core.points.post_stop("p1", None))
    assert [name for name, _ in plugin.seen] == ["PostStopContainer", "PostStopPodSandbox"]
    assert plugin.seen_by("PostStopContainer")[0].pod_meta == pod_request().pod_meta


def test_a_removed_pod_takes_its_containers_along(core: Points) -> None:
    core.core.store.put_pod("p1", pod_record(pod_request()))
    core.core.store.put_container("c1", container_record("p1", bare_request()))
    core.run(core.points.pod_sandbox_removed("p1"))
    assert len(core.core.store) == 0


# --- the store rebuild ----------------------------------------------------------------------------------


def test_the_rebuild_records_what_the_backend_runs_with_the_skip_rule(core: Points) -> None:
    skipped = pod_request()
    skipped.labels["skip-hooks"] = "true"
    core.backend.pods.update({"p1": pod_request(), "p2": skipped})
    core.backend.containers["c1"] = container_record("p1", bare_request())
    core.run(rebuild(core.points.context, core.backend))
    p1, p2 = core.core.store.pod("p1"), core.core.store.pod("p2")
    assert p1 is not None and not p1.skip_hooks and p2 is not None and p2.skip_hooks
    assert core.core.store.container("c1") is not None


def test_the_rebuild_never_overwrites_what_a_call_recorded_meanwhile(core: Points) -> None:
    """Both modes (Docker mode used to overwrite): a record put by a live call is at least as new."""
    core.backend.pods["p1"] = pod_request()
    core.backend.containers["c1"] = container_record("p1", bare_request())
    newer_pod = pod_request()
    newer_pod.cgroup_parent = "/kubepods/new"
    newer_container = bare_request()
    newer_container.container_resources.cpu_shares = 4242
    core.core.store.put_pod("p1", pod_record(newer_pod))
    core.core.store.put_container("c1", container_record("p1", newer_container))
    core.run(rebuild(core.points.context, core.backend))
    pod, container = core.core.store.pod("p1"), core.core.store.container("c1")
    assert pod is not None and pod.cgroup_parent == "/kubepods/new"
    assert container is not None and container.resources is not None and container.resources.cpu_shares == 4242


# --- plugins of another protocol (hooks.nri_plugins: NRI) -----------------------------------------------------


@dataclass
class RecordingNri:
    """An NriPlugins that wants every event, records them, and adds an annotation on CreateContainer."""

    events: list[tuple[str, str, str]] = field(default_factory=list)

    def wants(self, event: str) -> bool:
        return True

    def attached(self) -> bool:
        return True

    async def adjust(self, event: str, subject: Subject, time_remaining: float | None, chain: object = None,
                     value: ContainerValue | None = None) -> ContainerValue:
        assert subject.container is not None and value is not None
        self.events.append((event, subject.pod_id, subject.container_id))
        return value.with_container(replace(value.container, annotations={**value.container.annotations,
                                                                            "extra": event}))

    async def notify(self, event: str, subject: Subject) -> None:
        self.events.append((event, subject.pod_id, subject.container_id))


def test_nri_plugins_see_every_event_after_the_hook_chain_and_only_recorded_removals(core: Points) -> None:
    core.plugin({"PreCreateContainer": lambda request, _: hooks.ContainerResourceHookResponse(
        container_annotations={"hooked": "yes"})}, ["PreCreateContainer"])
    recorder = core.core.nri = RecordingNri()
    points = core.points
    core.run(points.pod_sandbox_ran("p1", core.run(points.pre_run_pod_sandbox(pod_record(pod_request()), None))))
    creation = core.run(points.pre_create_container("p1", bare_container(), None))
    assert creation.changed and creation.request.container_annotations["extra"] == nri_events.CREATE_CONTAINER
    assert creation.request.container_annotations["hooked"] == "yes"  # the hook chain ran first
    core.run(points.container_created("c1", creation))
    core.run(points.pre_start_container("c1", None))
    core.run(points.post_start_container("c1", None))
    update = core.run(points.pre_update_container_resources("c1", resources(cpu_shares=2), {}, None))
    assert update is not None
    core.run(points.container_resources_updated("c1", resources(cpu_shares=2), {}))
    core.run(points.post_stop("c1", None))  # Docker's shared-ID stop
    core.run(points.post_stop("p1", None))
    # Docker's remove: one ID, both removals; only the recorded kind is an event.
    core.run(points.pod_sandbox_removed("c1"))
    core.run(points.container_removed("c1"))
    core.run(points.container_removed("c-unknown"))
    core.run(points.pod_sandbox_removed("p1"))
    assert recorder.events == [
        (nri_events.RUN_POD_SANDBOX, "p1", ""), (nri_events.CREATE_CONTAINER, "p1", ""),
        (nri_events.POST_CREATE_CONTAINER, "p1", "c1"), (nri_events.START_CONTAINER, "p1", "c1"),
        (nri_events.POST_START_CONTAINER, "p1", "c1"), (nri_events.UPDATE_CONTAINER, "p1", "c1"),
        (nri_events.POST_UPDATE_CONTAINER, "p1", "c1"), (nri_events.STOP_CONTAINER, "p1", "c1"),
        (nri_events.STOP_POD_SANDBOX, "p1", ""), (nri_events.REMOVE_CONTAINER, "p1", "c1"),
        (nri_events.REMOVE_POD_SANDBOX, "p1", ""),
    ]


def test_the_decoded_edits_are_shown_to_an_nri_plugin_and_come_back_as_it_left_them(core: Points) -> None:
    seen = ContainerEdits(args=("/bin/sh",), rdt_class="gold")
    points = core.points
    creation = core.run(points.pre_create_container("p1", bare_container(seen), None))
    assert creation.edits == seen and creation.changed_edits() == frozenset()  # no NRI plugin: nothing to write
    assert creation.decoded_edits == seen

    class EditingNri(RecordingNri):
        async def adjust(self, event: str, subject: Subject, time_remaining: float | None, chain: object = None,
                         value: ContainerValue | None = None) -> ContainerValue:
            assert value is not None and value.container.edits == seen
            value = value.with_container(replace(value.container, edits=replace(seen, args=("/bin/true",))))
            return await super().adjust(event, subject, time_remaining, chain, value)

    core.core.nri = EditingNri()
    creation = core.run(points.pre_create_container("p1", bare_container(seen), None))
    assert creation.decoded_edits == seen and creation.edits is not None and creation.edits.args == ("/bin/true",)
    assert creation.changed_edits() == frozenset({"args"})


@dataclass
class AttachedElsewhere(RecordingNri):
    """An attached NRI plugin subscribed to no container event: it may see the container's edits later."""

    def wants(self, event: str) -> bool:
        return False


def test_a_frontend_decodes_the_edits_with_the_image_only_while_an_nri_plugin_is_attached(core: Points) -> None:
    assert not core.points.edits_want_image()  # no plugin: the image is never read
    core.core.nri = AttachedElsewhere()
    assert core.points.edits_want_image()  # any attached plugin may see the argv (a later event, Synchronize)
    core.core.nri = RecordingNri()
    assert core.points.edits_want_image()


@dataclass
class FailingNri(RecordingNri):
    """Fails RunPodSandbox and StartContainer as an NRI plugin answering an error does (nri.host raises
    HookFailed)."""

    async def notify(self, event: str, subject: Subject) -> None:
        await super().notify(event, subject)
        if event in (nri_events.RUN_POD_SANDBOX, nri_events.START_CONTAINER):
            point = HookPoint(f"NRI {event}", hooks.PodSandboxHookRequest, hooks.PodSandboxHookResponse, None)
            raise HookFailed(point, NamedPlugin("10-refuser", Path("/run/nri.sock")), grpc.StatusCode.UNKNOWN,
                             "INVALID_ARGUMENT: no room")


@dataclass(frozen=True)
class NamedPlugin:
    name: str
    endpoint: Path


def test_an_nri_plugin_failing_run_pod_sandbox_fails_it_and_the_pod_is_stopped_removed_and_forgotten(
        core: Points) -> None:
    recorder = core.core.nri = FailingNri()
    points = core.points
    run = core.run(points.pre_run_pod_sandbox(pod_record(pod_request()), None))
    with pytest.raises(HookFailed) as failed:
        core.run(points.pod_sandbox_ran("p1", run))
    assert "10-refuser" in str(failed.value) and failed.value.code is grpc.StatusCode.UNKNOWN
    # As containerd's NRI integration: the plugins hear the pod stopped and was removed.
    assert recorder.events == [(nri_events.RUN_POD_SANDBOX, "p1", ""), (nri_events.STOP_POD_SANDBOX, "p1", ""),
                               (nri_events.REMOVE_POD_SANDBOX, "p1", "")]
    assert core.core.store.pod("p1") is None


def test_an_nri_plugin_failing_start_container_fails_the_start_and_the_plugins_hear_it_stopped(
        core: Points) -> None:
    core.core.store.put_pod("p1", pod_record(pod_request()))
    core.core.store.put_container("c1", container_record("p1", container_request()))
    recorder = core.core.nri = FailingNri()
    with pytest.raises(HookFailed):
        core.run(core.points.pre_start_container("c1", None))
    assert recorder.events == [(nri_events.START_CONTAINER, "p1", "c1"), (nri_events.STOP_CONTAINER, "p1", "c1")]


def test_a_pod_resize_is_heard_before_and_after_and_the_store_records_the_new_resources(core: Points) -> None:
    core.core.store.put_pod("p1", pod_record(pod_request()))
    heard: list[tuple[str, PodResize | None, int]] = []

    class ResizeNri(RecordingNri):
        async def notify(self, event: str, subject: Subject) -> None:
            assert subject.pod is not None
            heard.append((event, subject.resize, subject.pod.resources.cpu_shares))

    core.core.nri = ResizeNri()
    resize = PodResize(None, Resources(cpu_shares=2048))
    core.run(core.points.pre_update_pod_sandbox_resources("p1", resize))
    core.run(core.points.pod_sandbox_resources_updated("p1", resize))
    # As containerd 2.2+: UpdatePodSandbox shows the pod as it is with the resources to be; the store records
    # them as containerd's sandbox status does, while every event's pod (PostUpdatePodSandbox's too) keeps showing
    # the sandbox config's resources, as containerd's NRI does.
    assert heard == [(nri_events.UPDATE_POD_SANDBOX, resize, 1024),
                     (nri_events.POST_UPDATE_POD_SANDBOX, None, 1024)]
    record = core.core.store.pod("p1")
    assert record is not None and record.resized_overhead is None
    assert record.resized_resources is not None and record.resized_resources.cpu_shares == 2048


def test_an_nri_plugin_failing_update_pod_sandbox_fails_the_resize(core: Points) -> None:
    core.core.store.put_pod("p1", pod_record(pod_request()))

    class RefusingResize(RecordingNri):
        async def notify(self, event: str, subject: Subject) -> None:
            await super().notify(event, subject)
            point = HookPoint(f"NRI {event}", hooks.PodSandboxHookRequest, hooks.PodSandboxHookResponse, None)
            raise HookFailed(point, NamedPlugin("10-refuser", Path("/run/nri.sock")), grpc.StatusCode.UNKNOWN,
                             "INVALID_ARGUMENT: too big")

    core.core.nri = RefusingResize()
    with pytest.raises(HookFailed):
        core.run(core.points.pre_update_pod_sandbox_resources("p1", PodResize(None, Resources(cpu_shares=4096))))
    record = core.core.store.pod("p1")
    assert record is not None and record.resources is not None and record.resources.cpu_shares == 1024  # unchanged


# --- the model: what the store records of a container over its life ---------------------------------------


def test_the_model_records_labels_edits_and_state_from_create_to_stop(core: Points) -> None:
    told: list[tuple[str, ContainerState]] = []
    points, store = core.points, core.core.store
    core.run(points.pod_sandbox_ran("p1", core.run(points.pre_run_pod_sandbox(pod_record(pod_request()), None))))
    labels = {"io.kubernetes.container.name": "app"}
    decoded = ContainerEdits(rdt_class="gold")  # no NRI plugin attached: decoded without the image's argv
    creation = core.run(points.pre_create_container("p1", bare_container(decoded, labels), None))
    core.run(points.container_created("c1", creation))
    record = store.container("c1")
    assert record is not None and record.labels == labels and record.state is ContainerState.CREATED
    assert record.edits == decoded and record.created_ns > 0

    class StateRecordingNri(RecordingNri):
        async def notify(self, event: str, subject: Subject) -> None:
            if subject.container is not None:
                told.append((event, subject.container.state))

    core.core.nri = StateRecordingNri()
    core.run(points.pre_start_container("c1", None))
    core.run(points.post_start_container("c1", None))
    assert record.state is ContainerState.RUNNING
    core.run(points.post_stop_container("c1", None))
    # StopContainer shows the state before the stop (containerd's NRI does), the store then says stopped.
    assert told == [(nri_events.START_CONTAINER, ContainerState.CREATED), (nri_events.POST_START_CONTAINER,
                                                                      ContainerState.RUNNING),
                    (nri_events.STOP_CONTAINER, ContainerState.RUNNING)]
    assert record.state is ContainerState.STOPPED and record.finished_ns >= record.started_ns > 0
    core.run(points.post_stop_pod_sandbox("p1", None))
    pod = store.pod("p1")
    assert pod is not None and not pod.ready


def test_the_model_records_the_edits_the_nri_plugins_left(core: Points) -> None:
    class EditingNri(RecordingNri):
        async def adjust(self, event: str, subject: Subject, time_remaining: float | None, chain: object = None,
                         value: ContainerValue | None = None) -> ContainerValue:
            assert subject.container is not None and value is not None
            assert subject.container.labels == {"l": "1"} and subject.container.state is ContainerState.UNKNOWN
            value = value.with_container(replace(value.container, edits=ContainerEdits(args=("/bin/true",))))
            return await super().adjust(event, subject, time_remaining, chain, value)

    points, store = core.points, core.core.store
    core.core.nri = EditingNri()
    decoded = ContainerEdits(args=("/entry", "cmd"))
    creation = core.run(points.pre_create_container("p1", bare_container(decoded, {"l": "1"}), None))
    core.run(points.container_created("c1", creation))
    record = store.container("c1")
    assert record is not None and record.edits == ContainerEdits(args=("/bin/true",))


@pytest.mark.parametrize("skip", [False, True], ids=["attached elsewhere", "skip-labelled pod"])
def test_the_model_records_the_decoded_edits_when_no_nri_plugin_took_part_in_the_create(
        core: Points, skip: bool) -> None:
    core.core.nri = AttachedElsewhere()
    pod = pod_request()
    if skip:
        pod.labels["skip-hooks"] = "true"
    points, store = core.points, core.core.store
    core.run(points.pod_sandbox_ran("p1", core.run(points.pre_run_pod_sandbox(pod_record(pod), None))))
    decoded = ContainerEdits(args=("/entry", "cmd"), rdt_class="gold")
    creation = core.run(points.pre_create_container("p1", bare_container(decoded), None))
    assert creation.edits == decoded and creation.changed_edits() == frozenset()
    core.run(points.container_created("c1", creation))
    record = store.container("c1")
    assert record is not None and record.edits == decoded


def test_a_docker_stop_nobody_hooks_still_records_the_container_stopped(core: Points) -> None:
    store = core.core.store
    store.put_container("c1", ContainerRecord("p1", state=ContainerState.RUNNING))
    core.run(core.points.post_stop("c1", None))
    record = store.container("c1")
    assert record is not None and record.state is ContainerState.STOPPED


def test_a_started_container_s_pid_is_read_back_only_while_an_nri_plugin_is_attached(core: Points) -> None:
    store, backend = core.core.store, core.backend
    backend.containers["c1"] = ContainerRecord("p1", state=ContainerState.RUNNING, pid=4242)
    for cid in ("c1", "c2"):
        store.put_container(cid, ContainerRecord("p1", state=ContainerState.CREATED))
    core.run(core.points.post_start_container("c1", None))
    assert backend.reads == [] and store.container("c1").pid == 0  # type: ignore[union-attr]
    core.core.nri = RecordingNri()
    core.run(core.points.post_start_container("c1", None))
    assert store.container("c1").pid == 4242  # type: ignore[union-attr]
    core.run(core.points.post_start_container("c2", None))  # the runtime does not know it: no pid
    record = store.container("c2")
    assert record is not None and record.pid == 0 and record.state is ContainerState.RUNNING


def test_records_of_pods_carry_the_labels_the_frontend_s_runtime_adds(core: Points) -> None:
    points = HookPoints(core.core, core.backend, {"io.cri-containerd.kind": "sandbox"})  # type: ignore[arg-type]
    core.run(points.pod_sandbox_ran("p1", core.run(points.pre_run_pod_sandbox(pod_record(pod_request()), None))))
    core.backend.pods["p2"] = pod_request()
    for pod_id in ("p1", "p2"):  # recorded at RunPodSandbox, and read back from the runtime
        record = core.run(points.context.pod(pod_id))
        assert record is not None and record.all_labels()["io.cri-containerd.kind"] == "sandbox"
        assert "io.cri-containerd.kind" not in record.labels  # never in what hook plugins are sent


# --- plugins missed under Ignore ----------------------------------------------------------------------


def test_a_pod_and_a_container_created_while_a_plugin_is_down_are_noted_until_removed(core: Points) -> None:
    """Under Ignore a dead plugin's answer is missing from what the runtime created: noted per object (for
    status and the metrics), with the hook and the plugin, and forgotten with the object."""
    core.bench.register("10-down.json", core.bench.socket("nobody"), ["PreRunPodSandbox", "PreCreateContainer"])
    core.plugin({}, ["PreCreateContainer"])  # 11-p.json answers: it is not missed
    run = core.run(core.points.pre_run_pod_sandbox(pod_record(pod_request()), None))
    assert run.missed == ("10-down.json",)
    core.run(core.points.pod_sandbox_ran("p1", run))
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    assert creation.missed == ("10-down.json",)
    core.run(core.points.container_created("c1", creation))
    missed = core.core.missed
    assert len(missed) == 2 and missed.by_plugin() == {"10-down.json": 2}
    newest, pod = missed.newest()
    assert (newest.object_id, newest.pod_id, newest.container, newest.hook, newest.plugins) == (
        "c1", "p1", "app", "PreCreateContainer", ("10-down.json",))
    assert (pod.object_id, pod.container, pod.hook) == ("p1", "", "PreRunPodSandbox")
    assert newest.pod == f"{pod_request().pod_meta.namespace}/{pod_request().pod_meta.name}"
    core.run(core.points.container_removed("c1"))
    assert [m.object_id for m in missed.newest()] == ["p1"]
    core.run(core.points.pod_sandbox_removed("p1"))
    assert len(missed) == 0 and missed.noted_total == 2


def test_a_failing_plugin_in_shadow_is_never_noted_as_missed(core: Points) -> None:
    core.bench.register("10-trial.json", core.bench.socket("nobody"), ["PreCreateContainer"], "Ignore",
                        shadow=True)
    creation = core.run(core.points.pre_create_container("p1", bare_container(), None))
    core.run(core.points.container_created("c1", creation))
    assert creation.missed == () and len(core.core.missed) == 0


def test_a_large_value_s_projection_is_made_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod of many labels costs ~1 us a label in protobuf maps: made on a worker, never on the loop; a small one
    is left to be made when read (a call no hook plugin takes never makes it)."""
    made_on: list[threading.Thread] = []
    original = chain_value.pod_request

    def recording(pod: PodRecord) -> hooks.PodSandboxHookRequest:
        made_on.append(threading.current_thread())
        return original(pod)

    monkeypatch.setattr(chain_value, "pod_request", recording)
    large = chain_value.PodValue(PodRecord(labels={f"k{i}": "v" for i in range(PROJECTED_OFF_LOOP_ENTRIES + 1)}))
    asyncio.run(projected(large, len(large.pod.labels)))
    assert made_on and made_on[0] is not threading.main_thread() and large.projected is not None
    small = chain_value.PodValue(PodRecord(labels={"a": "b"}))
    asyncio.run(projected(small, 1))
    assert small.projected is None and len(made_on) == 1
