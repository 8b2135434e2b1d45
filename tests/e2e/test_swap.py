"""Swap follows a plugin's memory limit, against the real runtimes (issue 17's reproduction).

The kubelet on cgroup v1 sends memory_swap_limit_in_bytes == memory_limit_in_bytes ("no swap"); cri-dockerd
sends MemorySwap == Memory. A plugin that raises memory and echoes swap (koordlet) used to leave swap below
memory: containerd created the container and runc failed StartContainer; dockerd refused the create.
CRI mode: the proxy in front of a private containerd. Docker mode: the proxy in front of a private dockerd,
driven with cri-dockerd-shaped bodies over raw HTTP (no cri-dockerd needed).
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rplab.cri import CriClient, open_channel
from rplab.dockerd import DockerdInstance, DockerModeProxy, UnixHTTPConnection
from rplab.example_plugin import ExamplePlugin, ExampleSettings, registration
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

from test_hooks import (  # noqa: F401 (lab: the fixture)
    Lab, cgroup_value, lab, run_pod_with_container, spec_of, update_resources,
)

MiB = 1024 * 1024
HOOKS = ["PreCreateContainer", "PreUpdateContainerResources"]


def memory_and_swap(client: CriClient, container_id: str) -> tuple[int, int, str, str]:
    """Spec memory and swap limits, and the cgroup's memory.limit_in_bytes and memory.memsw.limit_in_bytes."""
    spec = spec_of(client, container_id)
    memory = spec["linux"]["resources"]["memory"]
    return (memory["limit"], memory["swap"], cgroup_value(spec, "memory", "memory.limit_in_bytes"),
            cgroup_value(spec, "memory", "memory.memsw.limit_in_bytes"))


def expected(size: int) -> tuple[int, int, str, str]:
    return size, size, str(size), str(size)


def no_swap(size: int) -> dict[str, int]:
    return {"memory_limit_in_bytes": size, "memory_swap_limit_in_bytes": size}


