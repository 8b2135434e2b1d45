"""Hook plugins in Docker mode: crictl → cri-dockerd → proxy → dockerd, what plugins change lands in dockerd.

Real parts: a private dockerd, the proxy process in Docker mode (its own, restarted in one test),
cri-dockerd in front of it, crictl, and the example plugin served in this process.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from runtimeproxy.lab.dockerd import CriDockerd, DockerdInstance, DockerModeProxy
from runtimeproxy.lab.example_plugin import ANNOTATION, ExamplePlugin, ExampleSettings, registration
from runtimeproxy.lab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from runtimeproxy.lab.loop import LoopThread
from runtimeproxy.options import DEFAULT_SKIP_LABEL_KEY
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks.plugins import HOOK_NAMES

from machinekit import require_tool

HOST_NETWORK = {"network": 2}
MiB = 1024 * 1024
POD_CGROUP_PARENT = "/rp-docker/hooked"
WAIT_SECONDS = 15.0
UPDATED_SHARES = 700
_serial = itertools.count()


class UpdatingPlugin(ExamplePlugin):
    """The example plugin, which also raises CPU shares on every update."""

    async def PreUpdateContainerResourcesHook(self, request: hooks.ContainerResourceHookRequest,
                                              context: grpc.aio.ServicerContext) -> hooks.ContainerResourceHookResponse:
        def answer() -> hooks.ContainerResourceHookResponse:
            resources = hooks.LinuxContainerResources()
            resources.CopyFrom(request.container_resources)
            resources.cpu_shares = UPDATED_SHARES
            return hooks.ContainerResourceHookResponse(container_resources=resources)

        return await self._handle("PreUpdateContainerResources", request, context, answer)


@dataclass
class DockerLab:
    dockerd: DockerdInstance
    proxy: DockerModeProxy
    crictl_binary: Path
    cri: CriDockerd
    loop: LoopThread
    base: Path

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        endpoint = f"unix://{self.cri.socket}"
        result = subprocess.run(
            [str(self.crictl_binary), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
             "--timeout", "30s", *args], capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, f"crictl {' '.join(args)}: {result.stderr}\n{self.proxy.log_tail()}"
        return result

    def plugin(self, settings: ExampleSettings | None = None, kind: type[ExamplePlugin] = ExamplePlugin,
               hooks_: tuple[str, ...] = HOOK_NAMES, policy: str = "Ignore") -> tuple[ExamplePlugin, Path]:
        plugin = kind(settings)
        socket = self.base / f"plugin{next(_serial)}.sock"
        self.loop.run(plugin.start(socket))
        config = self.proxy.hook_config_dir / f"{next(_serial):02d}-example.json"
        seen = log_count(self.proxy, f"plugin {config.name} registered")
        config.write_bytes(registration(socket, list(hooks_), policy))
        wait_for_log(self.proxy, f"plugin {config.name} registered", seen)
        return plugin, config

    def unregister(self, plugin: ExamplePlugin, config: Path) -> None:
        config.unlink()
        wait_for_log(self.proxy, f"plugin {config.name} removed")
        self.loop.run(plugin.stop())

    def configs(self, tmp_path: Path, labels: dict[str, str] | None = None) -> tuple[Path, Path]:
        pod = {
            "metadata": {"name": f"hk{next(_serial)}", "namespace": "default", "uid": str(uuid.uuid4())},
            "log_directory": str(tmp_path), "labels": {"app": "rp-docker", **(labels or {})},
            "annotations": {"team": "a"},
            "linux": {"cgroup_parent": "/rp-docker", "security_context": {"namespace_options": HOST_NETWORK}},
        }
        container = {
            "metadata": {"name": "box"}, "image": {"image": BUSYBOX_IMAGE},
            "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            "envs": [{"key": "KEEP", "value": "me"}, {"key": "ALSO", "value": "kept"}],
            "log_path": "box.log", "linux": {"security_context": {"namespace_options": HOST_NETWORK}},
        }
        (tmp_path / "pod.json").write_text(json.dumps(pod))
        (tmp_path / "container.json").write_text(json.dumps(container))
        return tmp_path / "pod.json", tmp_path / "container.json"

    def container_ids(self) -> set[str]:
        return set(self.dockerd.docker("ps", "-aq", "--no-trunc").stdout.decode().split())

    def inspect(self, container_id: str) -> dict:
        return json.loads(self.dockerd.docker("inspect", container_id).stdout)[0]


def log_count(proxy: DockerModeProxy, text: str) -> int:
    return proxy.log_path.read_text(errors="replace").count(text)


def wait_for_log(proxy: DockerModeProxy, text: str, seen_before: int = 0) -> None:
    """Until the log holds `text` more than `seen_before` times (the log is appended across restarts)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while log_count(proxy, text) <= seen_before:
        assert time.monotonic() < deadline, f"{text!r} not in the proxy log:\n{proxy.log_tail()}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def docker_lab(dockerd: DockerdInstance, crictl_binary: Path, workdir: Path,
               loop_thread: LoopThread) -> Iterator[DockerLab]:
    base = workdir / "dkhooks"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    proxy.start()
    cri = CriDockerd(require_tool("cri-dockerd"), base / "cridk", proxy.listen_path, PAUSE_IMAGE)
    lab = DockerLab(dockerd, proxy, crictl_binary, cri, loop_thread, base)
    cri.start(ready=lambda: lab.crictl("version", check=False).returncode == 0)
    try:
        yield lab
    finally:
        cri.stop()
        assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture
def pods(docker_lab: DockerLab) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for pod_id in created:
        docker_lab.crictl("stopp", pod_id, check=False)
        docker_lab.crictl("rmp", pod_id, check=False)


