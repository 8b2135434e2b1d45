"""Hook plugins in Docker mode: the kubelet's side → proxy → dockerd, what plugins change lands in dockerd.

Each test runs with two drivers of the kubelet's side (tests/e2e/docker_drivers.py): `replay` sends
cri-dockerd's requests itself (always), `cri-dockerd` drives the real one with crictl (skips where it or
crictl is not installed). Real parts: a private dockerd, the proxy process in Docker mode (its own,
restarted in one test), the example plugin served in this process.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from rplab import cridockerd_requests as shapes
from rplab.cridockerd_replay import CriDockerdReplay, ReplayError
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import CriDockerd, DockerdInstance, DockerModeProxy, UnixHTTPConnection
from rplab.example_plugin import ANNOTATION, ExamplePlugin, ExampleSettings, registration
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.loop import LoopThread
from runtimeproxy.options import DEFAULT_SKIP_LABEL_KEY
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks.names import HOOK_NAMES

from docker_drivers import CrictlDriver, DriverError, PodDriver, ReplayDriver
from tests.kits.machine import require_tool

MiB = 1024 * 1024
POD_CGROUP_PARENT = "/rp-docker/hooked"
WAIT_SECONDS = 15.0
UPDATED_SHARES = 700
_serial = itertools.count()


class UpdatingPlugin(ExamplePlugin):
    """The example plugin, which also raises CPU shares on every update (the kit: only the change)."""

    def pre_update_container_resources(
        self, request: hooks.ContainerResourceHookRequest
    ) -> hooks.ContainerResourceHookResponse | None:
        return hooks.ContainerResourceHookResponse(
            container_resources=hooks.LinuxContainerResources(cpu_shares=UPDATED_SHARES))


@dataclass
class DockerLab:
    dockerd: DockerdInstance
    proxy: DockerModeProxy
    loop: LoopThread
    base: Path

    def plugin(self, settings: ExampleSettings | None = None, kind: type[ExamplePlugin] = ExamplePlugin,
               hooks_: tuple[str, ...] = HOOK_NAMES, policy: str = "Ignore") -> tuple[ExamplePlugin, Path]:
        plugin = kind(settings)
        socket = self.base / f"plugin{next(_serial)}.sock"
        self.loop.run(plugin.start(socket))
        config = self.proxy.hook_config_dir / f"{next(_serial):02d}-example.json"
        seen = self.proxy.log_count(f"plugin {config.name} registered")
        config.write_bytes(registration(socket, list(hooks_), policy))
        self.proxy.wait_for_log(f"plugin {config.name} registered", seen + 1, WAIT_SECONDS)
        return plugin, config

    def unregister(self, plugin: ExamplePlugin, config: Path) -> None:
        config.unlink()
        self.proxy.wait_for_log(f"plugin {config.name} removed", timeout=WAIT_SECONDS)
        self.loop.run(plugin.stop())

    def container_ids(self) -> set[str]:
        return set(self.dockerd.docker("ps", "-aq", "--no-trunc").stdout.decode().split())

    def inspect(self, container_id: str) -> dict:
        return json.loads(self.dockerd.docker("inspect", container_id).stdout)[0]


def pod_shape(labels: dict[str, str] | None = None) -> PodShape:
    """The pod every test runs: labels, an annotation, a cgroup parent, two env vars, a memory limit."""
    return PodShape(name=f"hk{next(_serial)}", uid=str(uuid.uuid4()), cgroup_parent="/rp-docker",
                    labels={"app": "rp-docker", **(labels or {})}, annotations={"team": "a"},
                    sandbox_image=PAUSE_IMAGE, image=BUSYBOX_IMAGE)




@pytest.fixture(scope="module")
def docker_lab(dockerd: DockerdInstance, workdir: Path, loop_thread: LoopThread) -> Iterator[DockerLab]:
    base = workdir / "dkhooks"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    proxy.start()
    try:
        yield DockerLab(dockerd, proxy, loop_thread, base)
    finally:
        assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="module")
def cri_dockerd_server(docker_lab: DockerLab) -> Iterator[tuple[Path, CriDockerd]]:
    """The real cri-dockerd in front of the module's proxy (skips where it or crictl is missing)."""
    crictl = require_tool("crictl")
    server = CriDockerd(require_tool("cri-dockerd"), docker_lab.base / "cridk", docker_lab.proxy.listen_path,
                        PAUSE_IMAGE)
    probe = CrictlDriver(crictl, server, docker_lab.base)

    def answers() -> bool:
        try:
            probe.crictl("version")
        except DriverError:
            return False
        return True

    server.start(ready=answers)
    yield crictl, server
    server.stop()


