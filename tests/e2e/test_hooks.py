"""Hook plugins through the proxy, against real containerd: what plugins change really lands."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from runtimeproxy.admin.ctl import main as ctl
from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ANNOTATION, ExamplePlugin, ExampleSettings, registration
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks.names import HOOK_NAMES
from tests.kits.env import SECRET_SEEN, SHOWN_SECRET, binary_env_seen
from tests.kits.docs import REPO_ROOT, block_starting, doc_page

_serial = itertools.count()
MiB = 1024 * 1024



class Lab:
    """A proxy with its own plugin config dir, plus helpers to register in-process plugins."""

    def __init__(self, proxy: ProxyProcess, loop: LoopThread, base: Path) -> None:
        self.proxy = proxy
        self.loop = loop
        self.base = base
        self.plugins: list[ExamplePlugin] = []
        self.client = CriClient(open_channel(proxy.listen_path))

    def plugin(self, settings: ExampleSettings | None = None,
               kind: type[ExamplePlugin] = ExamplePlugin) -> tuple[ExamplePlugin, Path]:
        plugin = kind(settings)
        socket = self.base / f"plugin{next(_serial)}.sock"
        self.loop.run(plugin.start(socket))
        self.plugins.append(plugin)
        return plugin, socket

    def register(self, name: str, socket: Path, hooks: list[str] | tuple[str, ...] = HOOK_NAMES,
                 policy: str = "Ignore", timeout: float | None = None) -> None:
        (self.proxy.hook_config_dir / name).write_bytes(registration(socket, list(hooks), policy, timeout))
        self.proxy.wait_for_log(f"plugin {name} ")

    def close(self) -> None:
        self.client.channel.close()
        for plugin in self.plugins:
            self.loop.run(plugin.stop())


@contextmanager
def hook_lab(backend: str, base: Path, loop: LoopThread) -> Iterator[Lab]:
    """A proxy in `base` in front of the containerd at `backend`, for the block."""
    proxy = ProxyProcess(base / "rp.sock", backend, extra_args=["--log-level=debug"])
    proxy.start()
    lab = Lab(proxy, loop, base)
    try:
        yield lab
    finally:
        lab.close()
        assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture
def lab(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread) -> Iterator[Lab]:
    with hook_lab(containerd.address, workdir / f"hooks{next(_serial)}", loop_thread) as lab:
        yield lab


def run_pod_with_container(
    client: CriClient, log_dir: Path, cleanup: list[str], labels: dict[str, str] | None = None,
    envs: dict[str, str] | None = None, resources: Any | None = None,
) -> tuple[str, str]:
    pod_config = client.pod_config(f"hooked{next(_serial)}", log_dir, labels=labels,
                                   cgroup_parent="/runtimeproxy-e2e")
    pod_id = client.run_pod(pod_config)
    cleanup.append(pod_id)
    config = client.container_config("app", envs=envs, resources=resources)
    container_id = client.create_container(pod_id, config, pod_config)
    client.start_container(container_id)
    return pod_id, container_id


def spec_of(client: CriClient, container_id: str) -> dict:
    status = client.container_status(container_id, verbose=True)
    return json.loads(status.info["info"])["runtimeSpec"]


def cgroup_value(spec: dict, controller: str, name: str) -> str:
    return (Path("/sys/fs/cgroup") / controller / spec["linux"]["cgroupsPath"].lstrip("/") / name).read_text().strip()


def test_plugin_changes_reach_the_container(lab: Lab, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin, socket = lab.plugin(ExampleSettings(pod_cgroup_parent="/runtimeproxy-e2e/hooked"))
    lab.register("10-example.json", socket)
    client = lab.client
    pod_id, container_id = run_pod_with_container(client, log_dir, cleanup_pods, envs={"KEEP": "me"})

    env = client.exec_sync(container_id, ["env"]).stdout.decode().split()
    assert "EXAMPLE_PLUGIN=hello" in env and "KEEP=me" in env
    spec = spec_of(client, container_id)
    assert spec["linux"]["resources"]["cpu"]["shares"] == 512
    assert spec["linux"]["resources"]["memory"]["limit"] == 128 * MiB
    assert spec["linux"]["cgroupsPath"].startswith("/runtimeproxy-e2e/hooked/")
    if Path("/sys/fs/cgroup/cpu").is_dir():  # cgroup v1, as on these machines
        assert cgroup_value(spec, "cpu", "cpu.shares") == "512"
        assert cgroup_value(spec, "memory", "memory.limit_in_bytes") == str(128 * MiB)
    assert client.container_status(container_id).status.annotations[ANNOTATION] == "PreCreateContainer"
    assert client.pod_status(pod_id).status.annotations[ANNOTATION] == "PreRunPodSandbox"

    client.stop_container(container_id)
    client.stop_pod(pod_id)
    hooks_seen = [entry.hook for entry in plugin.seen]
    assert hooks_seen == ["PreRunPodSandbox", "PreCreateContainer", "PreStartContainer",
                          "PostStartContainer", "PostStopContainer", "PostStopPodSandbox"]
    post_stop = plugin.seen_by("PostStopContainer")[0]
    assert post_stop.container_meta.id == container_id
    assert post_stop.pod_cgroup_parent == "/runtimeproxy-e2e/hooked"
    assert post_stop.container_envs["EXAMPLE_PLUGIN"] == "hello"
    assert post_stop.container_resources.memory_limit_in_bytes == 128 * MiB


@pytest.mark.parametrize("fault", ["dead", "error", "hang"])
@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policies(lab: Lab, log_dir: Path, cleanup_pods: list[str], fault: str, policy: str) -> None:
    if fault == "dead":
        socket = lab.base / "nobody-listens.sock"
    else:
        settings = ExampleSettings(fail_with=grpc.StatusCode.INTERNAL if fault == "error" else None,
                                   hang=fault == "hang")
        _, socket = lab.plugin(settings)
    lab.register("10-faulty.json", socket, ["PreRunPodSandbox"], policy, timeout=0.5)
    client = lab.client
    pods_before = set(client.pod_ids())
    pod_config = client.pod_config(f"faulty{next(_serial)}", log_dir)
    started = time.monotonic()
    if policy == "Ignore":
        cleanup_pods.append(client.run_pod(pod_config))
        assert time.monotonic() - started < 10
        return
    with pytest.raises(grpc.RpcError) as raised:
        client.run_pod(pod_config)
    error = raised.value
    assert "PreRunPodSandbox hook of plugin 10-faulty.json" in error.details()
    expected = {"dead": grpc.StatusCode.UNAVAILABLE, "error": grpc.StatusCode.INTERNAL,
                "hang": grpc.StatusCode.DEADLINE_EXCEEDED}[fault]
    assert error.code() is expected
    status = status_pb2.Status.FromString(dict(error.trailing_metadata())["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.metadata["plugin"] == "10-faulty.json" and info.metadata["hook"] == "PreRunPodSandbox"
    assert set(client.pod_ids()) == pods_before, "nothing may be created when a Fail plugin fails"


def test_two_plugins_chain_in_file_name_order(lab: Lab, log_dir: Path, cleanup_pods: list[str]) -> None:
    first, first_socket = lab.plugin(ExampleSettings(cpu_shares=300, envs={"FIRST": "1"}))
    second, second_socket = lab.plugin(ExampleSettings(cpu_shares=700, envs={"SECOND": "2"}))
    lab.register("20-second.json", second_socket, ["PreCreateContainer"])
    lab.register("10-first.json", first_socket, ["PreCreateContainer"])
    _, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods)
    seen_by_second = second.seen_by("PreCreateContainer")[0]
    assert seen_by_second.container_envs["FIRST"] == "1"  # the first plugin's change
    assert seen_by_second.container_resources.cpu_shares == 300
    env = lab.client.exec_sync(container_id, ["env"]).stdout.decode().split()
    assert "FIRST=1" in env and "SECOND=2" in env
    assert spec_of(lab.client, container_id)["linux"]["resources"]["cpu"]["shares"] == 700
    assert len(first.seen) == 1


def test_skip_label_means_no_hooks(lab: Lab, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin, socket = lab.plugin()
    lab.register("10-example.json", socket)
    labels = {"runtimeproxy.koordinator.sh/skip-hookserver": "true"}
    pod_id, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods, labels=labels)
    lab.client.stop_container(container_id)
    lab.client.stop_pod(pod_id)
    assert plugin.seen == []
    assert not any(var.startswith("EXAMPLE_PLUGIN=") for var in spec_of(lab.client, container_id)["process"]["env"])


def test_config_added_changed_broken_and_deleted_live(lab: Lab, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin, socket = lab.plugin()
    client = lab.client

    def new_pod() -> None:
        cleanup_pods.append(client.run_pod(client.pod_config(f"live{next(_serial)}", log_dir)))

    config = lab.proxy.hook_config_dir / "10-live.json"
    lab.register("10-live.json", socket, ["PreCreateContainer"])
    new_pod()
    assert plugin.seen_by("PreRunPodSandbox") == []

    config.write_bytes(registration(socket, ["PreRunPodSandbox"]))
    lab.proxy.wait_for_log("plugin 10-live.json changed")
    new_pod()
    assert len(plugin.seen_by("PreRunPodSandbox")) == 1

    config.write_text('{"remote-endpoint": "/x.sock", "runtime-hooks": ["PreRunPodSand')  # half-written
    lab.proxy.wait_for_log("invalid plugin config 10-live.json")
    new_pod()
    assert len(plugin.seen_by("PreRunPodSandbox")) == 2  # the last good version stays

    config.unlink()
    lab.proxy.wait_for_log("plugin 10-live.json removed")
    new_pod()
    assert len(plugin.seen_by("PreRunPodSandbox")) == 2


def test_proxy_restart_keeps_full_context(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    plugin, socket = lab.plugin(ExampleSettings(pod_cgroup_parent="/runtimeproxy-e2e/restart"))
    lab.register("10-example.json", socket)
    pod_id, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods, labels={"team": "a"},
                                                  envs={"APP": "1"})
    # A new proxy process on the same socket: its store starts empty.
    assert lab.proxy.stop() == 0
    lab.proxy.start()
    client = CriClient(open_channel(lab.proxy.listen_path))
    api = client.api
    client.runtime.UpdateContainerResources(api.UpdateContainerResourcesRequest(
        container_id=container_id, linux=api.LinuxContainerResources(cpu_shares=256, memory_limit_in_bytes=96 * MiB),
    ), timeout=30)
    client.stop_container(container_id)
    client.channel.close()

    update = plugin.seen_by("PreUpdateContainerResources")[0]
    stop = plugin.seen_by("PostStopContainer")[0]
    for request in (update, stop):
        assert request.container_meta.id == container_id and request.container_meta.name == "app"
        assert request.pod_cgroup_parent == "/runtimeproxy-e2e/restart"
        assert request.pod_labels["team"] == "a"
        assert request.pod_meta.uid
        assert request.container_envs["APP"] == "1" and request.container_envs["EXAMPLE_PLUGIN"] == "hello"
    assert update.container_resources.memory_limit_in_bytes == 96 * MiB
    assert stop.container_resources.memory_limit_in_bytes == 96 * MiB  # what the update set
    assert stop.container_resources.cpu_shares == 256
    assert spec_of(lab.client, container_id)["linux"]["resources"]["memory"]["limit"] == 96 * MiB


def test_a_config_file_of_an_untrusted_owner_registers_nothing(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    plugin, socket = lab.plugin()
    staged = lab.base / "untrusted.json"
    staged.write_bytes(registration(socket, list(HOOK_NAMES), "Fail"))
    os.chown(staged, 65534, 65534)  # written by nobody: it would see every container's env
    os.rename(staged, lab.proxy.hook_config_dir / "10-untrusted.json")  # appears already untrusted
    lab.proxy.wait_for_log("invalid plugin config 10-untrusted.json: not trusted: the file is owned by uid 65534")
    pod_id, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods)
    assert lab.client.container_status(container_id).status.state == lab.client.api.CONTAINER_RUNNING
    assert plugin.seen == []
    assert "plugin 10-untrusted.json registered" not in lab.proxy.log_path.read_text()


# --- a plugin whose answer is unsafe to apply ------------------------------------------------------------


class CpusetLiar(ExamplePlugin):
    """The example plugin, with a cpuset the kernel cannot parse in its PreCreateContainer answer."""

    async def PreCreateContainerHook(self, request: hooks.ContainerResourceHookRequest,
                                     context: grpc.aio.ServicerContext) -> hooks.ContainerResourceHookResponse:
        response = await super().PreCreateContainerHook(request, context)
        response.container_resources.cpuset_cpus = "abc"
        return response


def containers_of(client: CriClient, pod_id: str) -> list[str]:
    request = client.api.ListContainersRequest(filter=client.api.ContainerFilter(pod_sandbox_id=pod_id))
    return [container.id for container in client.runtime.ListContainers(request, timeout=30).containers]


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_an_escaping_pod_cgroup_parent_is_refused(
    lab: Lab, log_dir: Path, cleanup_pods: list[str], policy: str
) -> None:
    _, socket = lab.plugin(ExampleSettings(pod_cgroup_parent="../../../../escape"))
    lab.register("10-liar.json", socket, ["PreRunPodSandbox"], policy)
    client = lab.client
    pods_before = set(client.pod_ids())
    pod_config = client.pod_config(f"liar{next(_serial)}", log_dir, cgroup_parent="/runtimeproxy-e2e")
    if policy == "Fail":
        with pytest.raises(grpc.RpcError) as raised:
            client.run_pod(pod_config)
        assert raised.value.code() is grpc.StatusCode.INTERNAL
        details = raised.value.details()
        assert "PreRunPodSandbox hook of plugin 10-liar.json" in details
        assert 'cgroup_parent: "../../../../escape" is neither an absolute path nor a systemd slice name' in details
        assert set(client.pod_ids()) == pods_before, "nothing may be created when a Fail plugin lies"
        return
    pod_id = client.run_pod(pod_config)
    cleanup_pods.append(pod_id)
    info = json.loads(client.pod_status(pod_id, verbose=True).info["info"])
    assert info["config"]["linux"]["cgroup_parent"] == "/runtimeproxy-e2e"  # as the kubelet sent it
    assert ANNOTATION not in client.pod_status(pod_id).status.annotations  # the whole answer is skipped
    lab.proxy.wait_for_log("invalid answer: cgroup_parent")


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_an_unparseable_cpuset_is_refused(lab: Lab, log_dir: Path, cleanup_pods: list[str], policy: str) -> None:
    _, socket = lab.plugin(kind=CpusetLiar)
    lab.register("10-liar.json", socket, ["PreCreateContainer"], policy)
    client = lab.client
    pod_config = client.pod_config(f"liar{next(_serial)}", log_dir, cgroup_parent="/runtimeproxy-e2e")
    pod_id = client.run_pod(pod_config)
    cleanup_pods.append(pod_id)
    if policy == "Fail":
        with pytest.raises(grpc.RpcError) as raised:
            client.create_container(pod_id, client.container_config("app"), pod_config)
        assert raised.value.code() is grpc.StatusCode.INTERNAL
        assert "PreCreateContainer hook of plugin 10-liar.json" in raised.value.details()
        assert 'container_resources.cpuset_cpus: "abc" is not a cpu list' in raised.value.details()
        status = status_pb2.Status.FromString(dict(raised.value.trailing_metadata())["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info) and info.metadata["field"] == "container_resources.cpuset_cpus"
        assert containers_of(client, pod_id) == []
        return
    container_id = client.create_container(pod_id, client.container_config("app"), pod_config)
    client.start_container(container_id)
    spec = spec_of(client, container_id)
    assert "cpus" not in spec["linux"]["resources"].get("cpu", {})
    assert not any(var.startswith("EXAMPLE_PLUGIN=") for var in spec["process"]["env"])


# --- UpdateContainerResources: effective resources, also after a restart ----------------------------------


def update_resources(client: CriClient, container_id: str, **fields: int) -> None:
    api = client.api
    client.runtime.UpdateContainerResources(api.UpdateContainerResourcesRequest(
        container_id=container_id, linux=api.LinuxContainerResources(**fields)), timeout=30)


def test_a_partial_update_keeps_the_rest_through_a_restart(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    plugin, socket = lab.plugin()  # echoes the resources it sees in PreUpdateContainerResources
    lab.register("10-example.json", socket, ["PreUpdateContainerResources", "PostStopContainer"])
    api = lab.client.api
    _, container_id = run_pod_with_container(
        lab.client, log_dir, cleanup_pods,
        resources=api.LinuxContainerResources(cpu_shares=200, memory_limit_in_bytes=96 * MiB))

    update_resources(lab.client, container_id, cpu_shares=300)
    seen = plugin.seen_by("PreUpdateContainerResources")[0].container_resources
    assert (seen.cpu_shares, seen.memory_limit_in_bytes) == (300, 96 * MiB)
    spec = spec_of(lab.client, container_id)["linux"]["resources"]
    assert (spec["cpu"]["shares"], spec["memory"]["limit"]) == (300, 96 * MiB)

    assert lab.proxy.stop() == 0  # a new proxy process: its store is refilled from containerd
    lab.proxy.start()
    client = CriClient(open_channel(lab.proxy.listen_path))
    try:
        update_resources(client, container_id, cpu_quota=20_000)
        seen = plugin.seen_by("PreUpdateContainerResources")[1].container_resources
        assert (seen.cpu_shares, seen.memory_limit_in_bytes, seen.cpu_quota) == (300, 96 * MiB, 20_000)
        client.stop_container(container_id)
    finally:
        client.channel.close()
    stopped = plugin.seen_by("PostStopContainer")[0].container_resources
    assert (stopped.cpu_shares, stopped.memory_limit_in_bytes, stopped.cpu_quota) == (300, 96 * MiB, 20_000)


FIRST_PLUGIN_PAGE = "plugins.md"
FIRST_PLUGIN_HEADER = "# my_plugin.py:"


def documented_first_plugin() -> str:
    """The docs' complete kit example (README.md shows the same block: tests/test_docs.py), as a newcomer copies it."""
    return block_starting(doc_page(FIRST_PLUGIN_PAGE), FIRST_PLUGIN_HEADER, "python")


