"""An operator on a node with real containerd: runtimeproxyctl against a blocking plugin, Prometheus scraping.

Starts: the session's private containerd, proxy processes with private admin sockets, state dirs
and metrics ports, runtimeproxyctl as a process, and (for the metrics test) Debian's `prometheus`.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ExamplePlugin, registration
from rplab.kubelet import run_lifecycle
from rplab.loop import LoopThread
from rplab.process import ProxyProcess

from tests.kits.machine import refused_dials, require_command

_serial = itertools.count()
PROMETHEUS_START_TIMEOUT_SECONDS = 60.0


def ctl(proxy: ProxyProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """runtimeproxyctl as an operator runs it (a separate process; PYTHONPATH is inherited)."""
    return subprocess.run(
        [sys.executable, "-m", "runtimeproxy.admin.ctl", f"--admin-endpoint={proxy.admin_path}", *args],
        capture_output=True, text=True, timeout=60,
    )


def status(proxy: ProxyProcess) -> dict:
    result = ctl(proxy, "status", "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_for_plugin(proxy: ProxyProcess, name: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        plugins = {p["file"]: p for p in status(proxy)["plugins"]}
        if name in plugins:
            return plugins[name]
        assert time.monotonic() < deadline, f"{name} never registered:\n{proxy.log_tail()}"
        time.sleep(0.1)


def start_pod(client: CriClient, log_dir: Path, cleanup: list[str]) -> str:
    """A pod with one running container, through the proxy; raises grpc.RpcError if a hook blocks it."""
    pod_config = client.pod_config(f"operated{next(_serial)}", log_dir)
    pod_id = client.run_pod(pod_config)
    cleanup.append(pod_id)
    container_id = client.create_container(pod_id, client.container_config("app"), pod_config)
    client.start_container(container_id)
    return pod_id


def assert_blocked(client: CriClient, log_dir: Path, cleanup: list[str]) -> None:
    with pytest.raises(grpc.RpcError) as blocked:
        start_pod(client, log_dir, cleanup)
    assert blocked.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "blocker.json" in blocked.value.details()


@pytest.fixture
def node(containerd: ContainerdInstance, workdir: Path) -> Iterator[ProxyProcess]:
    base = workdir / f"ops{next(_serial)}"
    proxy = ProxyProcess(base / "rp.sock", containerd.address, extra_args=["--log-format=json"])
    proxy.start()
    try:
        yield proxy
    finally:
        assert proxy.stop() == 0, proxy.log_tail()


def test_disable_a_blocking_plugin_survive_a_restart_enable_it_again(
    node: ProxyProcess, log_dir: Path, cleanup_pods: list[str]
) -> None:
    # A Fail-policy plugin whose socket nobody serves: every pod creation fails.
    dead_socket = node.listen_path.parent / "dead-plugin.sock"
    (node.hook_config_dir / "blocker.json").write_bytes(registration(dead_socket, ["PreRunPodSandbox"], "Fail"))
    plugin = wait_for_plugin(node, "blocker.json")
    assert plugin["failure_policy"] == "Fail" and plugin["enabled"]
    with open_channel(node.listen_path) as channel:
        client = CriClient(channel)
        assert_blocked(client, log_dir, cleanup_pods)

        # status shows it failing
        (hook,) = wait_for_plugin(node, "blocker.json")["hook_stats"]
        assert hook["hook"] == "PreRunPodSandbox" and hook["failures"] >= 1
        assert hook["last_error"].startswith("UNAVAILABLE")
        table = ctl(node, "status").stdout
        assert "blocker.json  enabled" in table and "policy Fail" in table

        # disable: pods start
        result = ctl(node, "disable", "blocker", "--reason", "plugin down, Fail policy blocks pods")
        assert result.returncode == 0, result.stderr
        start_pod(client, log_dir, cleanup_pods)
    # One JSON log line per event, with the plugin (and hook, code) as fields.
    entries = [json.loads(line) for line in node.log_path.read_text().splitlines()]
    (toggled,) = [e for e in entries if e["message"].startswith("disabled blocker.json (all hooks)")]
    assert toggled["plugin"] == "blocker.json" and toggled["level"] == "warning"
    failed = [e for e in entries if e.get("code") == "UNAVAILABLE"]
    assert failed and failed[0]["plugin"] == "blocker.json" and failed[0]["hook"] == "PreRunPodSandbox"

    # restart the proxy process: still disabled, pods still start
    assert node.stop() == 0, node.log_tail()
    node.start()
    plugin = wait_for_plugin(node, "blocker.json")
    assert not plugin["enabled"] and plugin["disabled_reason"] == "plugin down, Fail policy blocks pods"
    with open_channel(node.listen_path) as channel:
        client = CriClient(channel)
        start_pod(client, log_dir, cleanup_pods)

        # enable: blocked again
        result = ctl(node, "enable", "blocker.json")
        assert result.returncode == 0, result.stderr
        assert wait_for_plugin(node, "blocker.json")["enabled"]
        assert_blocked(client, log_dir, cleanup_pods)


def test_a_typo_exits_3_and_a_hook_toggle_keeps_the_plugin_toggle_s_reason(node: ProxyProcess) -> None:
    """Issue 18, as an operator meets it: a typo'd name changed nothing yet exited 0, and a
    per-hook toggle rewrote the reason of the whole-plugin one."""
    plugin_socket = node.listen_path.parent / "koordlet.sock"
    (node.hook_config_dir / "koordlet.json").write_bytes(
        registration(plugin_socket, ["PreRunPodSandbox", "PreCreateContainer"], "Fail"))
    wait_for_plugin(node, "koordlet.json")

    typo = ctl(node, "disable", "koordlett", "--reason", "INC-42: koordlet crash-looping")
    assert (typo.returncode, typo.stdout) == (3, "")
    assert typo.stderr == ("runtimeproxyctl: no plugin koordlett is registered (registered: koordlet.json); "
                           "did you mean koordlet? To stage a toggle for a file that is not there yet, add --stage\n")
    assert ctl(node, "enable", "nothere").returncode == 3
    assert status(node)["toggles"] == []

    assert ctl(node, "disable", "koordlet", "--reason", "INC-42: koordlet crash-looping").returncode == 0
    hook = ctl(node, "disable", "koordlet", "--hook", "PreCreateContainer", "--reason", "cpuset bug")
    assert hook.returncode == 0, hook.stderr
    staged = ctl(node, "disable", "nri", "--stage", "--reason", "roll-out pending")
    assert staged.returncode == 0, staged.stderr

    assert node.stop() == 0, node.log_tail()
    node.start()  # the reasons come back from the state file
    wait_for_plugin(node, "koordlet.json")
    toggles = status(node)["toggles"]
    assert [(t["plugin"], t["hooks"], t["reason"], t["staged"]) for t in toggles] == [
        ("koordlet.json", [], "INC-42: koordlet crash-looping", False),
        ("koordlet.json", ["PreCreateContainer"], "cpuset bug", False),
        ("nri.json", [], "roll-out pending", True),
    ]
    assert all(t["author"] and t["since_unix_seconds"] > 0 for t in toggles)
    table = ctl(node, "status").stdout
    assert "koordlet.json  DISABLED (INC-42: koordlet crash-looping)" in table and "nri.json (staged)" in table


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prometheus_query(port: int, query: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.fixture
def prometheus_binary() -> str:
    return require_command("prometheus", "prometheus")


@pytest.mark.usefixtures("kubelet_client")
def test_prometheus_scrapes_the_calls_of_a_pod_lifecycle(
    containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread, prometheus_binary: str, log_dir: Path,
) -> None:
    base = workdir / f"prom{next(_serial)}"
    metrics_port, prometheus_port = free_port(), free_port()
    proxy = ProxyProcess(base / "rp.sock", containerd.address,
                         extra_args=[f"--metrics-bind-address=127.0.0.1:{metrics_port}"])
    proxy.start()
    plugin = ExamplePlugin()
    plugin_socket = base / "example.sock"
    loop_thread.run(plugin.start(plugin_socket))
    (base / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n- job_name: runtimeproxy\n  static_configs:\n  - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    with open(base / "prometheus.log", "wb") as prometheus_log:
        prometheus = subprocess.Popen(
            [prometheus_binary, f"--config.file={base / 'prometheus.yml'}", f"--storage.tsdb.path={base / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=prometheus_log, stderr=subprocess.STDOUT,
        )
    try:
        (proxy.hook_config_dir / "example.json").write_bytes(
            registration(plugin_socket, ["PreRunPodSandbox", "PreCreateContainer"]))
        wait_for_plugin(proxy, "example.json")
        # The kubelet's side: its own CRI client over a pod's life (rplab.kubelet).
        lifecycle = run_lifecycle(proxy.listen_path, log_dir, pod_name="scraped-pod", binary_env=False)
        assert lifecycle.unexpected_failures() == {}

        queries = {
            'runtimeproxy_cri_calls_total{method="RunPodSandbox",code="OK"}': 1.0,
            'runtimeproxy_cri_calls_total{method="RemovePodSandbox",code="OK"}': 1.0,
            'runtimeproxy_hook_calls_total{plugin="example.json",hook="PreCreateContainer",outcome="ok"}': 1.0,
            'runtimeproxy_hook_changes_applied_total{plugin="example.json",hook="PreRunPodSandbox"}': 1.0,
            'runtimeproxy_cri_call_duration_seconds_count{method="CreateContainer"}': 1.0,
            'runtimeproxy_backend_reachable{role="runtime"}': 1.0,
            "runtimeproxy_plugins_registered": 1.0,
        }
        deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT_SECONDS
        missing = dict(queries)
        while missing:
            assert prometheus.poll() is None, (base / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"never seen through Prometheus: {missing}"
            for query, expected in list(missing.items()):
                try:
                    result = prometheus_query(prometheus_port, query)
                except OSError:
                    break  # Prometheus is still starting
                if result and float(result[0]["value"][1]) >= expected:
                    del missing[query]
            time.sleep(0.5)
    finally:
        prometheus.terminate()
        prometheus.wait(30)
        loop_thread.run(plugin.stop())
        assert proxy.stop() == 0, proxy.log_tail()


def test_a_burst_of_300_dials_is_queued_on_the_cri_and_admin_sockets(node: ProxyProcess) -> None:
    """gRPC listens with the kernel's backlog (somaxconn) as containerd does: a burst of kubelet dials is queued."""
    for socket_path in (node.listen_path, node.admin_path):
        assert refused_dials(socket_path, 300) == 0, socket_path


def test_runtimeproxyctl_aimed_at_a_cri_socket_names_the_admin_socket(
    node: ProxyProcess, containerd: ContainerdInstance
) -> None:
    """containerd's own socket, and the proxy's CRI socket (which relays to it): containerd's `unknown service
    runtimeproxy.admin.v1.Admin` becomes one line saying this is not the admin socket and how to name it."""
    for cri_socket in (Path(containerd.address), node.listen_path):
        result = subprocess.run([sys.executable, "-m", "runtimeproxy.admin.ctl", f"--admin-endpoint={cri_socket}",
                                 "status"], capture_output=True, text=True, timeout=60)
        assert (result.returncode, result.stdout) == (1, ""), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"runtimeproxyctl: {cri_socket} is not a runtimeproxy admin socket"), \
            result.stderr
        assert "--admin-endpoint" in result.stderr and "RUNTIMEPROXY_ADMIN_ENDPOINT" in result.stderr
