"""crictl, the CRI reference client, through the proxy against real containerd: every command a node operator
uses, each compared with the same command direct where the output is comparable.

Every test runs through a bare proxy and through a proxy with an echo plugin on all seven hooks (policy
Fail), in the conformance lab (local registry for ``pull``, CNI bridge for pod-network pods).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rplab.conformance import ConformanceLab, echo_record
from rplab.conformance_images import CRI_TOOLS, NGINX_REF, WEB_PORT
from rplab.images import BUSYBOX_IMAGE
from rplab.process import ProxyProcess
from rplab.registry import free_port
from runtimeproxy.hooks.names import HOOK_NAMES

CRICTL_TIMEOUT_SECONDS = 120
HTTP_WAIT_SECONDS = 30
PULLED_IMAGE = CRI_TOOLS + "test-image-latest:latest"
WORKLOAD_IMAGE = BUSYBOX_IMAGE  # imported by the lab: `crictl create` does not pull
HOST_NETWORK = {"network": 2, "pid": 1}
POD_CGROUP_PARENT = "/runtimeproxy-crictl"
HOOKED_PROXY_NAME = "crictl-hooked"  # conftest's conformance_hooked_proxy

Crictl = Callable[..., str]


def crictl_on(binary: Path, socket: str | Path) -> Crictl:
    def run(*args: str, stdin: str | None = None) -> str:
        endpoint = f"unix://{socket}"
        result = subprocess.run(
            [str(binary), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, "--timeout", "60s", *args],
            capture_output=True, text=True, timeout=CRICTL_TIMEOUT_SECONDS, input=stdin,
        )
        assert result.returncode == 0, f"crictl {' '.join(args)} via {socket}: {result.stderr}"
        return result.stdout

    return run


@pytest.fixture(scope="module", autouse=True)
def remove_pod_cgroup_parent() -> Iterator[None]:
    """The pods' cgroup parent outlives them (cgroup v1 leaves the empty directories): remove it afterwards."""
    yield
    for directory in Path("/sys/fs/cgroup").glob(f"*{POD_CGROUP_PARENT}"):
        try:
            directory.rmdir()
        except OSError:
            pass  # still in use, or a named hierarchy that never had it


@pytest.fixture(scope="module", params=["proxy", "proxy+plugin"])
def proxy(request: pytest.FixtureRequest) -> ProxyProcess:
    name = "conformance_proxy" if request.param == "proxy" else "conformance_hooked_proxy"
    return request.getfixturevalue(name)


@pytest.fixture(scope="module")
def hook_record(proxy: ProxyProcess, conformance_lab: ConformanceLab) -> Path | None:
    """The echo plugin's record of hook calls when ``proxy`` is the hooked one, else None."""
    hooked = conformance_lab.base_dir / HOOKED_PROXY_NAME
    return echo_record(conformance_lab, HOOKED_PROXY_NAME) if hooked in proxy.listen_path.parents else None


@pytest.fixture(scope="module")
def proxied(crictl_binary: Path, proxy: ProxyProcess) -> Crictl:
    return crictl_on(crictl_binary, proxy.listen_path)


@pytest.fixture(scope="module")
def direct(crictl_binary: Path, conformance_lab: ConformanceLab) -> Crictl:
    return crictl_on(crictl_binary, conformance_lab.containerd.address)


def write_json(path: Path, document: dict[str, object]) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def pod_config(tmp_path: Path, name: str, *, host_network: bool) -> str:
    # A cgroup parent: containerd 1.6 has no pod stats (statsp) for a pod without one.
    linux: dict[str, object] = {"cgroup_parent": POD_CGROUP_PARENT}
    if host_network:
        linux["security_context"] = {"namespace_options": HOST_NETWORK}
    document: dict[str, object] = {
        "metadata": {"name": name, "namespace": "crictl", "uid": str(uuid.uuid4())},
        "log_directory": str(tmp_path / name),
        "linux": linux,
    }
    if not host_network:
        document["hostname"] = name  # host-network pods may not set one
    return write_json(tmp_path / f"{name}.json", document)


def container_config(tmp_path: Path, name: str, image: str, command: list[str] | None = None,
                     **extra: object) -> str:
    document: dict[str, object] = {"metadata": {"name": name}, "image": {"image": image}, "log_path": f"{name}.log",
                                   **extra}
    if command:
        document["command"] = command
    return write_json(tmp_path / f"{name}-container.json", document)


@pytest.fixture
def pods(direct: Crictl) -> Iterator[list[str]]:
    """Pods a test registers are removed (directly) whatever its outcome."""
    ids: list[str] = []
    yield ids
    for pod_id in ids:
        for command in ("stopp", "rmp"):
            try:
                direct(command, pod_id)
            except AssertionError:
                pass


def http_get_until_ok(url: str) -> int:
    """Status of GET ``url``, retried until it answers (bounded)."""
    deadline = time.monotonic() + HTTP_WAIT_SECONDS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def without_volatile(document: object) -> object:
    """crictl JSON without fields that change between two reads of the same object."""
    if isinstance(document, dict):
        return {k: without_volatile(v) for k, v in document.items() if k not in {"timestamp", "usageBytes"}}
    if isinstance(document, list):
        return [without_volatile(v) for v in document]
    return document