def _run(lab: DockerLab, tmp_path: Path, pods: list[str], labels: dict[str, str] | None = None) -> tuple[str, str]:
    pod_config, container_config = lab.configs(tmp_path, labels)
    pod_id = lab.crictl("runp", str(pod_config)).stdout.strip()
    pods.append(pod_id)
    container_id = lab.crictl("create", pod_id, str(container_config), str(pod_config)).stdout.strip()
    lab.crictl("start", container_id)
    return pod_id, container_id


def test_a_plugin_on_all_seven_hooks_changes_what_dockerd_runs(docker_lab: DockerLab, tmp_path: Path,
                                                                 pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(pod_cgroup_parent=POD_CGROUP_PARENT), kind=UpdatingPlugin)
    try:
        pod_id, container_id = _run(lab, tmp_path, pods)
        sandbox = lab.inspect(pod_id)
        assert sandbox["HostConfig"]["CgroupParent"] == POD_CGROUP_PARENT, lab.proxy.log_tail(60)
        assert sandbox["Config"]["Labels"][f"annotation.{ANNOTATION}"] == "PreRunPodSandbox"
        container = lab.inspect(container_id)
        assert container["HostConfig"]["CpuShares"] == 512
        assert container["HostConfig"]["Memory"] == 128 * MiB
        assert container["HostConfig"]["CgroupParent"] == POD_CGROUP_PARENT  # follows the moved pod
        env = container["Config"]["Env"]
        assert env.index("KEEP=me") < env.index("ALSO=kept") and "EXAMPLE_PLUGIN=hello" in env
        assert container["Config"]["Labels"][f"annotation.{ANNOTATION}"] == "PreCreateContainer"

        lab.crictl("update", "--memory", str(64 * MiB), container_id)
        updated = lab.inspect(container_id)["HostConfig"]
        assert (updated["Memory"], updated["CpuShares"]) == (64 * MiB, UPDATED_SHARES)
        (seen_update,) = plugin.seen_by("PreUpdateContainerResources")
        assert seen_update.container_resources.cpu_shares == 512  # effective resources, not the update alone
        assert seen_update.container_resources.memory_limit_in_bytes == 64 * MiB
        lab.crictl("stop", container_id)
        lab.crictl("stopp", pod_id)

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
        docker_lab: DockerLab, tmp_path: Path, pods: list[str], hook: str) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(fail_with=grpc.StatusCode.FAILED_PRECONDITION),
                                hooks_=(hook,), policy="Fail")
    before = lab.container_ids()
    try:
        pod_config, container_config = lab.configs(tmp_path)
        if hook == "PreRunPodSandbox":
            failed = lab.crictl("runp", str(pod_config), check=False)
        else:
            pod_id = lab.crictl("runp", str(pod_config)).stdout.strip()
            pods.append(pod_id)
            before.add(pod_id)
            failed = lab.crictl("create", pod_id, str(container_config), str(pod_config), check=False)
        assert failed.returncode != 0
        assert config.name in failed.stderr and hook in failed.stderr, failed.stderr
        assert lab.container_ids() == before  # nothing reached dockerd
    finally:
        lab.unregister(plugin, config)


def test_a_pod_with_the_skip_label_gets_no_hooks(docker_lab: DockerLab, tmp_path: Path, pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        pod_id, container_id = _run(lab, tmp_path, pods, labels={DEFAULT_SKIP_LABEL_KEY: "true"})
        lab.crictl("stop", container_id)
        assert plugin.seen == []
        assert lab.inspect(container_id)["HostConfig"]["CpuShares"] != 512
    finally:
        lab.unregister(plugin, config)


def test_after_a_proxy_restart_hooks_still_get_full_context(docker_lab: DockerLab, tmp_path: Path,
                                                             pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin(ExampleSettings(pod_cgroup_parent=POD_CGROUP_PARENT))
    try:
        pod_id, container_id = _run(lab, tmp_path, pods)
        rebuilt = log_count(lab.proxy, "store rebuilt from dockerd")
        assert lab.proxy.stop() == 0
        lab.proxy.start()  # the store is rebuilt from dockerd (list + inspect)
        wait_for_log(lab.proxy, "store rebuilt from dockerd", rebuilt)
        lab.crictl("update", "--memory", str(96 * MiB), container_id)
        lab.crictl("stop", container_id)
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


def test_runtimeproxyctl_status_and_toggles_work_in_docker_mode(docker_lab: DockerLab, tmp_path: Path,
                                                                 pods: list[str]) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        status = json.loads(ctl(lab.proxy, "status", "-o", "json").stdout)
        assert config.name in [entry["file"] for entry in status["plugins"]]
        (backend,) = status["backends"]
        assert backend["endpoint"] == f"unix://{lab.dockerd.socket}"
        ctl(lab.proxy, "disable", config.name, "--reason", "e2e")
        _, container_id = _run(lab, tmp_path, pods)
        assert plugin.seen == []  # disabled on this node: no hook called
        ctl(lab.proxy, "enable", config.name)
        lab.crictl("stop", container_id)
        assert [entry.hook for entry in plugin.seen] == ["PostStopContainer"]
    finally:
        lab.unregister(plugin, config)


def test_a_stop_of_an_unknown_id_is_answered_by_dockerd(docker_lab: DockerLab) -> None:
    lab = docker_lab
    plugin, config = lab.plugin()
    try:
        result = subprocess.run(["docker", "-H", f"unix://{lab.proxy.listen_path}", "stop", "no-such-container"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert "No such container: no-such-container" in result.stderr  # dockerd's 404, not the proxy's guess
        assert plugin.seen == []
    finally:
        lab.unregister(plugin, config)
