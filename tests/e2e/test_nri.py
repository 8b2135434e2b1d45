"""NRI plugins hosted by the proxy, against real containerd 1.6 (which has no NRI of its own): the project's own
NRI plugin (tests/nri/nrikit.py) attaches to the proxy's NRI socket and what it answers lands in the OCI spec;
`runtimeproxyctl trace` explains it, a plugin in shadow changes nothing, an eviction stops a container, a plugin
failing RunPodSandbox leaves no sandbox behind."""

from __future__ import annotations

import io
import itertools
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from runtimeproxy.admin.ctl import main as ctl_main
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.env import SECRET_SEEN, SHOWN_SECRET, binary_env_seen  # noqa: E402
from tests.kits.nri import NriPlugin, adjusting, bind_mount, host_device, rdt_class, shares  # noqa: E402

_serial = itertools.count()
ALL_EVENTS = 0  # NRI: every lifecycle event
ANNOTATION = "nri.runtimeproxy.test/adjusted"


class NriLab:
    def __init__(self, proxy: ProxyProcess, loop: LoopThread) -> None:
        self.proxy = proxy
        self.loop = loop
        self.socket = proxy.listen_path.parent / "nri.sock"
        self.client = CriClient(open_channel(proxy.listen_path))
        self.plugins: list[NriPlugin] = []
        self.starts = 1

    def attach(self, plugin: NriPlugin, times: int = 1) -> NriPlugin:
        self.proxy.wait_for_log("NRI: serving plugins", self.starts)
        self.loop.run(plugin.connect(self.socket))
        self.plugins.append(plugin)
        self.proxy.wait_for_log(f"NRI plugin {plugin.index}-{plugin.name} attached", times=times)
        return plugin

    def restart(self) -> None:
        self.client.channel.close()
        assert self.proxy.stop() == 0, self.proxy.log_tail()
        self.proxy.start()
        self.starts += 1
        self.client = CriClient(open_channel(self.proxy.listen_path))

    def close(self) -> None:
        self.client.channel.close()
        async def close_plugins() -> None:
            for plugin in self.plugins:
                plugin.close()
        self.loop.run(close_plugins())  # the plugins' connections live on the loop thread


@contextmanager
def nri_lab(backend: str, base: Path, loop: LoopThread) -> Iterator[NriLab]:
    """A proxy hosting NRI plugins in `base` in front of the containerd at `backend`, for the block."""
    proxy = ProxyProcess(base / "rp.sock", backend, extra_args=[
        f"--nri-socket={base / 'nri.sock'}", "--nri-request-timeout=1", "--log-level=debug"])
    proxy.start()
    lab = NriLab(proxy, loop)
    try:
        yield lab
    finally:
        lab.close()
        assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture
def lab(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread) -> Iterator[NriLab]:
    with nri_lab(containerd.address, workdir / f"nri{next(_serial)}", loop_thread) as lab:
        yield lab


def spec_of(client: CriClient, container_id: str) -> dict:
    return json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]


def run_pod(client: CriClient, log_dir: Path, cleanup: list[str]) -> tuple[str, object]:
    config = client.pod_config(f"nri{next(_serial)}", log_dir)
    pod_id = client.run_pod(config)
    cleanup.append(pod_id)
    return pod_id, config


