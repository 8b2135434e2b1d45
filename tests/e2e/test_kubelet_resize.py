"""A real kubelet's in-place pod resize reaches NRI plugins: kubelet v1.35 (rplab.kubelet_node) registered with a
small real cluster (rplab.cluster), a pod resized through the API server's ``resize`` subresource, as
``kubectl patch --subresource resize`` does. The kubelet sends UpdateContainerResources, then
UpdatePodSandboxResources (kuberuntime's updatePodSandboxResources; UNIMPLEMENTED is "best effort" to it). On an
upsize of CPU the kubelet raises the pod's cgroup first, the limit (quota) then the request (shares), telling the
runtime after each (UpdatePodSandboxResources with the pod's resources so far), then the containers.

Hosted: the kubelet through the proxy, which hosts NRI in front of containerd 1.6 (no NRI, no
UpdatePodSandboxResources): the plugin hears UpdateContainer / PostUpdateContainer and UpdatePodSandbox /
PostUpdatePodSandbox with the pod's new resources. The reference: the same kubelet straight to containerd 2.4 with
its own NRI on (which turns UpdatePodSandboxResources into the same pair), the same plugin on its socket. The
resize's events and what UpdatePodSandbox carries are compared; what differs by nature is listed in DIFFERENCES.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

from rplab.cluster import SmallCluster
from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.kubelet_node import NODE_NAME, KubeletNode, wait_until
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from rplab.runtimes import newest
from runtimeproxy.hooks import nri_events

from test_koordlet import remove_pods, require_peers, sleeper  # noqa: E402
from tests.kits.machine import IMAGE_CACHE
from tests.kits.nri import NriPlugin

RESIZE_EVENTS = (nri_events.UPDATE_CONTAINER, nri_events.POST_UPDATE_CONTAINER, nri_events.UPDATE_POD_SANDBOX,
                 nri_events.POST_UPDATE_POD_SANDBOX)
# A CPU upsize: the pod's quota, then its shares, then the container.
UPSIZE_ORDER = [nri_events.UPDATE_POD_SANDBOX, nri_events.POST_UPDATE_POD_SANDBOX] * 2 + [
    nri_events.UPDATE_CONTAINER, nri_events.POST_UPDATE_CONTAINER]
RESIZE_SECONDS = 60.0
SETTLE_SECONDS = 2.0
BEFORE, AFTER = {"cpu": "500m", "memory": "64Mi"}, {"cpu": "700m", "memory": "64Mi"}


def recorder() -> NriPlugin:
    """A plugin on every event, answering nothing, recording what it hears."""
    return NriPlugin(name="resize", index="10", every_event=True)


def closed(loop: LoopThread, plugin: NriPlugin) -> None:
    async def close() -> None:  # its connection lives on the loop thread
        plugin.close()
    loop.run(close())


def resized_pod_events(plugin: NriPlugin, pod_uid: str) -> list[tuple[str, Message]]:
    """The resize's events about the pod, in order (the kubelet's start-up updates of other pods excluded)."""
    about = []
    for name, request in plugin.received:
        if name not in RESIZE_EVENTS:
            continue
        pod = getattr(request, "pod", None)
        if pod is not None and pod.uid == pod_uid:
            about.append((name, request))
    return about


def view(events: list[tuple[str, Message]]) -> dict[str, Any]:
    """What is compared: the order of the events, each UpdatePodSandbox's CPU shares and quota and memory limit,
    and the container's new CPU shares and quota in UpdateContainer."""
    seen: dict[str, Any] = {"order": [name for name, _ in events], "pod_sandbox": []}
    for name, request in events:
        resources = getattr(request, "linux_resources", None)
        if resources is None:
            continue
        values = (resources.cpu.shares.value, resources.cpu.quota.value, resources.memory.limit.value)
        if name == nri_events.UPDATE_POD_SANDBOX:
            seen["pod_sandbox"].append(values)
        if name == nri_events.UPDATE_CONTAINER:
            seen["container"] = values
    return seen


# Differences by nature between containerd 2.4's own NRI and the proxy's hosted NRI, each with its reason.
DIFFERENCES: dict[str, str] = {}


