"""Case 7, the real kubelet (v1.35, standalone, rplab.kubelet_node) with N static pods on a real containerd, through
each hop in turn: each process's CPU % of one core over one window of the kubelet's steady state (the hop, and
containerd and the kubelet for scale). The kubelet owns its runtime, so the hops take turns: one kubelet at a time
starts its pods through the hop, settles, is measured, and stops (its pods removed) before the next."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.cases.containerd import containerd_peers
from bench.cases.measure import Scale
from bench.peers import Lab, Metrics, Peer
from bench.procfs import threads_cpu_seconds
from bench.report import CaseReport
from rplab.images import BUSYBOX_IMAGE
from rplab.kubelet_node import KubeletNode, wait_until

HOPS = ("direct", "proxy", "grpc-only", "koord")
SETTLE_SECONDS = 10.0  # after every pod runs: the pod workers' first syncs are done


def sleeping_pod(index: int) -> dict[str, object]:
    """A host-network static pod with one sleeping busybox container, no probes (the issue's steady node)."""
    container = {"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "86400"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"steady-{index}", "namespace": "bench"},
            "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 1, "containers": [container]}}


def running_pods(node: KubeletNode) -> int:
    return sum(1 for pod in node.pods() if pod.get("status", {}).get("phase") == "Running")


def node_window(lab: Lab, peer: Peer, pods: int, seconds: float) -> Metrics:
    """A kubelet through `peer` with `pods` static pods: CPU % of one core of the hop, containerd and the kubelet
    over `seconds` of its steady state (threads' schedstat)."""
    node = KubeletNode(peer.socket, lab.base / f"kn-{peer.name}")
    started = time.monotonic()
    node.start()
    try:
        for index in range(pods):
            node.write_pod(sleeping_pod(index))
        wait_until(lambda: running_pods(node) >= pods or None, 120 + pods * 3, f"{pods} pods running")
        ready_s = time.monotonic() - started
        time.sleep(SETTLE_SECONDS)
        kubelet = node._process  # noqa: SLF001 - the kubelet's pid (unshare and sh exec it)
        assert kubelet is not None
        pids = {"hop": peer.pid, "containerd": lab.containerd.pid, "kubelet": kubelet.pid}
        before, begun = {name: threads_cpu_seconds(pid) for name, pid in pids.items()}, time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - begun
        used = {name: (threads_cpu_seconds(pid) - before[name]) / elapsed * 100 for name, pid in pids.items()}
    finally:
        node.stop()
    return {"hop_cpu_percent": used["hop"], "containerd_cpu_percent": used["containerd"],
            "kubelet_cpu_percent": used["kubelet"], "pods_running_s": ready_s}


def case_kubelet_node(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = [peer for peer in containerd_peers(lab, report, with_plugin=False) if peer.name in HOPS]
    results: dict[str, Metrics] = {}
    for peer in peers:
        results[peer.name] = node_window(lab, peer, scale.kubelet_node_pods, scale.kubelet_node_seconds)
    report.raw["result"] = results
    column: Callable[[str], dict[str, float | None]] = lambda key: {name: m[key] for name, m in results.items()}
    hop = column("hop_cpu_percent")
    row = report.row(f"CPU of one core, real kubelet, {scale.kubelet_node_pods} pods", "%", hop,
                     note=f"one {scale.kubelet_node_seconds:.0f} s window per hop; direct: containerd's own")
    ratio = row.ratio("proxy", "koord")
    if ratio is not None:
        report.target(row, "proxy CPU under the real kubelet <= koord-runtime-proxy's", ratio <= 1.0, f"{ratio:.2f}x")
    report.row("containerd's CPU of one core, same windows", "%", column("containerd_cpu_percent"))
    report.row("the kubelet's CPU of one core, same windows", "%", column("kubelet_cpu_percent"))
    report.row("pods running after the kubelet's start", "s", column("pods_running_s"))
