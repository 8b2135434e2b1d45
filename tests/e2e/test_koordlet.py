"""koordinator's koordlet v1.8.0, the plugin the proxy exists for, on a small real cluster (rplab.cluster: etcd,
kube-apiserver, koordinator's CRDs) with the real kubelet registered as its node (rplab.kubelet_node) and the proxy
as that kubelet's runtime endpoint, in front of a containerd of its own. Pods are created through the API server, as
``kubectl apply`` would, bound to the node (there is no scheduler).

koordlet registers itself with the proxy as its DaemonSet does: it writes its hookserver.d file into the proxy's
hook directory naming its own socket. The NodeSLO koord-manager would write is written by the test. What koordlet
does is checked in the container's cgroup files, not only in the CRI request.

The cluster's peers (etcd, kube-apiserver, koordlet) take minutes to build cold: where they are not built yet the
tests skip and say how to build them (``.venv/bin/python -m rplab.peers etcd kube-apiserver koordlet``); with
RUNTIMEPROXY_REQUIRE_E2E set they are built and a failure fails.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rplab.cluster import SmallCluster
from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.images import BUSYBOX_IMAGE
from rplab.kubelet_node import NODE_NAME, KubeletNode
from rplab.peers import PeerBuildError, is_built, peer_binary
from rplab.process import ProxyProcess

from machinekit import IMAGE_CACHE, REQUIRE_E2E_ENV, skip_or_fail

CLUSTER_PEERS = ("etcd", "kube-apiserver", "kubelet")
BUILD_HINT = ".venv/bin/python -m rplab.peers etcd kube-apiserver kubelet koordlet (about 15 minutes cold)"


def require_peers(names: tuple[str, ...]) -> None:
    """Skips when a peer is not built yet (unless e2e is required: then it is built, and a failure fails)."""
    missing = [name for name in names if not is_built(name)]
    if missing and not os.environ.get(REQUIRE_E2E_ENV):
        pytest.skip(f"the small cluster's peers {', '.join(missing)} are not built: {BUILD_HINT}")
    try:
        for name in names:
            peer_binary(name)
    except PeerBuildError as error:
        skip_or_fail(f"cannot build the small cluster's peers: {error}")


@pytest.fixture(scope="module")
def cluster(workdir: Path, koordlet_summary: list[str]) -> Iterator[SmallCluster]:
    require_peers(CLUSTER_PEERS)
    small = SmallCluster(workdir / "cluster")
    small.start()
    try:
        koordlet_summary.append("cluster: " + ", ".join(f"{what} {seconds}" for what, seconds in small.figures.items()))
        yield small
    finally:
        small.stop()


@pytest.fixture(scope="module")
def node_runtime(workdir: Path) -> Iterator[ContainerdInstance]:
    """A containerd for the registered kubelet alone (it stops whatever pods it does not know)."""
    with lab_containerd(workdir / "koordlet-ctd", IMAGE_CACHE) as instance:
        yield instance


@pytest.fixture(scope="module")
def proxy(node_runtime: ContainerdInstance, workdir: Path) -> Iterator[ProxyProcess]:
    """The proxy in front of the node's containerd; plugins register in its hook directory."""
    process = ProxyProcess(workdir / "koordlet-proxy" / "rp.sock", node_runtime.address,
                           extra_args=["--log-level=info"])
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_tail()


@pytest.fixture(scope="module")
def node(cluster: SmallCluster, proxy: ProxyProcess, workdir: Path, koordlet_summary: list[str]
         ) -> Iterator[KubeletNode]:
    """The kubelet registered as NODE_NAME, its runtime endpoint the proxy."""
    kubelet = KubeletNode(proxy.listen_path, workdir / "koordlet-node", kubeconfig=cluster.kubeconfig("node"))
    started = time.monotonic()
    kubelet.start()
    try:
        cluster.client.wait_for_node(NODE_NAME)
        koordlet_summary.append(f"kubelet registered as {NODE_NAME} in {time.monotonic() - started:.1f} s")
        yield kubelet
    finally:
        kubelet.stop()
        assert kubelet.host_changes() == []


def sleeper(name: str, labels: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A host-network pod (the node has no CNI) of one busybox container that sleeps, bound to the node."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": {"nodeName": NODE_NAME, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"], "resources": resources or {}}]}}


def container_spec(runtime: Path, pod: dict[str, Any]) -> dict[str, Any]:
    """The OCI spec of the pod's (first) container, as the runtime holds it."""
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    client = CriClient(open_channel(runtime))
    with client.channel:
        info = client.container_status(container_id, verbose=True).info["info"]
    spec: dict[str, Any] = json.loads(info)["runtimeSpec"]
    return spec


def test_the_cluster_serves_koordinators_resources(cluster: SmallCluster) -> None:
    for path in ("/apis/slo.koordinator.sh/v1alpha1/nodeslos", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
                 "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"):
        assert cluster.client.get(path)["items"] == [], path


def test_a_pod_created_through_the_api_server_runs_through_the_proxy(
        cluster: SmallCluster, node: KubeletNode, node_runtime: ContainerdInstance, koordlet_summary: list[str]
) -> None:
    started = time.monotonic()
    pod = cluster.client.create_pod(sleeper("plain"))
    koordlet_summary.append(f"a plain pod: Running {time.monotonic() - started:.1f} s after its creation")
    try:
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [True]
        spec = container_spec(Path(node_runtime.address), pod)
        assert spec["annotations"]["io.kubernetes.cri.sandbox-uid"] == pod["metadata"]["uid"]
    finally:
        cluster.client.delete_pod("plain")