def test_readme_kit_plugin_adds_an_env_var_and_keeps_the_others(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    """The documented first plugin returns ONLY {"MY_VAR": "x"}; run as its own process, registered by itself."""
    script = lab.base / "my_plugin.py"
    script.write_text(documented_first_plugin())
    socket = lab.base / "my-plugin" / "plugin.sock"
    registration_file = lab.proxy.hook_config_dir / "my-plugin.json"
    checkout = str(REPO_ROOT)  # a script's own directory comes first on sys.path: import this checkout
    plugin = subprocess.Popen([sys.executable, str(script), "--socket", f"unix://{socket}",
                               "--register", str(registration_file)],
                              env={**os.environ, "PYTHONPATH": checkout})
    try:
        lab.proxy.wait_for_log("plugin my-plugin.json ", timeout=30)
        assert json.loads(registration_file.read_text())["runtime-hooks"] == ["PreCreateContainer"]
        assert oct(socket.stat().st_mode & 0o777) == "0o600"

        _, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods,
                                                 envs={"KEEP": "me", "ALSO": "kept"})
        env = lab.client.exec_sync(container_id, ["env"]).stdout.decode().split()
        assert {"MY_VAR=x", "KEEP=me", "ALSO=kept"} <= set(env), env
        assert any(var.startswith("PATH=") for var in env), env  # the image's variables too
        lab.proxy.wait_for_log('plugin my-plugin.json PreCreateContainer changed container_envs["MY_VAR"]: '
                                '(unset) -> "x"')
        assert "answered container_envs without" not in lab.proxy.log_path.read_text()

        out = io.StringIO()
        assert ctl(["try-plugin", "--endpoint", str(socket), "--hook", "PreCreateContainer"], out=out) == 0
        assert out.getvalue() == ('PreCreateContainer: valid; the proxy would change:\n'
                                  '    container_envs["MY_VAR"]: (unset) -> "x"\n')
    finally:
        plugin.terminate()
        assert plugin.wait(10) == 0
    assert not socket.exists()


def test_a_binary_env_value_reaches_the_container_as_directly_with_an_echoing_plugin_on_every_hook_under_fail(
        lab: Lab, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin, socket = lab.plugin(ExampleSettings(echo=True))  # answers every hook with the request, as koordlet
    lab.register("10-echo.json", socket, policy="Fail")
    assert binary_env_seen(lab.client, log_dir, cleanup_pods) == SECRET_SEEN
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert seen.container_envs["SECRET"] == SHOWN_SECRET  # shown as the container sees it
