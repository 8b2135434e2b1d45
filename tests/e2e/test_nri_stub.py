"""The proxy's NRI host against NRI's real Go stub (peers/nriplugin at stub v0.8, containerd 1.7.26 to 2.1's, and
v0.12, the newest): for each, a plugin that connects to the proxy's NRI socket and one the proxy launches from its
plugin directory register, get every event of a pod's life, and what they adjust lands in the OCI spec (real
containerd 1.6, verbose ContainerStatus) and in `docker inspect` (Docker mode, real dockerd, cri-dockerd's requests
replayed). A v0.12 plugin subscribing to the events only newer runtimes send (UpdatePodSandbox, PostUpdatePodSandbox,
ValidateContainerAdjustment) registers all the same; a state too big for one message reaches the stub split."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.cridockerd_replay import CriDockerdReplay
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.nri_stub import STUB_VERSIONS, StubPlugin
from rplab.peers import PeerBuildError, peer_binary
from rplab.process import ProxyProcess
from runtimeproxy.listener import bind_unix_socket
from runtimeproxy.nri.session import PluginSession, event_mask, listen, serve_connection
from runtimeproxy.nri.ttrpc import MAX_MESSAGE
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.machine import skip_or_fail

_serial = itertools.count()
WAIT_SECONDS = 15.0
ANNOTATION = "nri.runtimeproxy.test/stub"
UPDATED_SHARES = 600  # what the plugin answers an UpdateContainer asking for 512
MEMORY_LIMIT = 48 * 1024 * 1024  # under the Docker pod's 64 MiB: raising it past MemorySwap is refused by dockerd
HOST_DEVICE = "/dev/fuse"  # a node neither runtime adds by default
# What a pod's life sends a plugin subscribed to everything, after Configure and Synchronize.
POD_LIFE = ["RunPodSandbox", "CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
            "UpdateContainer", "PostUpdateContainer", "StopContainer", "RemoveContainer", "StopPodSandbox",
            "RemovePodSandbox"]
# cri-dockerd stops the sandbox before it removes the container (rplab.cridockerd_replay.lifecycle).
DOCKER_POD_LIFE = [*POD_LIFE[:7], "StopContainer", "StopPodSandbox", "RemoveContainer", "RemovePodSandbox"]
# Of the events stub v0.10+ added, this host sends UpdatePodSandbox and PostUpdatePodSandbox around a pod resize and
# ValidateContainerAdjustment after each CreateContainer's plugins (nri.validation): none is an unknown event.
UNKNOWN_EVENTS = "subscribed to unknown events"
VALIDATION = "ValidateContainerAdjustment"


def validated(order: list[str]) -> list[str]:
    """A v0.12 plugin (a validator too: the stub implements it) hears the validation right after CreateContainer."""
    at = order.index("CreateContainer") + 1
    return [*order[:at], VALIDATION, *order[at:]]


@pytest.fixture(params=STUB_VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    """The stub version; its plugin is built here (first use only), so a machine without Go skips."""
    try:
        peer_binary(f"nriplugin-{request.param}")
    except PeerBuildError as error:
        skip_or_fail(f"cannot build the NRI stub plugin: {error}")
    return request.param


@pytest.fixture(params=["connected", "launched"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def base(workdir: Path) -> Path:
    path = workdir / f"nristub{next(_serial)}"
    for directory in ("plugins", "conf.d", "bind"):
        (path / directory).mkdir(mode=0o755, parents=True)
    return path


def adjusting_plugin(version: str, base: Path) -> StubPlugin:
    """A plugin subscribed to every event it handles that adds an env var, an annotation, a read-only bind mount,
    the host's HOST_DEVICE (where there is one), CPU shares and a memory limit to every created container, and
    answers an update of a container's resources with CPU shares of its own."""
    flags = [f"-env=NRI_STUB={version}", f"-annotation={ANNOTATION}={version}", f"-mount=/nri-data:{base / 'bind'}:ro",
             "-cpu-shares=700", f"-memory-limit={MEMORY_LIMIT}", f"-update-cpu-shares={UPDATED_SHARES}"]
    if Path(HOST_DEVICE).exists():
        flags.append(f"-device={HOST_DEVICE}")
    return StubPlugin(version, base / "events.jsonl", flags=flags)


def proxy_nri_args(base: Path) -> list[str]:
    return [f"--nri-socket={base / 'nri.sock'}", f"--nri-plugin-path={base / 'plugins'}",
            f"--nri-plugin-config-path={base / 'conf.d'}", "--log-level=debug"]


Proxy = TypeVar("Proxy", bound=ProxyProcess)


