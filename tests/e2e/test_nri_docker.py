"""NRI plugins hosted by the proxy in Docker mode, against a real dockerd (which has no NRI): cri-dockerd's
requests replayed (rplab.cridockerd_replay, no cri-dockerd needed) through the proxy, the project's own NRI
plugin (tests/nri/nrikit.py) on the proxy's NRI socket; what it answers lands in `docker inspect`, an eviction
stops the container in dockerd, a plugin failing RunPodSandbox has the sandbox container removed."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.message import Message

from rplab.cridockerd_replay import CriDockerdReplay, ReplayError
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.loop import LoopThread
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.launched_plugin import plugin_file  # noqa: E402
from tests.kits.nri import NriPlugin, adjusting, bind_mount, host_device, rdt_class, shares, update_shares  # noqa: E402

_serial = itertools.count()
ANNOTATION = "nri.runtimeproxy.test/adjusted"
WAIT_SECONDS = 15.0


@dataclasses.dataclass
class DockerNriLab:
    dockerd: DockerdInstance
    proxy: DockerModeProxy
    loop: LoopThread
    replay: CriDockerdReplay
    plugins: list[NriPlugin] = dataclasses.field(default_factory=list)
    sandboxes: list[str] = dataclasses.field(default_factory=list)

    def attach(self, plugin: NriPlugin) -> NriPlugin:
        self.proxy.wait_for_log("NRI: serving plugins", timeout=WAIT_SECONDS)
        self.loop.run(plugin.connect(self.proxy.listen_path.parent / "nri.sock"))
        self.plugins.append(plugin)
        self.proxy.wait_for_log(f"NRI plugin {plugin.index}-{plugin.name} attached", timeout=WAIT_SECONDS)
        return plugin

    def run_pod(self) -> PodShape:
        pod = PodShape(name=f"nri{next(_serial)}", uid=str(uuid.uuid4()), cgroup_parent="/rp-nri",
                       labels={"app": "rp-nri"}, sandbox_image=PAUSE_IMAGE, image=BUSYBOX_IMAGE)
        self.sandboxes.append(self.replay.run_pod_sandbox(pod))
        return pod

    def create(self, pod: PodShape, container: str) -> str:
        return self.replay.create_container(dataclasses.replace(pod, container=container), self.sandboxes[-1])

    def inspect(self, container_id: str) -> dict:
        return json.loads(self.dockerd.docker("inspect", container_id).stdout)[0]

    def close(self) -> None:
        for sandbox_id in self.sandboxes:
            self.replay.clean_up(sandbox_id)
        self.replay.close()

        async def close_plugins() -> None:
            for plugin in self.plugins:
                plugin.close()
        self.loop.run(close_plugins())  # the plugins' connections live on the loop thread


@pytest.fixture
def base(workdir: Path) -> Path:
    path = workdir / f"nridk{next(_serial)}"
    (path / "plugins").mkdir(mode=0o755, parents=True)
    (path / "conf.d").mkdir(mode=0o755)
    return path


@pytest.fixture
def lab(dockerd: DockerdInstance, base: Path, loop_thread: LoopThread) -> Iterator[DockerNriLab]:
    """The proxy in Docker mode with NRI on; it launches the plugins the test put in base/plugins first."""
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=[
        f"--nri-socket={base / 'nri.sock'}", f"--nri-plugin-path={base / 'plugins'}",
        f"--nri-plugin-config-path={base / 'conf.d'}", "--log-level=debug"])
    proxy.start()
    lab = DockerNriLab(dockerd, proxy, loop_thread, CriDockerdReplay(proxy.listen_path))
    try:
        yield lab
    finally:
        lab.close()
        assert proxy.stop() == 0, proxy.log_tail()


def test_an_nri_plugin_adjusts_env_cpu_shares_and_an_annotation_in_docker_inspect(lab: DockerNriLab) -> None:
    adjust = nri.ContainerAdjustment(annotations={ANNOTATION: "yes"}, env=[nri.KeyValue(key="NRI", value="1")],
                                     linux=nri.LinuxContainerAdjustment(resources=shares(700)))
    plugin = lab.attach(NriPlugin(name="adjuster", index="10", events=event_mask(nri.CREATE_CONTAINER),
                                  methods={"CreateContainer": adjusting(adjust)}))
    pod = lab.run_pod()
    container_id = lab.create(pod, "box")
    lab.replay.start_container(container_id)

    inspected = lab.inspect(container_id)
    assert "NRI=1" in inspected["Config"]["Env"] and "KEEP=me" in inspected["Config"]["Env"]
    assert inspected["HostConfig"]["CpuShares"] == 700
    assert inspected["Config"]["Labels"][f"annotation.{ANNOTATION}"] == "yes"
    (created,) = plugin.requests("CreateContainer")
    assert created.pod.id == lab.sandboxes[-1] and created.container.name == "box"  # type: ignore[attr-defined]
    image = created.container.image  # type: ignore[attr-defined]  # dockerd's image inspect: tag, no repo digest
    assert (image.name, image.digest) == (BUSYBOX_IMAGE, "") and image.config_digest == lab.inspect(container_id)["Image"]


def test_updates_of_another_container_reach_dockerd(lab: DockerNriLab) -> None:
    pod = lab.run_pod()
    first = lab.create(pod, "first")
    lab.replay.start_container(first)
    plugin = lab.attach(NriPlugin(name="neighbour", index="10", events=event_mask(nri.CREATE_CONTAINER),
                                  methods={"CreateContainer": adjusting(nri.ContainerAdjustment(),
                                                                        [update_shares(first, 300)])}))
    lab.create(pod, "second")
    assert lab.inspect(first)["HostConfig"]["CpuShares"] == 300  # asked during another container's create

    answer = lab.loop.run(plugin.update_containers(update_shares(first, 400)))  # unsolicited
    assert list(answer.failed) == []
    assert lab.inspect(first)["HostConfig"]["CpuShares"] == 400


@pytest.fixture
def launched(base: Path) -> Path:
    """A plugin in the plugin directory (before the proxy starts), with a config that adds a variable."""
    plugin_file(base / "plugins" / "10-launched")
    record = base / "launched.jsonl"
    (base / "conf.d" / "10-launched.conf").write_text(json.dumps({"env": {"LAUNCHED": "yes"},
                                                                    "record": str(record)}))
    return record


def test_a_plugin_launched_from_the_plugin_directory_adjusts_the_container_and_stops_with_the_proxy(
        launched: Path, lab: DockerNriLab) -> None:
    lab.proxy.wait_for_log("NRI plugin 10-launched attached", timeout=WAIT_SECONDS)
    pod = lab.run_pod()
    container_id = lab.create(pod, "box")
    assert "LAUNCHED=yes" in lab.inspect(container_id)["Config"]["Env"]
    assert lab.proxy.stop() == 0, lab.proxy.log_tail()
    lab.proxy.start()  # for the fixture's own stop; the plugin is launched again
    configured, stopped = [json.loads(line) for line in launched.read_text().splitlines()][:2]
    assert configured["runtime"] == "runtimeproxy" and configured["environ"]["NRI_PLUGIN_NAME"] == "launched"
    assert "CreateContainer" in stopped["events"] and stopped["events"][-1] == "Shutdown"


KEEP_RUNNING = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
HOST_DEVICE = "/dev/fuse"  # a node dockerd does not add by default


def test_args_a_bind_mount_and_a_device_land_in_docker_inspect_and_the_plugin_sees_the_images_argv(
        lab: DockerNriLab, base: Path) -> None:
    if not Path(HOST_DEVICE).exists():
        pytest.skip(f"{HOST_DEVICE} is not on this host")
    source, requested = base / "nri-bind", base / "req-bind"
    source.mkdir()
    requested.mkdir()
    adjust = nri.ContainerAdjustment(
        args=KEEP_RUNNING, mounts=[bind_mount("/nri-data", str(source), "ro"), bind_mount("-/req-data", "")],
        linux=nri.LinuxContainerAdjustment(devices=[host_device(HOST_DEVICE)]))
    plugin = lab.attach(NriPlugin(name="editor", index="10", events=event_mask(nri.CREATE_CONTAINER),
                                  methods={"CreateContainer": adjusting(adjust)}))
    pod = lab.run_pod()
    # No command: dockerd runs the image's Cmd (busybox: sh); one bind mount of the kubelet's.
    container_id = lab.create(dataclasses.replace(pod, command=(), binds=(f"{requested}:/req-data",)), "box")

    (created,) = plugin.requests("CreateContainer")
    seen = created.container  # type: ignore[attr-defined]
    assert list(seen.args) == ["sh"]  # the image's Cmd, read with GET /images/{name}/json
    assert [(m.destination, m.source) for m in seen.mounts] == [("/req-data", str(requested))]
    inspected = lab.inspect(container_id)
    assert [inspected["Path"], *inspected["Args"]] == KEEP_RUNNING
    mounts = {m["Destination"]: m for m in inspected["Mounts"]}
    assert "/req-data" not in mounts
    assert (mounts["/nri-data"]["Type"], mounts["/nri-data"]["Source"], mounts["/nri-data"]["RW"]) == \
        ("bind", str(source), False)
    assert {"PathOnHost": HOST_DEVICE, "PathInContainer": HOST_DEVICE, "CgroupPermissions": "rwm"} in \
        inspected["HostConfig"]["Devices"]


def test_an_rdt_class_is_refused_in_docker_mode_naming_plugin_and_field_and_nothing_is_created(
        lab: DockerNriLab) -> None:
    adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=rdt_class("gold")))
    lab.attach(NriPlugin(name="rdt", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": adjusting(adjust)}))
    pod = lab.run_pod()
    with pytest.raises(ReplayError) as failed:
        lab.create(pod, "box")
    assert "answered 500" in str(failed.value)
    assert "NRI plugin 10-rdt set linux.resources.rdt_class" in str(failed.value)
    listed = lab.dockerd.docker("ps", "-a", "-q", "--filter", f"label=io.kubernetes.sandbox.id={lab.sandboxes[-1]}")
    assert listed.stdout.strip() == b""


def test_an_eviction_stops_the_container_in_dockerd(lab: DockerNriLab) -> None:
    pod = lab.run_pod()
    victim = lab.create(pod, "victim")
    lab.replay.start_container(victim)

    async def evicting(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(evict=[nri.ContainerEviction(container_id=victim, reason="no room")])

    lab.attach(NriPlugin(name="evictor", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": (nri.CreateContainerRequest, evicting)}))
    lab.create(pod, "newcomer")
    state = lab.inspect(victim)["State"]
    assert not state["Running"] and state["ExitCode"] == 137  # SIGKILL at once: docker stop -t 0
    lab.proxy.wait_for_log(f"NRI plugin 10-evictor evicted container {victim}", timeout=WAIT_SECONDS)


def test_a_plugin_failing_run_pod_sandbox_has_the_sandbox_container_removed(lab: DockerNriLab) -> None:
    async def refuse(plugin: NriPlugin, request: Message) -> Message:
        raise TtrpcError(Code.FAILED_PRECONDITION, "no room on this node")

    lab.attach(NriPlugin(name="gate", index="10", events=event_mask(nri.RUN_POD_SANDBOX),
                         methods={"RunPodSandbox": (nri.RunPodSandboxRequest, refuse)}))
    before = lab.dockerd.docker("ps", "-aq", "--no-trunc").stdout.split()
    with pytest.raises(ReplayError) as failed:
        lab.run_pod()
    assert failed.value.exchange.status == 500 and "NRI plugin 10-gate" in str(failed.value)
    assert lab.dockerd.docker("ps", "-aq", "--no-trunc").stdout.split() == before  # cri-dockerd's create failed


CONTAINER_EVENTS = ("PostCreateContainer", "StartContainer", "PostStartContainer", "StopContainer", "RemoveContainer")


def test_a_plugin_sees_the_container_s_labels_state_pid_and_argv_through_its_life(lab: DockerNriLab) -> None:
    """The core's model in Docker mode: cri-dockerd's labels for the container, each event's state as containerd's
    NRI reports it, the pid dockerd runs it with, and the argv after the create too."""
    plugin = lab.attach(NriPlugin(name="watcher", index="10", events=0, every_event=True))
    pod = lab.run_pod()
    container_id = lab.create(pod, "box")
    lab.replay.start_container(container_id)
    running = lab.inspect(container_id)
    lab.replay.stop_container(container_id)
    lab.replay.remove_container(container_id)
    seen = [(name, request.container) for name, request in plugin.received  # type: ignore[attr-defined]
            if name in CONTAINER_EVENTS]
    assert [(name, container.state) for name, container in seen] == [
        ("PostCreateContainer", nri.CONTAINER_CREATED), ("StartContainer", nri.CONTAINER_CREATED),
        ("PostStartContainer", nri.CONTAINER_RUNNING), ("StopContainer", nri.CONTAINER_RUNNING),
        ("RemoveContainer", nri.CONTAINER_STOPPED)]
    for name, container in seen:
        assert container.labels["io.kubernetes.container.name"] == "box", name
        assert not any(key.startswith("annotation.") or key == "io.kubernetes.docker.type"
                       for key in container.labels), name
        assert list(container.args) == [running["Path"], *running["Args"]], name
    assert dict(seen)["PostStartContainer"].pid == running["State"]["Pid"] > 0