@pytest.fixture(params=["replay", "cri-dockerd"])
def driver(request: pytest.FixtureRequest, docker_lab: DockerLab, tmp_path: Path) -> Iterator[PodDriver]:
    chosen: PodDriver
    if request.param == "replay":
        chosen = ReplayDriver(docker_lab.proxy.listen_path)
    else:
        crictl, server = request.getfixturevalue("cri_dockerd_server")
        chosen = CrictlDriver(crictl, server, tmp_path)
    yield chosen
    chosen.close()


@pytest.fixture
def pods(driver: PodDriver) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for pod_id in created:
        for step in (driver.stop_pod, driver.remove_pod):
            try:
                step(pod_id)
            except DriverError:
                pass


def _run(driver: PodDriver, pods: list[str], labels: dict[str, str] | None = None) -> tuple[PodShape, str, str]:
    pod = pod_shape(labels)
    pod_id = driver.run_pod(pod)
    pods.append(pod_id)
    container_id = driver.create_container(pod, pod_id)
    driver.start_container(container_id)
    return pod, pod_id, container_id


def test_a_plugin_on_all_seven_hooks_changes_what_dockerd_runs(docker_lab: DockerLab, driver: PodDriver,
                                                                 pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(pod_cgroup_parent=POD_CGROUP_PARENT), kind=UpdatingPlugin)
    try:
        _, pod_id, container_id = _run(driver, pods)
        sandbox = lab.inspect(pod_id)
        assert sandbox["HostConfig"]["CgroupParent"] == POD_CGROUP_PARENT, lab.proxy.log_tail(60)
        assert sandbox["Config"]["Labels"][f"annotation.{ANNOTATION}"] == "PreRunPodSandbox"
        assert sandbox["Config"]["Labels"]["app"] == "rp-docker"
        container = lab.inspect(container_id)
        assert container["HostConfig"]["CpuShares"] == 512
        assert container["HostConfig"]["Memory"] == 128 * MiB
        assert container["HostConfig"]["CgroupParent"] == POD_CGROUP_PARENT  # follows the moved pod
        env = container["Config"]["Env"]
        assert env.index("KEEP=me") < env.index("ALSO=kept") and "EXAMPLE_PLUGIN=hello" in env
        assert container["Config"]["Labels"][f"annotation.{ANNOTATION}"] == "PreCreateContainer"

        driver.update_memory(container_id, 64 * MiB)
        updated = lab.inspect(container_id)["HostConfig"]
        assert (updated["Memory"], updated["CpuShares"]) == (64 * MiB, UPDATED_SHARES)
        (seen_update,) = plugin.seen_by("PreUpdateContainerResources")
        assert seen_update.container_resources.cpu_shares == 512  # effective resources, not the update alone
        assert seen_update.container_resources.memory_limit_in_bytes == 64 * MiB
        driver.stop_container(container_id)
        driver.stop_pod(pod_id)

        (run,) = plugin.seen_by("PreRunPodSandbox")
        assert run.pod_meta.namespace == "default" and run.labels["app"] == "rp-docker"
        assert run.annotations["team"] == "a" and run.cgroup_parent == "/rp-docker"
        for hook in ("PreCreateContainer", "PreStartContainer", "PostStartContainer", "PostStopContainer"):
            (seen,) = plugin.seen_by(hook)
            assert seen.container_meta.name == "box" and seen.pod_meta == run.pod_meta, hook
            assert seen.container_envs["KEEP"] == "me", hook
        assert plugin.seen_by("PostStopContainer")[0].pod_cgroup_parent == POD_CGROUP_PARENT
        assert plugin.seen_by("PostStopPodSandbox")[0].pod_meta == run.pod_meta
    finally:
        lab.unregister(plugin, config)


@pytest.mark.parametrize("hook", ["PreRunPodSandbox", "PreCreateContainer"])
def test_a_fail_policy_failure_creates_nothing_and_names_plugin_and_hook(
        docker_lab: DockerLab, driver: PodDriver, pods: list[str], hook: str) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(fail_with=grpc.StatusCode.FAILED_PRECONDITION),
                                hooks_=(hook,), policy="Fail")
    before = lab.container_ids()
    try:
        pod = pod_shape()
        with pytest.raises(DriverError) as failed:
            if hook == "PreCreateContainer":
                pod_id = driver.run_pod(pod)
                pods.append(pod_id)
                before.add(pod_id)
                driver.create_container(pod, pod_id)
            else:
                driver.run_pod(pod)
        assert config.name in str(failed.value) and hook in str(failed.value), failed.value
        if driver.name == "replay":  # dockerd's error status as cri-dockerd receives it
            assert " answered 500: " in str(failed.value)
        assert lab.container_ids() == before  # nothing reached dockerd
    finally:
        lab.unregister(plugin, config)