def stopped_after(proxy: Proxy) -> Iterator[Proxy]:
    """A fixture's proxy (the test starts it, after installing launched plugins), stopped if the test did not."""
    yield proxy
    if proxy.returncode() is None and proxy.pid is not None:
        assert proxy.stop() == 0, proxy.log_tail()


def attach(plugin: StubPlugin, proxy: ProxyProcess, base: Path, mode: str) -> None:
    """Connects the plugin (launched plugins were installed before the proxy started) and waits until attached."""
    if mode == "connected":
        proxy.wait_for_log("NRI: serving plugins", timeout=WAIT_SECONDS)
        plugin.connect(base / "nri.sock")
    proxy.wait_for_log(f"NRI plugin {plugin.plugin_id} attached", timeout=WAIT_SECONDS)


def check_registration(plugin: StubPlugin, proxy: ProxyProcess, mode: str) -> None:
    """Configured by this runtime (launched: through fd 3, NRI's environment), then synchronized; a v0.12 plugin's
    subscriptions to the events only newer runtimes have are ignored with a warning."""
    configured = plugin.record("Configure")
    assert configured["runtime"] == "runtimeproxy" and configured["stub"] == plugin.version
    if mode == "launched":
        assert (configured["plugin_socket"], configured["plugin_name"], configured["plugin_idx"]) == ("3", "stub", "10")
    else:
        assert configured["plugin_socket"] == ""
    assert plugin.events()[:2] == ["Configure", "Synchronize"]
    assert proxy.log_count(UNKNOWN_EVENTS) == 0, proxy.log_tail()


def check_pod_life(plugin: StubPlugin, pod_name: str, container_name: str, order: list[str] = POD_LIFE) -> None:
    life = [record for record in plugin.records() if record["event"] not in ("Configure", "Synchronize")]
    assert [record["event"] for record in life] == (validated(order) if plugin.version == "v0.12" else order)
    assert {record["pod"] for record in life} == {pod_name}
    assert {record.get("container") for record in life if "Container" in record["event"]} == {container_name}
    created = plugin.record("CreateContainer")
    assert created["state"] == "CONTAINER_UNKNOWN" and "KEEP=me" in created["env"]
    assert plugin.record("PostStartContainer")["state"] == "CONTAINER_RUNNING"


def check_launched_stop(plugin: StubPlugin, proxy: ProxyProcess, mode: str) -> None:
    """A launched plugin got Shutdown from the stopping proxy and ended on its own, normally."""
    if mode == "launched":
        assert plugin.events()[-1] == "Shutdown"
        assert proxy.log_count(f"NRI: launched plugin {plugin.plugin_id} exited (0)") == 1, proxy.log_tail()


# -- real containerd 1.6 -----------------------------------------------------------------------------


@pytest.fixture
def proxy(containerd: ContainerdInstance, base: Path) -> Iterator[ProxyProcess]:
    yield from stopped_after(ProxyProcess(base / "rp.sock", containerd.address, extra_args=proxy_nri_args(base)))


@contextlib.contextmanager
def serving(proxy: ProxyProcess, plugin: StubPlugin, base: Path, mode: str) -> Iterator[CriClient]:
    """The proxy started (a launched plugin installed first) and a CRI client on it; at the end, the proxy stopped
    (it gives its plugins Shutdown) and the plugin too."""
    if mode == "launched":
        plugin.install(base / "plugins", base / "conf.d")
    proxy.start()
    client = CriClient(open_channel(proxy.listen_path))
    try:
        yield client
    finally:
        client.channel.close()
        assert proxy.stop() == 0, proxy.log_tail()
        plugin.stop()


def started_container(client: CriClient, log_dir: Path, cleanup_pods: list[str]) -> tuple[Any, str, str]:
    """A new pod with one started container "app" (env KEEP=me): its config, its id, the container's id."""
    pod_config = client.pod_config(f"stub{next(_serial)}", log_dir)
    pod_id = client.run_pod(pod_config)
    cleanup_pods.append(pod_id)
    container_id = client.create_container(pod_id, client.container_config("app", envs={"KEEP": "me"}), pod_config)
    client.start_container(container_id)
    return pod_config, pod_id, container_id


def spec_of(client: CriClient, container_id: str) -> dict:
    return json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]