def test_an_nri_plugin_adjusts_env_cpu_shares_and_an_annotation_and_sees_every_event(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    adjust = nri.ContainerAdjustment(annotations={ANNOTATION: "yes"}, env=[nri.KeyValue(key="NRI", value="1")],
                                     linux=nri.LinuxContainerAdjustment(resources=shares(700)))
    plugin = lab.attach(NriPlugin(name="adjuster", index="10", events=ALL_EVENTS, every_event=True,
                                  methods={"CreateContainer": adjusting(adjust)}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    container_id = client.create_container(pod_id, client.container_config("app", envs={"KEEP": "me"}), pod_config)
    client.start_container(container_id)

    spec = spec_of(client, container_id)
    assert "NRI=1" in spec["process"]["env"] and "KEEP=me" in spec["process"]["env"]
    assert spec["linux"]["resources"]["cpu"]["shares"] == 700
    assert client.container_status(container_id).status.annotations[ANNOTATION] == "yes"

    client.stop_container(container_id)
    client.remove_container(container_id)
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)
    events = [name for name, _ in plugin.received if name not in ("Configure", "Synchronize")]
    assert events == ["RunPodSandbox", "CreateContainer", "ValidateContainerAdjustment", "PostCreateContainer", "StartContainer",
                      "PostStartContainer", "StopContainer", "RemoveContainer", "StopPodSandbox",
                      "RemovePodSandbox"]
    created = plugin.requests("CreateContainer")[0]
    assert created.pod.id == pod_id and created.container.name == "app"  # type: ignore[attr-defined]


def test_an_update_of_another_container_reaches_the_runtime(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    first = client.create_container(pod_id, client.container_config("first"), pod_config)
    client.start_container(first)
    update = nri.ContainerUpdate(container_id=first, linux=nri.LinuxContainerUpdate(resources=shares(300)))
    lab.attach(NriPlugin(name="neighbour", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": adjusting(nri.ContainerAdjustment(), [update])}))
    client.create_container(pod_id, client.container_config("second"), pod_config)
    assert spec_of(client, first)["linux"]["resources"]["cpu"]["shares"] == 300


def test_two_plugins_setting_cpu_shares_fail_the_create(lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=shares(700)))
    for name, index in (("one", "10"), ("two", "20")):
        lab.attach(NriPlugin(name=name, index=index, events=event_mask(nri.CREATE_CONTAINER),
                             methods={"CreateContainer": adjusting(adjust)}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    with pytest.raises(grpc.RpcError) as failed:
        client.create_container(pod_id, client.container_config("app"), pod_config)
    assert "plugins '10-one' and '20-two' both tried to set cpu shares" in failed.value.details()


def test_a_plugin_missing_the_timeout_is_detached_and_the_create_goes_on(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    async def stall(plugin: NriPlugin, request: Message) -> Message:
        await plugin.shut_down.wait()  # never, while the call waits
        return nri.CreateContainerResponse()

    lab.attach(NriPlugin(name="slow", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": (nri.CreateContainerRequest, stall)}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    container_id = client.create_container(pod_id, client.container_config("app"), pod_config)
    assert container_id
    lab.proxy.wait_for_log("NRI plugin 10-slow detached: CreateContainer timed out")


def test_a_reconnecting_plugin_replaces_its_old_connection(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    events = event_mask(nri.RUN_POD_SANDBOX)
    old = lab.attach(NriPlugin(name="again", index="10", events=events, every_event=True))
    new = lab.attach(NriPlugin(name="again", index="10", events=events, every_event=True), times=2)
    run_pod(lab.client, log_dir, cleanup_pods)
    assert len(new.requests("RunPodSandbox")) == 1
    assert old.requests("RunPodSandbox") == []


def test_after_a_proxy_restart_synchronize_shows_the_existing_pod(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    container_id = client.create_container(pod_id, client.container_config("app"), pod_config)
    lab.restart()
    plugin = lab.attach(NriPlugin(name="late", index="10", events=event_mask(nri.CREATE_CONTAINER)))
    sync = plugin.requests("Synchronize")[0]
    assert pod_id in [pod.id for pod in sync.pods]  # type: ignore[attr-defined]
    synced = {c.id: c for c in sync.containers}  # type: ignore[attr-defined]
    assert synced[container_id].name == "app" and synced[container_id].pod_sandbox_id == pod_id


KEEP_RUNNING = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
HOST_DEVICE = "/dev/fuse"  # a node containerd does not add by default


def test_args_a_bind_mount_and_a_device_land_in_the_oci_spec_and_the_plugin_sees_the_images_argv(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str], workdir: Path) -> None:
    if not Path(HOST_DEVICE).exists():
        pytest.skip(f"{HOST_DEVICE} is not on this host")
    source = workdir / f"nri-bind{next(_serial)}"
    source.mkdir()
    adjust = nri.ContainerAdjustment(
        args=KEEP_RUNNING, mounts=[bind_mount("/nri-data", str(source), "ro"), bind_mount("-/req-data", "")],
        linux=nri.LinuxContainerAdjustment(devices=[host_device(HOST_DEVICE)]))
    plugin = lab.attach(NriPlugin(name="editor", index="10", events=event_mask(nri.CREATE_CONTAINER),
                                  methods={"CreateContainer": adjusting(adjust)}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    config = client.container_config("app")
    del config.command[:]  # containerd then runs the image's Entrypoint + Cmd (busybox: sh)
    config.mounts.add(container_path="/req-data", host_path=str(source))
    container_id = client.create_container(pod_id, config, pod_config)

    (created,) = plugin.requests("CreateContainer")
    seen = created.container  # type: ignore[attr-defined]
    assert list(seen.args) == ["sh"]  # the image's Cmd, read with ImageStatus
    assert [(m.destination, m.source) for m in seen.mounts] == [("/req-data", str(source))]
    spec = spec_of(client, container_id)
    assert spec["process"]["args"] == KEEP_RUNNING
    mounts = {m["destination"]: m for m in spec["mounts"]}
    assert "/req-data" not in mounts
    assert mounts["/nri-data"]["source"] == str(source) and "ro" in mounts["/nri-data"]["options"]
    found = os.stat(HOST_DEVICE)
    (device,) = [d for d in spec["linux"]["devices"] if d["path"] == HOST_DEVICE]
    assert (device["type"], device["major"], device["minor"]) == ("c", os.major(found.st_rdev), os.minor(found.st_rdev))
    assert {"allow": True, "type": "c", "major": device["major"], "minor": device["minor"], "access": "rwm"} in \
        spec["linux"]["resources"]["devices"]


def test_an_rdt_class_reaches_containerd_as_its_container_annotation(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    if Path("/sys/fs/resctrl/info").exists():
        pytest.skip("RDT is available here: containerd would need an RDT class configuration")
    adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=rdt_class("gold")))
    lab.attach(NriPlugin(name="rdt", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": adjusting(adjust)}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    with pytest.raises(grpc.RpcError) as failed:
        client.create_container(pod_id, client.container_config("app"), pod_config)
    # containerd read the class from io.kubernetes.cri.rdt-class; on a node without RDT it refuses it
    # ("RDT not initialized, class ... not available").
    details = failed.value.details()
    assert "failed to set RDT class" in details and '"gold"' in details, details
    assert client.container_ids(pod_id) == []


def test_a_mount_no_cri_request_can_carry_is_refused_and_nothing_is_created(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    tmpfs = nri.Mount(destination="/scratch", type="tmpfs", source="tmpfs", options=["nosuid"])
    lab.attach(NriPlugin(name="tmpfs", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": adjusting(nri.ContainerAdjustment(mounts=[tmpfs]))}))
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    with pytest.raises(grpc.RpcError) as failed:
        client.create_container(pod_id, client.container_config("app"), pod_config)
    assert failed.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "NRI plugin 10-tmpfs: mounts[/scratch] has type 'tmpfs'" in failed.value.details()
    assert client.container_ids(pod_id) == []


def ctl(lab: NriLab, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = ctl_main([f"--admin-endpoint={lab.proxy.admin_path}", *args], out=out)
    return code, out.getvalue()


def test_the_trace_explains_an_nri_plugins_change_and_a_plugin_in_shadow_changes_nothing(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    create = event_mask(nri.CREATE_CONTAINER)
    lab.attach(NriPlugin(name="live", index="10", events=create, methods={"CreateContainer": adjusting(
        nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=shares(700))))}))
    lab.attach(NriPlugin(name="trial", index="20", events=create, methods={"CreateContainer": adjusting(
        nri.ContainerAdjustment(annotations={ANNOTATION: "trial"},
                                linux=nri.LinuxContainerAdjustment(resources=shares(900))))}))
    code, out = ctl(lab, "shadow", "20-trial")
    assert code == 0, out
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    container_id = client.create_container(pod_id, client.container_config("app"), pod_config)

    assert spec_of(client, container_id)["linux"]["resources"]["cpu"]["shares"] == 700
    assert ANNOTATION not in client.container_status(container_id).status.annotations
    code, out = ctl(lab, "trace", container_id)
    assert code == 0, out
    assert "NRI CreateContainer  container app" in out
    assert "nri:10-live   ok" in out and "-> 700" in out
    assert "nri:20-trial  ok (shadow: not applied)" in out
    assert "would set container_resources.cpu_shares: 700 -> 900" in out
    assert f'would set container_annotations["{ANNOTATION}"]: (unset) -> "trial"' in out


def test_an_eviction_stops_the_container_in_the_runtime(lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    victim = client.create_container(pod_id, client.container_config("victim"), pod_config)
    client.start_container(victim)

    async def evicting(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(evict=[nri.ContainerEviction(container_id=victim, reason="no room")])

    lab.attach(NriPlugin(name="evictor", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": (nri.CreateContainerRequest, evicting)}))
    client.create_container(pod_id, client.container_config("newcomer"), pod_config)
    assert client.container_status(victim).status.state == cri.CONTAINER_EXITED
    lab.proxy.wait_for_log(f"NRI plugin 10-evictor evicted container {victim}")


def test_a_plugin_failing_run_pod_sandbox_fails_it_and_leaves_no_sandbox(
        lab: NriLab, log_dir: Path, direct_channel: grpc.Channel) -> None:
    direct = CriClient(direct_channel)
    async def refuse(plugin: NriPlugin, request: Message) -> Message:
        raise TtrpcError(Code.FAILED_PRECONDITION, "no room on this node")

    lab.attach(NriPlugin(name="gate", index="10", events=event_mask(nri.RUN_POD_SANDBOX),
                         methods={"RunPodSandbox": (nri.RunPodSandboxRequest, refuse)}))
    before = set(direct.pod_ids())
    with pytest.raises(grpc.RpcError) as failed:
        lab.client.run_pod(lab.client.pod_config(f"nri{next(_serial)}", log_dir))
    assert "NRI plugin 10-gate" in failed.value.details() and "failed RunPodSandbox" in failed.value.details()
    assert "failure-policy" not in failed.value.details()  # NRI has no failure policy
    assert "no room on this node" in failed.value.details()
    assert set(direct.pod_ids()) == before  # stopped and removed in containerd


def test_an_event_toggled_off_is_not_sent_and_its_adjustment_is_not_applied_until_enabled(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin = lab.attach(NriPlugin(name="toggled", index="10", events=event_mask(nri.CREATE_CONTAINER),
                                  methods={"CreateContainer": adjusting(nri.ContainerAdjustment(
                                      annotations={ANNOTATION: "yes"}))}))
    code, out = ctl(lab, "disable", "10-toggled", "--hook", "CreateContainer", "--reason", "INC-7")
    assert code == 0, out
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    off = client.create_container(pod_id, client.container_config("off"), pod_config)
    assert ANNOTATION not in client.container_status(off).status.annotations
    assert plugin.requests("CreateContainer") == []

    code, out = ctl(lab, "enable", "10-toggled", "--hook", "CreateContainer")
    assert code == 0, out
    on = client.create_container(pod_id, client.container_config("on"), pod_config)
    assert client.container_status(on).status.annotations[ANNOTATION] == "yes"
    assert len(plugin.requests("CreateContainer")) == 1


def test_a_binary_env_value_reaches_the_container_as_directly_with_an_nri_plugin_adding_env(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    adjust = nri.ContainerAdjustment(env=[nri.KeyValue(key="NRI", value="1")])
    plugin = lab.attach(NriPlugin(name="env", index="10", events=ALL_EVENTS, every_event=True,
                                  methods={"CreateContainer": adjusting(adjust)}))
    assert binary_env_seen(lab.client, log_dir, cleanup_pods) == SECRET_SEEN
    created = plugin.requests("CreateContainer")[0]
    assert f"SECRET={SHOWN_SECRET}" in created.container.env  # type: ignore[attr-defined]


# --- what a plugin sees of a container: as containerd's own NRI shows it ---------------------------------------

KUBELET_LABELS = {"io.kubernetes.container.name": "app", "io.kubernetes.pod.namespace": "default"}
SKIP_LABEL = {"runtimeproxy.koordinator.sh/skip-hookserver": "true"}  # the proxy's default skip rule
MiB = 1 << 20


CONTAINER_EVENTS = ("CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
                    "UpdateContainer", "PostUpdateContainer", "StopContainer", "RemoveContainer")


def container_events(plugin: NriPlugin) -> list[tuple[str, nri.Container]]:
    """Each container event the plugin got, with the container as it was shown."""
    return [(name, request.container) for name, request in plugin.received  # type: ignore[attr-defined]
            if name in CONTAINER_EVENTS]


def test_a_plugin_sees_labels_states_the_current_resources_and_the_argv_after_creation(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str], workdir: Path) -> None:
    source = workdir / f"nri-seen{next(_serial)}"
    source.mkdir()
    plugin = lab.attach(NriPlugin(name="watcher", index="10", events=ALL_EVENTS, every_event=True))
    client = lab.client
    api = client.api
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    config = client.container_config("app", resources=api.LinuxContainerResources(
        cpu_shares=512, memory_limit_in_bytes=128 * MiB))
    config.labels.update(KUBELET_LABELS)
    config.mounts.add(container_path="/data", host_path=str(source), readonly=True)
    container_id = client.create_container(pod_id, config, pod_config)
    client.start_container(container_id)
    client.runtime.UpdateContainerResources(api.UpdateContainerResourcesRequest(
        container_id=container_id, linux=api.LinuxContainerResources(cpu_shares=1024,
                                                                     memory_limit_in_bytes=256 * MiB)), timeout=60)
    client.stop_container(container_id)
    client.remove_container(container_id)

    # containerd's NRI: unknown while being created, created until started, RUNNING in StopContainer (the state
    # before the stop), stopped when removed.
    assert [(name, seen.state) for name, seen in container_events(plugin)] == [
        ("CreateContainer", nri.CONTAINER_UNKNOWN), ("PostCreateContainer", nri.CONTAINER_CREATED),
        ("StartContainer", nri.CONTAINER_CREATED), ("PostStartContainer", nri.CONTAINER_RUNNING),
        ("UpdateContainer", nri.CONTAINER_RUNNING), ("PostUpdateContainer", nri.CONTAINER_RUNNING),
        ("StopContainer", nri.CONTAINER_RUNNING), ("RemoveContainer", nri.CONTAINER_STOPPED)]
    for name, seen in container_events(plugin):
        # The CRI labels and containerd's kind label, as containerd's NRI shows them.
        assert dict(seen.labels) == {**KUBELET_LABELS, "io.cri-containerd.kind": "container"}, name
        assert list(seen.args) == KEEP_RUNNING and [m.destination for m in seen.mounts] == ["/data"], name
    started = plugin.requests("PostStartContainer")[0].container  # type: ignore[attr-defined]
    assert started.pid > 0 and started.started_at >= started.created_at > 0
    (update,) = plugin.requests("UpdateContainer")
    # The container as it runs, the update apart (containerd: its spec, and the request's resources).
    assert update.container.linux.resources.cpu.shares.value == 512  # type: ignore[attr-defined]
    assert update.linux_resources.cpu.shares.value == 1024  # type: ignore[attr-defined]
    post_update = plugin.requests("PostUpdateContainer")[0].container  # type: ignore[attr-defined]
    assert post_update.linux.resources.memory.limit.value == 256 * MiB
    removed = plugin.requests("RemoveContainer")[0].container  # type: ignore[attr-defined]
    assert removed.finished_at >= removed.started_at


def test_synchronize_shows_real_states_and_leaves_out_stopped_containers_and_skipped_pods(
        lab: NriLab, log_dir: Path, cleanup_pods: list[str]) -> None:
    client = lab.client
    pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
    created = client.create_container(pod_id, client.container_config("created"), pod_config)
    running = client.create_container(pod_id, client.container_config("running"), pod_config)
    client.start_container(running)
    stopped = client.create_container(pod_id, client.container_config("stopped"), pod_config)
    client.start_container(stopped)
    client.stop_container(stopped)
    skipped_config = client.pod_config(f"nri{next(_serial)}", log_dir, labels=SKIP_LABEL)
    skipped_pod = client.run_pod(skipped_config)
    cleanup_pods.append(skipped_pod)
    skipped = client.create_container(skipped_pod, client.container_config("skipped"), skipped_config)
    client.start_container(skipped)

    def check(plugin: NriPlugin) -> None:
        sync = plugin.requests("Synchronize")[0]
        pods = {pod.id: pod for pod in sync.pods}  # type: ignore[attr-defined]
        assert pod_id in pods and skipped_pod not in pods
        assert pods[pod_id].labels["io.cri-containerd.kind"] == "sandbox"
        shown = {c.id: c for c in sync.containers}  # type: ignore[attr-defined]
        assert stopped not in shown and skipped not in shown  # as containerd's ListContainers; the skip rule
        assert (shown[created].state, shown[running].state) == (nri.CONTAINER_CREATED, nri.CONTAINER_RUNNING)

    check(lab.attach(NriPlugin(name="live", index="10", events=event_mask(nri.CREATE_CONTAINER))))
    lab.restart()  # the model is then rebuilt from containerd's verbose status
    late = lab.attach(NriPlugin(name="late", index="10", events=event_mask(nri.CREATE_CONTAINER)))
    check(late)
    shown = {c.id: c for c in late.requests("Synchronize")[0].containers}  # type: ignore[attr-defined]
    assert shown[running].pid > 0 and shown[running].started_at > 0