def test_a_pod_with_the_skip_label_gets_no_hooks(docker_lab: DockerLab, driver: PodDriver, pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        _, _, container_id = _run(driver, pods, labels={DEFAULT_SKIP_LABEL_KEY: "true"})
        driver.stop_container(container_id)
        assert plugin.seen == []
        assert lab.inspect(container_id)["HostConfig"]["CpuShares"] != 512
    finally:
        lab.unregister(plugin, config)


def test_after_a_proxy_restart_hooks_still_get_full_context(docker_lab: DockerLab, driver: PodDriver,
                                                             pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(pod_cgroup_parent=POD_CGROUP_PARENT))
    try:
        _, _, container_id = _run(driver, pods)
        rebuilt = lab.proxy.log_count("store rebuilt from dockerd")
        assert lab.proxy.stop() == 0
        lab.proxy.start()  # the store is rebuilt from dockerd (list + inspect)
        lab.proxy.wait_for_log("store rebuilt from dockerd", rebuilt + 1, WAIT_SECONDS)
        driver.update_memory(container_id, 96 * MiB)
        driver.stop_container(container_id)
        (run,) = plugin.seen_by("PreRunPodSandbox")
        for hook in ("PreUpdateContainerResources", "PostStopContainer"):
            (seen,) = plugin.seen_by(hook)
            assert seen.pod_meta == run.pod_meta and seen.container_meta.id == container_id, hook
            assert seen.pod_cgroup_parent == POD_CGROUP_PARENT, hook
            assert seen.pod_labels["app"] == "rp-docker" and seen.pod_annotations["team"] == "a", hook
            assert seen.container_envs["EXAMPLE_PLUGIN"] == "hello", hook
            assert seen.container_resources.cpu_shares == 512, hook
        assert plugin.seen_by("PreUpdateContainerResources")[0].container_resources.memory_limit_in_bytes == 96 * MiB
    finally:
        lab.unregister(plugin, config)


def ctl(proxy: DockerModeProxy, *args: str) -> subprocess.CompletedProcess[str]:
    """runtimeproxyctl as an operator runs it, against the Docker-mode proxy's admin socket."""
    result = subprocess.run([sys.executable, "-m", "runtimeproxy.admin.ctl", f"--admin-endpoint={proxy.admin_path}",
                             *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_runtimeproxyctl_status_and_toggles_work_in_docker_mode(docker_lab: DockerLab, driver: PodDriver,
                                                                 pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        status = json.loads(ctl(lab.proxy, "status", "-o", "json").stdout)
        assert config.name in [entry["file"] for entry in status["plugins"]]
        (backend,) = status["backends"]
        assert backend["endpoint"] == f"unix://{lab.dockerd.socket}"
        ctl(lab.proxy, "disable", config.name, "--reason", "e2e")
        _, _, container_id = _run(driver, pods)
        assert plugin.seen == []  # disabled on this node: no hook called
        ctl(lab.proxy, "enable", config.name)
        driver.stop_container(container_id)
        assert [entry.hook for entry in plugin.seen] == ["PostStopContainer"]
    finally:
        lab.unregister(plugin, config)


def test_a_stop_of_an_unknown_id_is_answered_by_dockerd(docker_lab: DockerLab, driver: PodDriver) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        with pytest.raises(DriverError) as failed:
            driver.stop_container("no-such-container")
        assert "No such container: no-such-container" in str(failed.value)  # dockerd's 404, not the proxy's guess
        assert plugin.seen == []
    finally:
        lab.unregister(plugin, config)


def _create_raw(socket: Path, name: str, body: bytes) -> tuple[int, dict]:
    connection = UnixHTTPConnection(socket, timeout=WAIT_SECONDS)
    try:
        connection.request("POST", f"/v1.41/containers/create?name={name}", body,
                           {"Content-Type": "application/json", "Host": ""})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"{}")
    finally:
        connection.close()


def test_a_create_with_bytes_that_are_not_utf8_meets_the_hooks_and_lands_as_directly(docker_lab: DockerLab) -> None:
    """dockerd's Go decoder reads each such byte as U+FFFD and creates the container: through the proxy the
    plugins see it the same way (it does not slip past them) and dockerd gets what it would have got."""
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(echo=True), policy="Fail")
    body = (b'{"Image":"' + PAUSE_IMAGE.encode() + b'","Env":["SECRET=\xffpass"],"Labels":{'
            b'"io.kubernetes.docker.type":"podsandbox","io.kubernetes.container.name":"POD","app":"web\xfe"},'
            b'"HostConfig":{"NetworkMode":"none"}}')
    created: list[str] = []
    try:
        for socket, name in ((lab.dockerd.socket, "k8s_POD_direct_ns_u-d_0"), (lab.proxy.listen_path,
                                                                              "k8s_POD_proxied_ns_u-p_0")):
            status, answer = _create_raw(socket, name, body)
            assert status == 201, answer
            created.append(answer["Id"])
        direct, proxied = (lab.inspect(container_id)["Config"] for container_id in created)
        assert proxied["Env"] == direct["Env"] and "SECRET=\ufffdpass" in direct["Env"]
        assert proxied["Labels"]["app"] == direct["Labels"]["app"] == "web\ufffd"
        (seen,) = plugin.seen_by("PreRunPodSandbox")
        assert seen.labels["app"] == "web\ufffd"
    finally:
        for container_id in created:
            lab.dockerd.docker("rm", "-f", container_id, check=False)
        lab.unregister(plugin, config)


# -- the same routes spelled as dockerd also routes them -------------------------------------------------------
# dockerd percent-decodes the path and takes absolute-form targets before it routes (docker.routes): each of these
# reaches its `create`, so a Fail-policy refusal must stop them all (before: 201, the sandbox created).
CREATE_SPELLINGS = {
    "a percent-encoded letter": lambda target: target.replace("/containers/create", "/containers/%63reate"),
    "the last letter encoded": lambda target: target.replace("/containers/create", "/containers/creat%65"),
    "absolute form": lambda target: "http://docker" + target,
    "a scheme without authority": lambda target: "http:" + target,
    "an encoded version prefix": lambda target: target.replace("/v1.41/", "/%761.41/"),
}


@pytest.mark.parametrize("spelling", sorted(CREATE_SPELLINGS))
def test_a_create_spelled_as_dockerd_also_routes_it_meets_the_fail_policy_hook(docker_lab: DockerLab,
                                                                                  spelling: str) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(fail_with=grpc.StatusCode.FAILED_PRECONDITION),
                                hooks_=("PreRunPodSandbox",), policy="Fail")
    before = lab.container_ids()
    pod = pod_shape()
    try:
        with CriDockerdReplay(lab.proxy.listen_path) as replay:
            body = shapes.fill(shapes.sandbox_create_body(pod), pod.placeholders())
            target = CREATE_SPELLINGS[spelling](shapes.create_target(shapes.sandbox_name(pod)))
            with pytest.raises(ReplayError) as failed:
                replay.send("RunPodSandbox", "POST", target, body)
        assert " answered 500: " in str(failed.value) and config.name in str(failed.value), failed.value
        assert lab.container_ids() == before  # nothing reached dockerd
    finally:
        lab.unregister(plugin, config)
        for leaked in lab.container_ids() - before:
            lab.dockerd.docker("rm", "-f", leaked)


def test_an_unclean_path_is_not_routed_by_dockerd_either(docker_lab: DockerLab) -> None:
    """What the proxy relays unhooked (a path with `//`, `.` or `..`), dockerd redirects and never creates."""
    lab = docker_lab
    before = lab.container_ids()
    pod = pod_shape()
    with CriDockerdReplay(lab.proxy.listen_path) as replay:
        body = shapes.fill(shapes.sandbox_create_body(pod), pod.placeholders())
        target = shapes.create_target(shapes.sandbox_name(pod))
        for unclean in (target.replace("/containers/", "//containers/"),
                        target.replace("/containers/", "/containers/x/../"),
                        target.replace("/containers/", "/./containers/")):
            assert replay.send("RunPodSandbox", "POST", unclean, body, ok=(301,)).status == 301
    assert lab.container_ids() == before


def test_stops_spelled_otherwise_still_run_the_post_stop_hooks(docker_lab: DockerLab) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(hooks_=("PostStopContainer", "PostStopPodSandbox"))
    driver, pods = ReplayDriver(lab.proxy.listen_path), []
    try:
        _, pod_id, container_id = _run(driver, pods)
        encoded = "%" + format(ord(container_id[0]), "02x") + container_id[1:]
        with CriDockerdReplay(lab.proxy.listen_path) as replay:
            replay.send("StopContainer", "POST", f"/v1.41/containers/{encoded}/st%6fp?t=1", ok=(304,))
            replay.send("StopPodSandbox", "POST", f"http://docker/v1.41/containers/{pod_id}/stop?t=1", ok=(304,))
        assert [seen.container_meta.id for seen in plugin.seen_by("PostStopContainer")] == [container_id]
        assert len(plugin.seen_by("PostStopPodSandbox")) == 1
    finally:
        for pod_id in pods:
            driver.remove_pod(pod_id)
        driver.close()
        lab.unregister(plugin, config)
