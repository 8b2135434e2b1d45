"""The package as a user installs it carries a pod lifecycle: the built wheel in a fresh virtualenv outside the
checkout, its `koord-runtime-proxy` in front of a real containerd with a plugin on all seven hooks, and its
`runtimeproxyctl` reading the proxy's status."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy import __version__
from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.containerd import ContainerdInstance
from rplab.example_plugin import ANNOTATION, ExamplePlugin, registration
from rplab.kubelet import run_lifecycle
from rplab.loop import LoopThread
from rplab.process import ProxyProcess

from tests.kits.packages import installed_wheel

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def installed_bin() -> Path:
    return installed_wheel()


@pytest.fixture
def plugin(loop_thread: LoopThread, workdir: Path) -> Iterator[tuple[ExamplePlugin, Path]]:
    plugin = ExamplePlugin()
    socket = workdir / "installed-plugin.sock"
    loop_thread.run(plugin.start(socket))
    yield plugin, socket
    loop_thread.run(plugin.stop())


@pytest.fixture
def installed_proxy(installed_bin: Path, containerd: ContainerdInstance, workdir: Path,
                    plugin: tuple[ExamplePlugin, Path]) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(workdir / "installed" / "rp.sock", containerd.address,
                         command=[str(installed_bin / "koord-runtime-proxy")], cwd=Path("/"))
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    (proxy.hook_config_dir / "10-example.json").write_bytes(registration(plugin[1], list(HOOK_NAMES), "Fail"))
    proxy.start()
    yield proxy
    assert proxy.stop() == 0, proxy.log_tail()


def runtimeproxyctl(installed_bin: Path, proxy: ProxyProcess, *args: str) -> str:
    done = subprocess.run([str(installed_bin / "runtimeproxyctl"), f"--admin-endpoint={proxy.admin_path}", *args],
                          cwd="/", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.usefixtures("kubelet_client")
def test_the_installed_proxy_runs_a_hooked_pod_lifecycle(
    installed_bin: Path, installed_proxy: ProxyProcess, plugin: tuple[ExamplePlugin, Path], log_dir: Path,
) -> None:
    assert installed_proxy.pid is not None
    interpreter = Path(f"/proc/{installed_proxy.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert interpreter.startswith(str(installed_bin)), interpreter  # the virtualenv's, not this checkout's

    # The kubelet's side: its own CRI client over a pod's life (rplab.kubelet).
    lifecycle = run_lifecycle(installed_proxy.listen_path, log_dir, pod_name="installed-pod", binary_env=False)
    assert lifecycle.unexpected_failures() == {}
    assert "EXAMPLE_PLUGIN=hello" in lifecycle.container_env()
    running = lifecycle.running_container()
    assert running["info"]["info"]["runtimeSpec"]["linux"]["resources"]["memory"]["limit"] == 128 * MiB
    assert running["status"]["annotations"][ANNOTATION] == "PreCreateContainer"

    assert [seen.hook for seen in plugin[0].seen] == [
        "PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
        "PreUpdateContainerResources", "PostStopContainer", "PostStopPodSandbox"]
    status = json.loads(runtimeproxyctl(installed_bin, installed_proxy, "status", "-o", "json"))
    assert status["version"] == __version__
    assert (status["listen_endpoint"], status["admin_endpoint"], status.get("metrics_address", "")) == \
        (str(installed_proxy.listen_path), str(installed_proxy.admin_path), "")
    table = runtimeproxyctl(installed_bin, installed_proxy, "status")
    assert f"serving Containerd mode on {installed_proxy.listen_path}; admin {installed_proxy.admin_path}" in table
    assert "metrics off" in table
    (registered,) = status["plugins"]
    assert registered["file"] == "10-example.json"