@pytest.fixture(scope="module")
def cluster(workdir: Path) -> Iterator[SmallCluster]:
    require_peers(("etcd", "kube-apiserver", "kubelet"))
    with SmallCluster(workdir / "resize-cluster") as small:
        yield small


def resize_through(cluster: SmallCluster, endpoint: Path, directory: Path, runtime: ContainerdInstance,
                   plugin: NriPlugin) -> dict[str, Any]:
    """A kubelet on `endpoint` registers, runs a Burstable pod, which is resized; the plugin's view of the resize."""
    kubelet = KubeletNode(endpoint, directory / "node", kubeconfig=cluster.kubeconfig("node"))
    kubelet.start()
    try:
        cluster.client.wait_for_node(NODE_NAME)
        pod = cluster.client.create_pod(sleeper("resized", resources={"requests": BEFORE, "limits": BEFORE}))
        try:
            cluster.client.patch("/api/v1/namespaces/default/pods/resized/resize", {"spec": {"containers": [
                {"name": "main", "resources": {"requests": AFTER, "limits": AFTER}}]}})
            uid = pod["metadata"]["uid"]
            try:
                wait_until(lambda: nri_events.POST_UPDATE_CONTAINER in
                           [name for name, _ in resized_pod_events(plugin, uid)], RESIZE_SECONDS,
                           "the plugin to hear PostUpdateContainer for the resized pod's container")
                time.sleep(SETTLE_SECONDS)  # nothing more is to come
            except Exception as error:
                heard = [name for name, _ in plugin.received]
                raise AssertionError(f"{error}; the plugin heard {heard}; pod status "
                                     f"{cluster.client.get('/api/v1/namespaces/default/pods/resized').get('status')}"
                                     ) from None
            return view(resized_pod_events(plugin, uid))
        finally:
            cluster.client.delete_pod("resized")
    finally:
        kubelet.stop()
        cluster.client.delete(f"/api/v1/nodes/{NODE_NAME}")
        remove_pods(runtime)
        assert kubelet.host_changes() == []


def test_a_kubelets_in_place_resize_reaches_hosted_nri_plugins_as_containerds_own_nri_delivers_it(
        cluster: SmallCluster, workdir: Path, loop_thread: LoopThread, koordlet_summary: list[str]) -> None:
    views: dict[str, dict[str, Any]] = {}
    with lab_containerd(workdir / "resize-16", IMAGE_CACHE) as containerd:
        base = workdir / "resize-hosted"
        proxy = ProxyProcess(base / "rp.sock", containerd.address, extra_args=[
            f"--nri-socket={base / 'nri.sock'}", "--log-level=info"])
        proxy.start()
        plugin = recorder()
        try:
            proxy.wait_for_log("NRI: serving plugins", timeout=30)
            loop_thread.run(plugin.connect(base / "nri.sock"))
            views["hosted (1.6)"] = resize_through(cluster, proxy.listen_path, base, containerd, plugin)
        finally:
            closed(loop_thread, plugin)
            assert proxy.stop() == 0, proxy.log_tail()
    native = newest("containerd")
    with lab_containerd(workdir / "resize-native", IMAGE_CACHE, native, nri=True) as containerd:
        plugin = recorder()
        try:
            loop_thread.run(plugin.connect(containerd.nri_socket))
            views[f"native ({native.version})"] = resize_through(
                cluster, Path(containerd.address), workdir / "resize-native-node", containerd, plugin)
        finally:
            closed(loop_thread, plugin)
    hosted, reference = views.values()
    for name, seen in views.items():
        koordlet_summary.append(f"in-place resize, NRI {name}: {seen}")
    assert hosted["order"] == UPSIZE_ORDER, hosted
    # The kubelet's MilliCPUToShares (milli * 1024 // 1000) and MilliCPUToQuota at the 100 ms period.
    shares, quota, memory = 700 * 1024 // 1000, 70_000, 64 * 1024 * 1024
    assert hosted["pod_sandbox"] == [(500 * 1024 // 1000, quota, memory), (shares, quota, memory)]
    assert hosted["container"] == (shares, quota, memory)
    differing = {key for key in hosted.keys() | reference.keys() if hosted.get(key) != reference.get(key)}
    assert differing == set(DIFFERENCES), (views, DIFFERENCES)