def test_runtime_and_image_queries_match_direct(proxied: Crictl, direct: Crictl) -> None:
    assert proxied("version") == direct("version")
    assert "containerd" in proxied("version")
    assert json.loads(proxied("info"))["status"] == json.loads(direct("info"))["status"]
    proxied("pull", PULLED_IMAGE)
    assert proxied("images") == direct("images")
    assert PULLED_IMAGE.rsplit(":", 1)[0] in proxied("images")
    assert json.loads(proxied("inspecti", PULLED_IMAGE)) == json.loads(direct("inspecti", PULLED_IMAGE))
    proxied("rmi", PULLED_IMAGE)
    assert PULLED_IMAGE.rsplit(":", 1)[0] not in direct("images")


def test_host_network_pod_lifecycle(proxied: Crictl, direct: Crictl, tmp_path: Path, pods: list[str],
                                    hook_record: Path | None) -> None:
    pod = pod_config(tmp_path, "crictl-host", host_network=True)
    pod_id = proxied("runp", pod).strip()
    pods.append(pod_id)
    box = container_config(tmp_path, "box", WORKLOAD_IMAGE,
                           ["sh", "-c", "echo started; trap 'exit 0' TERM; while true; do sleep 1; done"])
    container_id = proxied("create", pod_id, box, pod).strip()
    proxied("start", container_id)

    assert proxied("ps", "-a", "--pod", pod_id) == direct("ps", "-a", "--pod", pod_id)
    assert container_id[:13] in proxied("ps", "--pod", pod_id)
    assert proxied("pods", "--id", pod_id) == direct("pods", "--id", pod_id)
    assert json.loads(proxied("inspect", container_id)) == json.loads(direct("inspect", container_id))
    assert json.loads(proxied("inspectp", pod_id)) == json.loads(direct("inspectp", pod_id))

    assert proxied("exec", "-s", container_id, "echo", "sync") == direct("exec", "-s", container_id, "echo", "sync")
    assert proxied("exec", "-s", container_id, "echo", "sync").strip() == "sync"
    assert proxied("exec", container_id, "echo", "streamed").strip() == "streamed"  # the streaming server
    assert proxied("exec", "-i", container_id, "sh", "-c", "read x; echo got:$x", stdin="hello\n").strip() == "got:hello"
    assert "started" in proxied("logs", container_id)
    assert proxied("logs", container_id) == direct("logs", container_id)

    stats = json.loads(proxied("stats", "-o", "json", "--id", container_id))["stats"]
    assert [s["attributes"]["id"] for s in stats] == [container_id]
    pod_stats = json.loads(proxied("statsp", "-o", "json", "--id", pod_id))["stats"]
    assert [s["attributes"]["id"] for s in pod_stats] == [pod_id]

    proxied("update", "--cpu-share", "256", "--memory", str(96 * 1024 * 1024), container_id)
    resources = json.loads(direct("inspect", container_id))["info"]["runtimeSpec"]["linux"]["resources"]
    assert resources["cpu"]["shares"] == 256 and resources["memory"]["limit"] == 96 * 1024 * 1024

    proxied("stop", container_id)
    assert "Exited" in direct("inspect", "-o", "table", container_id) or \
        json.loads(direct("inspect", container_id))["status"]["state"] == "CONTAINER_EXITED"
    proxied("rm", container_id)
    proxied("stopp", pod_id)
    proxied("rmp", pod_id)
    assert direct("pods", "-q", "--id", pod_id).strip() == ""
    if hook_record is not None:  # runp ... stopp went through the echo plugin, policy Fail, and all succeeded
        hooks = {json.loads(line)["hook"] for line in hook_record.read_text().splitlines()}
        assert hooks == set(HOOK_NAMES)


def test_attach(proxied: Crictl, tmp_path: Path, pods: list[str]) -> None:
    pod = pod_config(tmp_path, "crictl-attach", host_network=True)
    pod_id = proxied("runp", pod).strip()
    pods.append(pod_id)
    reader = container_config(tmp_path, "reader", WORKLOAD_IMAGE, ["sh", "-c", "read line; echo attached:$line"],
                              stdin=True, stdin_once=True)
    container_id = proxied("create", pod_id, reader, pod).strip()
    proxied("start", container_id)
    assert "attached:hello" in proxied("attach", "-i", container_id, stdin="hello\n")


def test_bridge_pod_serves_and_port_forwards(proxied: Crictl, direct: Crictl, crictl_binary: Path,
                                             proxy: ProxyProcess, tmp_path: Path, pods: list[str]) -> None:
    pod = pod_config(tmp_path, "crictl-bridge", host_network=False)
    pod_id = proxied("runp", pod).strip()
    pods.append(pod_id)
    ip = json.loads(proxied("inspectp", pod_id))["status"]["network"]["ip"]
    assert ip and json.loads(direct("inspectp", pod_id))["status"]["network"]["ip"] == ip
    web = container_config(tmp_path, "web", NGINX_REF)
    proxied("pull", NGINX_REF)
    container_id = proxied("create", pod_id, web, pod).strip()
    proxied("start", container_id)
    assert http_get_until_ok(f"http://{ip}:{WEB_PORT}/") == 200  # over the CNI bridge

    local_port = free_port()
    endpoint = f"unix://{proxy.listen_path}"
    forward = subprocess.Popen([str(crictl_binary), "--runtime-endpoint", endpoint, "port-forward", pod_id,
                                f"{local_port}:{WEB_PORT}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert http_get_until_ok(f"http://127.0.0.1:{local_port}/") == 200  # through the streaming server
    finally:
        forward.terminate()
        forward.wait(10)
    proxied("stopp", pod_id)
    proxied("rmp", pod_id)