@pytest.fixture
def swap_controller() -> None:
    if not Path("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists():
        pytest.skip("needs cgroup v1 with the swap controller (memory.memsw.*), where the kubelet sends swap")


def test_cri_swap_follows_memory_on_create_update_and_after_a_restart(
    swap_controller: None, lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    settings = ExampleSettings(memory_limit_in_bytes=96 * MiB, update_memory_limit_in_bytes=128 * MiB)
    plugin, socket = lab.plugin(settings)
    lab.register("10-koordlet-like.json", socket, HOOKS)
    api = lab.client.api

    # CreateContainer with the kubelet's 64 MiB / 64 MiB; the plugin answers 96 MiB: the container starts.
    _, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods,
                                             resources=api.LinuxContainerResources(**no_swap(64 * MiB)))
    assert memory_and_swap(lab.client, container_id) == expected(96 * MiB)

    # An in-place resize: the kubelet sends both limits; the plugin answers 128 MiB.
    update_resources(lab.client, container_id, **no_swap(64 * MiB))
    assert memory_and_swap(lab.client, container_id) == expected(128 * MiB)

    # A new proxy process (its store refilled from containerd); a CPU-only update, the plugin answers 160 MiB.
    assert lab.proxy.stop() == 0
    lab.proxy.start()
    settings.update_memory_limit_in_bytes = 160 * MiB
    client = CriClient(open_channel(lab.proxy.listen_path))
    try:
        update_resources(client, container_id, cpu_shares=300)
        seen = plugin.seen_by("PreUpdateContainerResources")[-1].container_resources
        assert (seen.memory_limit_in_bytes, seen.memory_swap_limit_in_bytes) == (128 * MiB, 128 * MiB)
        assert memory_and_swap(client, container_id) == expected(160 * MiB)
    finally:
        client.channel.close()


# --- Docker mode: cri-dockerd's bodies, sent over raw HTTP ----------------------------------------------------


class DockerApi:
    """Raw Engine API calls on one socket; answers (status, decoded JSON or None)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        connection = UnixHTTPConnection(self.socket, timeout=60)
        try:
            data = json.dumps(body).encode() if body is not None else None
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            raw = answer.read()
        finally:
            connection.close()
        return answer.status, (json.loads(raw) if raw.strip() else None)

    def created(self, name: str, body: dict[str, Any]) -> str:
        status, answer = self.call("POST", f"/containers/create?name={name}", body)
        assert status == 201, answer
        return answer["Id"]

    def started(self, container_id: str) -> None:
        status, answer = self.call("POST", f"/containers/{container_id}/start")
        assert status == 204, answer

    def updated(self, container_id: str, body: dict[str, Any]) -> None:
        status, answer = self.call("POST", f"/containers/{container_id}/update", body)
        assert status == 200, answer

    def memory_and_swap(self, container_id: str) -> tuple[int, int]:
        host_config = self.call("GET", f"/containers/{container_id}/json")[1]["HostConfig"]
        return host_config["Memory"], host_config["MemorySwap"]


class SwapBelowMemory(ExamplePlugin):
    """Sets the memory limit and, wrongly, a swap limit below it."""

    async def PreCreateContainerHook(self, request: hooks.ContainerResourceHookRequest,
                                     context: grpc.aio.ServicerContext) -> hooks.ContainerResourceHookResponse:
        response = await super().PreCreateContainerHook(request, context)
        response.container_resources.memory_swap_limit_in_bytes = 80 * MiB
        return response


@pytest.fixture
def docker_proxy(dockerd: DockerdInstance, workdir: Path, loop_thread: LoopThread,
                 request: pytest.FixtureRequest) -> Iterator[tuple[DockerModeProxy, ExamplePlugin]]:
    """Its own Docker-mode proxy (the test restarts it) with a koordlet-like plugin (policy Fail) registered."""
    base = workdir / f"dkswap-{uuid.uuid4().hex[:6]}"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    proxy.start()
    kind = getattr(request, "param", ExamplePlugin)
    plugin = kind(ExampleSettings(memory_limit_in_bytes=96 * MiB, update_memory_limit_in_bytes=128 * MiB))
    loop_thread.run(plugin.start(base / "plugin.sock"))
    created: list[str] = []
    try:
        (proxy.hook_config_dir / "10-koordlet-like.json").write_bytes(registration(base / "plugin.sock", HOOKS, "Fail"))
        proxy.wait_for_log("plugin 10-koordlet-like.json ")
        yield proxy, plugin
    finally:
        loop_thread.run(plugin.stop())
        assert proxy.stop() == 0, proxy.log_tail()
        direct = DockerApi(dockerd.socket)
        filters = urllib.parse.quote(json.dumps({"label": ["rp-swap-test"]}))
        for container in direct.call("GET", f"/containers/json?all=1&filters={filters}")[1]:
            direct.call("DELETE", f"/containers/{container['Id']}?force=1")


def sandbox_body(uid: str) -> dict[str, Any]:
    return {"Image": PAUSE_IMAGE, "Labels": {"io.kubernetes.docker.type": "podsandbox",
                                            "io.kubernetes.container.name": "POD", "rp-swap-test": uid},
            "HostConfig": {"NetworkMode": "none", "CpuShares": 2}}


def container_body(uid: str, sandbox_id: str) -> dict[str, Any]:
    """As cri-dockerd builds it for a 64 MiB container: MemorySwap = Memory."""
    return {"Image": BUSYBOX_IMAGE, "Cmd": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            "Labels": {"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": sandbox_id,
                       "io.kubernetes.container.name": "app", "rp-swap-test": uid},
            "Env": ["KEEP=me"],
            "HostConfig": {"NetworkMode": f"container:{sandbox_id}", "CpuShares": 2,
                           "Memory": 64 * MiB, "MemorySwap": 64 * MiB}}


def cri_dockerd_update(memory: int = 0, cpu_shares: int = 0) -> dict[str, int]:
    """cri-dockerd's UpdateContainerResources body: MemorySwap = Memory, 0 meaning unchanged."""
    return {"CpuPeriod": 0, "CpuQuota": 0, "CpuShares": cpu_shares, "Memory": memory, "MemorySwap": memory,
            "CpusetCpus": "", "CpusetMems": ""}


def test_docker_swap_follows_memory_on_create_update_and_after_a_restart(
    swap_controller: None, dockerd: DockerdInstance, docker_proxy: tuple[DockerModeProxy, ExamplePlugin]
) -> None:
    proxy, plugin = docker_proxy
    api, direct = DockerApi(proxy.listen_path), DockerApi(dockerd.socket)
    uid = uuid.uuid4().hex
    sandbox_id = api.created(f"k8s_POD_swap_default_{uid}_0", sandbox_body(uid))
    api.started(sandbox_id)

    # The create body with 64 MiB / 64 MiB; the plugin answers 96 MiB: dockerd accepts it, the container starts.
    container_id = api.created(f"k8s_app_swap_default_{uid}_0", container_body(uid, sandbox_id))
    api.started(container_id)
    assert direct.memory_and_swap(container_id) == (96 * MiB, 96 * MiB)

    # An in-place resize as cri-dockerd sends it; the plugin answers 128 MiB.
    api.updated(container_id, cri_dockerd_update(memory=64 * MiB))
    assert direct.memory_and_swap(container_id) == (128 * MiB, 128 * MiB)

    # A new proxy process (store refilled from inspect); a CPU-only update (Memory = MemorySwap = 0, unchanged):
    # raising memory alone would be refused (409, memory above the current swap) unless swap follows.
    assert proxy.stop() == 0
    proxy.start()
    plugin.settings.update_memory_limit_in_bytes = 160 * MiB
    api.updated(container_id, cri_dockerd_update(cpu_shares=300))
    seen = plugin.seen_by("PreUpdateContainerResources")[-1].container_resources
    assert (seen.memory_limit_in_bytes, seen.memory_swap_limit_in_bytes) == (128 * MiB, 128 * MiB)
    assert direct.memory_and_swap(container_id) == (160 * MiB, 160 * MiB)
    assert (Path("/sys/fs/cgroup/memory/docker") / container_id / "memory.memsw.limit_in_bytes").read_text().strip() \
        == str(160 * MiB)


@pytest.mark.parametrize("docker_proxy", [SwapBelowMemory], indirect=True)
def test_docker_a_swap_limit_below_memory_is_refused_naming_plugin_and_field(
    dockerd: DockerdInstance, docker_proxy: tuple[DockerModeProxy, ExamplePlugin]
) -> None:
    proxy, _ = docker_proxy
    api, direct = DockerApi(proxy.listen_path), DockerApi(dockerd.socket)
    uid = uuid.uuid4().hex
    sandbox_id = api.created(f"k8s_POD_swap_default_{uid}_0", sandbox_body(uid))
    status, answer = api.call("POST", f"/containers/create?name=k8s_app_swap_default_{uid}_0",
                              container_body(uid, sandbox_id))
    assert status == 500
    assert "PreCreateContainer hook of plugin 10-koordlet-like.json" in answer["message"]
    assert (f"invalid answer: container_resources.memory_swap_limit_in_bytes: the swap limit (memory + swap) "
            f"would be {80 * MiB}, below the memory limit {96 * MiB}") in answer["message"]
    assert direct.call("GET", f"/containers/k8s_app_swap_default_{uid}_0/json")[0] == 404  # nothing created
