"""The independently written plugin (tests/wire) behind a real proxy process and real containerd.

The plugin runs from code generated out of tests/wire/independent_hooks.proto, with its own
message and field names, in its own process. What it records is what koordlet would decode
from our bytes; what it answers must land in the container the way koordlet's answers do.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import registration
from rplab.process import ProxyProcess
from runtimeproxy.hooks.names import HOOK_NAMES

pytestmark = pytest.mark.e2e

WIRE_DIR = Path(__file__).resolve().parent.parent / "wire"
MiB = 1024 * 1024
CPU_SHARES = 640
MEMORY_LIMIT = 100 * MiB
POD_PARENT = "/runtimeproxy-e2e"
HOOKED_PARENT = "/runtimeproxy-e2e/wire"
_serial = itertools.count()


def _load_wirekit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_e2e_wirekit", WIRE_DIR / "wirekit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wirekit = _load_wirekit()



class Wired:
    def __init__(self, proxy: ProxyProcess, plugin: Any) -> None:
        self.proxy = proxy
        self.plugin = plugin


@pytest.fixture
def wired(containerd: ContainerdInstance, workdir: Path) -> Iterator[Wired]:
    base = workdir / f"wire{next(_serial)}"
    base.mkdir(parents=True)
    generated = wirekit.compile_proto(base / "gen")
    plugin = wirekit.PluginProcess(
        generated, base / "plugin.sock", base / "records.jsonl",
        "--pod-cgroup-parent", HOOKED_PARENT, "--cpu-shares", str(CPU_SHARES),
        "--memory-limit", str(MEMORY_LIMIT), "--env", "WIRE_PLUGIN=independent",
    )
    plugin.start()
    proxy = ProxyProcess(base / "rp.sock", containerd.address, extra_args=["--log-level=debug"])
    try:
        proxy.start()
        # Fail: a call the plugin could not take would fail the CRI call, not pass unnoticed.
        (proxy.hook_config_dir / "10-wire.json").write_bytes(registration(plugin.socket, list(HOOK_NAMES), "Fail"))
        proxy.wait_for_log("plugin 10-wire.json ")
        yield Wired(proxy, plugin)
    finally:
        assert proxy.stop() == 0, proxy.log_tail()
        assert plugin.stop() == 0, plugin.log_text()


def runtime_spec(client: CriClient, container_id: str) -> dict:
    return json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]


def test_independent_plugin_sees_our_requests_and_its_changes_land(
    wired: Wired, served_api_version: str, log_dir: Path, cleanup_pods: list[str]
) -> None:
    client = CriClient(open_channel(wired.proxy.listen_path), served_api_version)
    api = client.api
    try:
        pod_config = client.pod_config(f"wire{next(_serial)}", log_dir, labels={"team": "wire"},
                                       annotations={"kept": "yes"}, cgroup_parent=POD_PARENT)
        pod_id = client.run_pod(pod_config)
        cleanup_pods.append(pod_id)
        container_config = client.container_config("app", envs={"KEEP": "me"}, annotations={"c": "1"})
        container_id = client.create_container(pod_id, container_config, pod_config)
        client.start_container(container_id)

        # What the plugin changed is what runs.
        env = client.exec_sync(container_id, ["env"]).stdout.decode().split()
        assert "WIRE_PLUGIN=independent" in env and "KEEP=me" in env
        spec = runtime_spec(client, container_id)
        assert spec["linux"]["resources"]["cpu"]["shares"] == CPU_SHARES
        assert spec["linux"]["resources"]["memory"]["limit"] == MEMORY_LIMIT
        assert spec["linux"]["cgroupsPath"].startswith(HOOKED_PARENT + "/")
        assert client.pod_status(pod_id).status.annotations[wirekit.ANNOTATION] == "PreRunPodSandbox"
        assert client.pod_status(pod_id).status.annotations["kept"] == "yes"
        container_annotations = client.container_status(container_id).status.annotations
        assert container_annotations[wirekit.ANNOTATION] == "PreCreateContainer" and container_annotations["c"] == "1"

        client.runtime.UpdateContainerResources(api.UpdateContainerResourcesRequest(
            container_id=container_id,
            linux=api.LinuxContainerResources(cpu_shares=300, memory_limit_in_bytes=120 * MiB),
        ), timeout=30)
        assert runtime_spec(client, container_id)["linux"]["resources"]["cpu"]["shares"] == 300
        client.stop_container(container_id)
        client.stop_pod(pod_id)
        client.remove_container(container_id)
        client.remove_pod(pod_id)
    finally:
        client.channel.close()

    records = wired.plugin.records()
    assert [record["hook"] for record in records] == [
        "PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
        "PreUpdateContainerResources", "PostStopContainer", "PostStopPodSandbox",
    ]
    assert not any(record["unknown_fields"] for record in records)
    by_hook = {record["hook"]: record["request"] for record in records}
    meta = pod_config.metadata
    identity = {"pod_name": meta.name, "pod_uid": meta.uid, "pod_namespace": meta.namespace}

    run = by_hook["PreRunPodSandbox"]
    assert run["sandbox_identity"] == identity
    assert run["pod_labels"] == {"team": "wire"}
    assert run["pod_annotations"] == {"kept": "yes"}
    assert run["parent_cgroup"] == POD_PARENT

    create = by_hook["PreCreateContainer"]
    assert create["owner_pod"] == identity
    assert create["container_mata"] == {"container_name": "app"}  # no id before CreateContainer returns
    assert create["env"] == {"KEEP": "me"}
    assert create["annotations"] == {"c": "1"}
    assert create["sandbox_parent_cgroup"] == HOOKED_PARENT  # the pod as its hook left it
    assert create["sandbox_labels"] == {"team": "wire"}
    assert create["sandbox_annotations"] == {"kept": "yes", wirekit.ANNOTATION: "PreRunPodSandbox"}

    for hook in ("PreStartContainer", "PostStartContainer", "PreUpdateContainerResources", "PostStopContainer"):
        request = by_hook[hook]
        assert request["container_mata"] == {"container_name": "app", "container_id": container_id}, hook
        assert request["owner_pod"] == identity, hook
        assert request["env"] == {"KEEP": "me", "WIRE_PLUGIN": "independent"}, hook
        assert request["sandbox_parent_cgroup"] == HOOKED_PARENT, hook
        assert request["sandbox_labels"] == {"team": "wire"}, hook
        assert request["annotations"]["c"] == "1", hook
    assert by_hook["PreStartContainer"]["resources"]["shares"] == str(CPU_SHARES)
    assert by_hook["PreStartContainer"]["resources"]["mem_limit"] == str(MEMORY_LIMIT)
    assert by_hook["PreUpdateContainerResources"]["resources"]["shares"] == "300"
    assert by_hook["PostStopContainer"]["resources"]["shares"] == "300"  # the store followed the update
    assert by_hook["PostStopContainer"]["resources"]["mem_limit"] == str(120 * MiB)

    stop_pod = by_hook["PostStopPodSandbox"]
    assert stop_pod["sandbox_identity"] == identity
    assert stop_pod["parent_cgroup"] == HOOKED_PARENT
    assert stop_pod["pod_annotations"][wirekit.ANNOTATION] == "PreRunPodSandbox"


def test_a_pod_moved_by_pre_run_pod_sandbox_alone_takes_its_containers_along(
    wired: Wired, log_dir: Path, cleanup_pods: list[str]
) -> None:
    """containerd places a container under CreateContainer's sandbox_config cgroup parent."""
    config = wired.proxy.hook_config_dir / "10-wire.json"
    config.write_bytes(registration(wired.plugin.socket, ["PreRunPodSandbox"], "Fail"))
    wired.proxy.wait_for_log("plugin 10-wire.json changed")
    client = CriClient(open_channel(wired.proxy.listen_path))
    try:
        pod_config = client.pod_config(f"wire{next(_serial)}", log_dir, cgroup_parent=POD_PARENT)
        pod_id = client.run_pod(pod_config)
        cleanup_pods.append(pod_id)
        container_id = client.create_container(pod_id, client.container_config("app"), pod_config)
        pod_spec = json.loads(client.pod_status(pod_id, verbose=True).info["info"])["runtimeSpec"]
        spec = runtime_spec(client, container_id)
    finally:
        client.channel.close()
    assert pod_spec["linux"]["cgroupsPath"].startswith(HOOKED_PARENT + "/")
    assert spec["linux"]["cgroupsPath"].startswith(HOOKED_PARENT + "/")
    assert spec["linux"].get("resources", {}).get("cpu", {}).get("shares") != CPU_SHARES  # no container hook ran
    assert [record["hook"] for record in wired.plugin.records()] == ["PreRunPodSandbox"]
