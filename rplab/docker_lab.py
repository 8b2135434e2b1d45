"""`python -m rplab --docker`: the lab in Docker mode.

kubelet's path through cri-dockerd: CRI client → cri-dockerd → the proxy (Docker mode) → a private dockerd,
with the example plugin registered for all seven hooks. Drives the same pod lifecycle as the containerd
lab and shows, with `docker inspect`, what the plugin changed. Without cri-dockerd it replays cri-dockerd's
requests for that lifecycle itself (lab.cridockerd_replay) and shows what the plugin changed in them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc

from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.cri import CriClient, open_channel
from rplab.cridockerd_replay import CriDockerdReplay
from rplab.cridockerd_requests import PodShape
from rplab.docker_images import build_docker_archives
from rplab.dockerd import CriDockerd, DockerdInstance, DockerModeProxy, check_docker_prerequisites
from rplab.tools import find_tool
from rplab.example_plugin import plugin_process, registration
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE

VERSION_TIMEOUT_SECONDS = 5.0


def docker_lab_problem() -> str | None:
    """None when this machine can run the Docker lab, else why not."""
    return check_docker_prerequisites()  # without cri-dockerd the lab replays its requests


@contextmanager
def hooked_docker_proxy(base: Path, docker_socket: Path, *plugin_args: str,
                        policy: str = "Ignore") -> Iterator[tuple[DockerModeProxy, Path]]:
    """The example plugin as its own process (`plugin_args`: e.g. `--echo`) registered for all seven hooks
    with `policy`, and a Docker-mode proxy in front of `docker_socket`, both in `base`; yields the proxy and
    the plugin's record (one JSON line per hook call)."""
    socket, record = base / "plugin.sock", base / "plugin-requests.jsonl"
    with plugin_process(socket, record, *plugin_args):
        proxy = DockerModeProxy(base / "proxy" / "rp.sock", docker_socket, extra_args=["--log-level=debug"])
        proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
        (proxy.hook_config_dir / "example.json").write_bytes(registration(socket, list(HOOK_NAMES), policy))
        with proxy:
            yield proxy, record


def recorded_hooks(record: Path) -> list[str]:
    """The hooks a plugin's record lists, in the order they were called."""
    if not record.exists():
        return []
    return [json.loads(line)["hook"] for line in record.read_text().splitlines()]


def _answers_cri(socket: Path) -> bool:
    try:
        with open_channel(socket) as channel:
            client = CriClient(channel)
            client.runtime.Version(client.api.VersionRequest(), timeout=VERSION_TIMEOUT_SECONDS)
        return True
    except grpc.RpcError:
        return False


PluginStarter = Callable[[ExitStack, Path, Path], str]  # (stack, socket, request record) -> what it started
Step = Callable[[str, Callable[[], Any]], Any]  # (label, action) -> action's result, timed and printed


def _dockerd_and_hooked_proxy(stack: ExitStack, base: Path, image_cache: Path, start_plugin: PluginStarter,
                              step: Step) -> tuple[DockerdInstance, DockerModeProxy]:
    """A private dockerd with the offline images, the example plugin and the proxy in Docker mode in front of
    dockerd with the plugin on all seven hooks; each stopped by `stack`."""
    dockerd = DockerdInstance(base / "dk")
    step("start dockerd (private root)", dockerd.start)
    stack.callback(dockerd.stop)
    step("load offline images into dockerd", lambda: dockerd.load_images(build_docker_archives(image_cache)))
    plugin_socket = base / "plugin" / "example.sock"
    step("start the example plugin", lambda: start_plugin(stack, plugin_socket, base / "plugin-requests.jsonl"))
    proxy = DockerModeProxy(base / "proxy" / "runtimeproxy.sock", dockerd.socket)
    proxy.hook_config_dir.mkdir(parents=True)
    (proxy.hook_config_dir / "example.json").write_bytes(registration(plugin_socket, list(HOOK_NAMES)))
    step("start koord-runtime-proxy (Docker mode)", proxy.start)
    stack.callback(proxy.stop)
    return dockerd, proxy