def test_a_stub_plugin_gets_a_pods_whole_life_and_its_adjustments_land_in_the_oci_spec(
        version: str, mode: str, proxy: ProxyProcess, base: Path, log_dir: Path, cleanup_pods: list[str]) -> None:
    plugin = adjusting_plugin(version, base)
    with serving(proxy, plugin, base, mode) as client:
        early_config = client.pod_config(f"early{next(_serial)}", log_dir)
        if mode == "connected":  # a pod and a container the plugin is told about at Synchronize
            early_pod = client.run_pod(early_config)
            cleanup_pods.append(early_pod)
            client.create_container(early_pod, client.container_config("early-app"), early_config)
        attach(plugin, proxy, base, mode)
        check_registration(plugin, proxy, mode)
        synced = plugin.record("Synchronize")
        assert (synced["pods"], synced["containers"]) == \
            (([early_config.metadata.name], ["early-app"]) if mode == "connected" else ([], []))

        pod_config, pod_id, container_id = started_container(client, log_dir, cleanup_pods)
        spec = spec_of(client, container_id)
        assert f"NRI_STUB={version}" in spec["process"]["env"] and "KEEP=me" in spec["process"]["env"]
        assert client.container_status(container_id).status.annotations[ANNOTATION] == version
        resources = spec["linux"]["resources"]
        assert resources["cpu"]["shares"] == 700 and resources["memory"]["limit"] == MEMORY_LIMIT
        mounts = {mount["destination"]: mount for mount in spec["mounts"]}
        assert mounts["/nri-data"]["source"] == str(base / "bind") and "ro" in mounts["/nri-data"]["options"]
        if Path(HOST_DEVICE).exists():
            found = os.stat(HOST_DEVICE)
            assert {"path": HOST_DEVICE, "type": "c", "major": os.major(found.st_rdev),
                    "minor": os.minor(found.st_rdev)}.items() <= \
                next(d for d in spec["linux"]["devices"] if d["path"] == HOST_DEVICE).items()

        client.runtime.UpdateContainerResources(client.api.UpdateContainerResourcesRequest(
            container_id=container_id, linux=client.api.LinuxContainerResources(cpu_shares=512)), timeout=60)
        assert plugin.record("UpdateContainer")["cpu_shares"] == 512
        assert spec_of(client, container_id)["linux"]["resources"]["cpu"]["shares"] == UPDATED_SHARES
        client.stop_container(container_id)
        client.remove_container(container_id)
        client.stop_pod(pod_id)
        client.remove_pod(pod_id)
        check_pod_life(plugin, pod_config.metadata.name, "app")
    check_launched_stop(plugin, proxy, mode)


def test_a_stub_plugin_gets_only_the_events_it_subscribed_to(
        version: str, proxy: ProxyProcess, base: Path, log_dir: Path, cleanup_pods: list[str]) -> None:
    events = "runpodsandbox,createcontainer,removepodsandbox"
    if version == "v0.12":
        events += ",updatepodsandbox,validatecontaineradjustment"  # no resize here: only the validation is sent
    plugin = StubPlugin(version, base / "events.jsonl", flags=[f"-events={events}", "-env=PICKED=yes"])
    with serving(proxy, plugin, base, "connected") as client:
        attach(plugin, proxy, base, "connected")
        _, pod_id, container_id = started_container(client, log_dir, cleanup_pods)
        assert "PICKED=yes" in spec_of(client, container_id)["process"]["env"]
        client.stop_pod(pod_id)
        client.remove_pod(pod_id)
        sent = ["Configure", "Synchronize", "RunPodSandbox", "CreateContainer", "RemovePodSandbox"]
        assert plugin.events() == (validated(sent) if version == "v0.12" else sent)
        assert proxy.log_count(UNKNOWN_EVENTS) == 0


def test_a_stub_plugins_own_update_reaches_containerd(
        version: str, proxy: ProxyProcess, base: Path, log_dir: Path, cleanup_pods: list[str]) -> None:
    """UpdateContainers sent by the plugin on its own (the stub's runtime-service call), not as an answer."""
    plugin = StubPlugin(version, base / "events.jsonl", flags=["-events=poststartcontainer", "-own-cpu-shares=300"])
    with serving(proxy, plugin, base, "connected") as client:
        attach(plugin, proxy, base, "connected")
        _, _, container_id = started_container(client, log_dir, cleanup_pods)
        answered = plugin.wait_for("UpdateContainers")
        assert (answered["container_id"], answered["failed"], answered.get("error")) == (container_id, 0, None)
        assert spec_of(client, container_id)["linux"]["resources"]["cpu"]["shares"] == 300


# -- Docker mode: real dockerd -------------------------------------------------------------------------


@pytest.fixture
def docker_proxy(dockerd: DockerdInstance, base: Path) -> Iterator[DockerModeProxy]:
    yield from stopped_after(DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=proxy_nri_args(base)))