@contextmanager
def docker_environment(base: Path, image_cache: Path, start_plugin: PluginStarter,
                       step: Step) -> Iterator[tuple[DockerdInstance, DockerModeProxy, CriDockerd]]:
    """dockerd, the example plugin, the proxy in Docker mode and cri-dockerd, stopped in reverse order."""
    with ExitStack() as stack:
        dockerd, proxy = _dockerd_and_hooked_proxy(stack, base, image_cache, start_plugin, step)
        binary = find_tool("cri-dockerd")
        assert binary is not None
        cri = CriDockerd(binary, base / "cridk", proxy.listen_path, PAUSE_IMAGE)
        step("start cri-dockerd (in front of the proxy)", lambda: cri.start(ready=lambda: _answers_cri(cri.socket)))
        stack.callback(cri.stop)
        yield dockerd, proxy, cri


def show_docker_effects(dockerd: DockerdInstance, container_id: str, pod_id: str) -> None:
    container = json.loads(dockerd.docker("inspect", container_id).stdout)[0]
    sandbox = json.loads(dockerd.docker("inspect", pod_id).stdout)[0]
    host_config = container["HostConfig"]
    print(f"    docker inspect: CpuShares={host_config['CpuShares']} Memory={host_config['Memory']} "
          f"CgroupParent={host_config['CgroupParent']}")
    print(f"    env: {[entry for entry in container['Config']['Env'] if not entry.startswith('PATH=')]}")
    annotations = {k: v for k, v in sandbox["Config"]["Labels"].items() if k.startswith("annotation.")}
    print(f"    sandbox annotation labels: {annotations}")


def replay_lifecycle(base: Path, image_cache: Path, start_plugin: PluginStarter, step: Step) -> None:
    """cri-dockerd's requests for a pod's life, replayed through the proxy with the example plugin; prints what
    cri-dockerd asked for next to what dockerd runs."""
    with ExitStack() as stack:
        dockerd, proxy = _dockerd_and_hooked_proxy(stack, base, image_cache, start_plugin, step)
        print(f"  replayed cri-dockerd  ->  proxy (Docker mode) {proxy.listen_path}  ->  dockerd: {dockerd.socket}")
        pod = PodShape(name="lab-pod", uid=str(uuid.uuid4()), labels={"app": "lab"}, annotations={"team": "lab"},
                       cgroup_parent="/runtimeproxy-lab/burstable",  # the plugin moves it to /runtimeproxy-lab/rplab
                       sandbox_image=PAUSE_IMAGE, image=BUSYBOX_IMAGE)
        replay = stack.enter_context(CriDockerdReplay(proxy.listen_path))
        sandbox_id = step("RunPodSandbox (create + start)", lambda: replay.run_pod_sandbox(pod))
        container_id = step("CreateContainer", lambda: replay.create_container(pod, sandbox_id))
        step("StartContainer", lambda: replay.start_container(container_id))
        show_replayed_effects(pod, replay.inspect(container_id), replay.inspect(sandbox_id))
        step("UpdateContainerResources (memory)", lambda: replay.update_container_resources(
            container_id, memory=pod.memory // 2))
        step("StopContainer", lambda: replay.stop_container(container_id))
        step("StopPodSandbox", lambda: replay.stop_pod_sandbox(sandbox_id))
        step("RemoveContainer", lambda: replay.remove_container(container_id))
        step("RemovePodSandbox", lambda: replay.remove_pod_sandbox(sandbox_id))


def show_replayed_effects(pod: PodShape, container: Any, sandbox: Any) -> None:
    host_config = container["HostConfig"]
    print(f"    cri-dockerd asked: CpuShares={pod.cpu_shares} Memory={pod.memory} CgroupParent={pod.cgroup_parent}")
    print(f"    dockerd runs:      CpuShares={host_config['CpuShares']} Memory={host_config['Memory']} "
          f"CgroupParent={host_config['CgroupParent']}")
    print(f"    env: {[entry for entry in container['Config']['Env'] if not entry.startswith('PATH=')]}")
    annotations = {k: v for k, v in sandbox["Config"]["Labels"].items() if k.startswith("annotation.")}
    print(f"    sandbox annotation labels: {annotations}")