def test_a_stub_plugin_gets_a_pods_whole_life_in_docker_mode_and_its_adjustments_land_in_docker_inspect(
        version: str, mode: str, dockerd: DockerdInstance, docker_proxy: DockerModeProxy, base: Path) -> None:
    plugin = adjusting_plugin(version, base)
    if mode == "launched":
        plugin.install(base / "plugins", base / "conf.d")
    docker_proxy.start()
    replay = CriDockerdReplay(docker_proxy.listen_path)
    pod = PodShape(name=f"stub{next(_serial)}", uid=str(uuid.uuid4()), cgroup_parent="/rp-nri-stub",
                   sandbox_image=PAUSE_IMAGE, image=BUSYBOX_IMAGE)
    try:
        attach(plugin, docker_proxy, base, mode)
        check_registration(plugin, docker_proxy, mode)
        life = replay.lifecycle(pod, update={"cpu_shares": 512})
        inspected = life.inspected["container"]
        assert f"NRI_STUB={version}" in inspected["Config"]["Env"] and "KEEP=me" in inspected["Config"]["Env"]
        assert inspected["Config"]["Labels"][f"annotation.{ANNOTATION}"] == version
        host = inspected["HostConfig"]
        assert (host["CpuShares"], host["Memory"]) == (700, MEMORY_LIMIT)
        mounts = {mount["Destination"]: mount for mount in inspected["Mounts"]}
        assert (mounts["/nri-data"]["Source"], mounts["/nri-data"]["RW"]) == (str(base / "bind"), False)
        if Path(HOST_DEVICE).exists():
            assert {"PathOnHost": HOST_DEVICE, "PathInContainer": HOST_DEVICE, "CgroupPermissions": "rwm"} in \
                host["Devices"]
        assert life.inspected["updated container"]["HostConfig"]["CpuShares"] == UPDATED_SHARES
        assert plugin.record("UpdateContainer")["cpu_shares"] == 512
        check_pod_life(plugin, pod.name, pod.container, order=DOCKER_POD_LIFE)
    finally:
        replay.close()
        assert docker_proxy.stop() == 0, docker_proxy.log_tail()
        plugin.stop()
    check_launched_stop(plugin, docker_proxy, mode)



# -- the session alone: a state too big for one ttrpc message ---------------------------------------------


def test_a_state_too_big_for_one_message_reaches_the_stub_split_and_whole(version: str, base: Path) -> None:
    """Synchronize split over several requests (`more`), as the stub's collectSync expects: it answers the partial
    ones with `more` and hands its plugin every pod at once."""
    pods = [nri.PodSandbox(id=f"pod{n}", name=f"big{n}", annotations={"filler": "x" * (1 << 20)}) for n in range(6)]
    assert sum(pod.ByteSize() for pod in pods) > MAX_MESSAGE
    plugin = StubPlugin(version, base / "events.jsonl", flags=["-events=runpodsandbox"])
    socket = base / "nri.sock"

    async def synchronized() -> list[nri.ContainerUpdate]:
        answered: asyncio.Future[list[nri.ContainerUpdate]] = asyncio.get_running_loop().create_future()

        async def on_plugin(session: PluginSession) -> None:
            answered.set_result(await session.synchronize(pods, []))
            await session.shutdown()

        server = await listen(bind_unix_socket(socket)[0], lambda reader, writer: serve_connection(
            reader, writer, on_plugin, runtime_name="runtimeproxy", runtime_version="test"))
        plugin.connect(socket)
        try:
            return await asyncio.wait_for(answered, WAIT_SECONDS)
        finally:
            server.close()

    try:
        assert asyncio.run(synchronized()) == []
    finally:
        plugin.stop()
    assert plugin.record("Synchronize")["pods"] == [pod.name for pod in pods]


def test_a_stub_plugin_attaching_while_pods_are_created_hears_of_every_container(
        version: str, proxy: ProxyProcess, base: Path, log_dir: Path, cleanup_pods: list[str]) -> None:
    """The attach-during-creates invariant against real containerd and NRI's real stub (hooks.syncgate, the NRI
    host's lock): each container created while the plugin attaches is in its Synchronize or in its events, never in
    neither. (Timing here rarely hits the old window; tests/nri/test_host_lock.py holds it deterministically.)"""
    plugin = StubPlugin(version, base / "events.jsonl", name="late")
    names = [f"race{n}" for n in range(8)]
    with serving(proxy, plugin, base, "connected") as client:
        def create(name: str) -> None:
            pod_config = client.pod_config(f"{name}-{next(_serial)}", log_dir)
            pod_id = client.run_pod(pod_config)
            cleanup_pods.append(pod_id)
            client.create_container(pod_id, client.container_config(name), pod_config)

        with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
            created = [pool.submit(create, name) for name in names]
            time.sleep(0.05)  # the creates are under way
            plugin.connect(base / "nri.sock")
            for done in created:
                done.result()
        synchronized = set(plugin.wait_for("Synchronize")["containers"])
        heard = {record.get("container") for record in plugin.records()
                 if record["event"] in ("CreateContainer", "PostCreateContainer")}
        missed = [name for name in names if name not in synchronized and name not in heard]
        assert missed == [], plugin.records()
