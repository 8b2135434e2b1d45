"""Cases 3 and 4, against a real containerd: a kubelet's steady state on a node of N pods (each hop's CPU), and
pod startup and lifecycle, also through the proxy with the no-op plugin on all seven hooks, and through the proxy
hosting NRI with one no-op NRI plugin on every NRI event (containerd 1.6 has no NRI of its own)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.cases.measure import Results, Scale, alternate, available, column, sparse_calls
from bench.trace_cost import traced_call_microseconds
from bench.gopeers import run_client
from bench.peers import IMAGES, LIST_CONTAINERS, RUNTIME, VERSION, VERSION_REQUEST, Lab, Metrics, Peer
from bench.procfs import threads_cpu_seconds
from bench.report import CaseReport
from rplab.cri import CriClient, open_channel
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

T = TypeVar("T")

PLUGIN_STARTUP_LIMIT = 1.15  # pod startup through the proxy with a no-op plugin on all hooks, over direct
# A kubelet's calls on a steady node (pkg/kubelet: PLEG relist, runtime status, stats, pod syncs).
RELIST_PERIOD_S, STATUS_PERIOD_S, STATS_PERIOD_S, POD_SYNC_PERIOD_S = 1, 5, 10, 60


@dataclass(frozen=True)
class NodePods:
    """The pods of the steady node: per pod its sandbox and its one running container."""

    pods: list[tuple[str, str]]

    @classmethod
    def create(cls, client: CriClient, count: int, log_root: Path) -> NodePods:
        def one(index: int) -> tuple[str, str]:
            pod_config = client.pod_config(f"steady-{index}", log_root / f"p{index}")
            pod_id = client.run_pod(pod_config)
            config = client.container_config("app", command=["sleep", "86400"])
            container_id = client.create_container(pod_id, config, pod_config)
            client.start_container(container_id)
            return pod_id, container_id

        with ThreadPoolExecutor(4) as pool:
            return cls(list(pool.map(one, range(count))))

    def remove(self, client: CriClient) -> None:
        def one(pod: tuple[str, str]) -> None:
            client.stop_pod(pod[0])
            client.remove_pod(pod[0])

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, self.pods))


def kubelet_schedule(pods: NodePods, second: int) -> list[tuple[str, bytes]]:
    """The calls a kubelet makes in one second of a steady node (method path, encoded request)."""
    calls = [(RUNTIME + "ListPodSandbox", cri.ListPodSandboxRequest().SerializeToString()),
             (RUNTIME + "ListContainers", cri.ListContainersRequest().SerializeToString())]  # PLEG relist
    if second % STATUS_PERIOD_S == 0:
        calls += [(RUNTIME + "Status", cri.StatusRequest().SerializeToString()), (VERSION, VERSION_REQUEST)]
    if second % STATS_PERIOD_S == 0:
        calls += [(RUNTIME + "ListContainerStats", cri.ListContainerStatsRequest().SerializeToString()),
                  (IMAGES + "ImageFsInfo", cri.ImageFsInfoRequest().SerializeToString())]
    count = len(pods.pods)  # each pod's status sync once a POD_SYNC_PERIOD_S, spread evenly
    first, last = second * count // POD_SYNC_PERIOD_S, (second + 1) * count // POD_SYNC_PERIOD_S
    for index in range(first, last):
        pod_id, container_id = pods.pods[index % count]
        by_pod = cri.ContainerFilter(pod_sandbox_id=pod_id)
        calls += [(RUNTIME + "PodSandboxStatus",
                   cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id).SerializeToString()),
                  (RUNTIME + "ListContainers", cri.ListContainersRequest(filter=by_pod).SerializeToString()),
                  (RUNTIME + "ContainerStatus",
                   cri.ContainerStatusRequest(container_id=container_id).SerializeToString())]
    return calls


def steady_state(peer: Peer, pods: NodePods, seconds: float) -> Metrics:
    """Play the kubelet's schedule through `peer` for `seconds`: the hop's CPU % of one core.

    CPU from the threads' schedstat (ns): a 20 s window of ~1 % is too little for 10 ms ticks.
    """
    with open_channel(peer.socket) as channel:
        callables: dict[str, Any] = {}
        before, started = threads_cpu_seconds(peer.pid), time.monotonic()
        calls = 0
        for second in range(int(seconds)):
            for method, request in kubelet_schedule(pods, second):
                call = callables.get(method) or callables.setdefault(method, channel.unary_unary(method))
                call(request, timeout=30)
                calls += 1
            time.sleep(max(0.0, started + second + 1 - time.monotonic()))
        elapsed = time.monotonic() - started
        used = threads_cpu_seconds(peer.pid) - before
    return {"cpu_percent": used / elapsed * 100, "calls_per_s": calls / elapsed,
            "cpu_us_per_call": used * 1e6 / calls}


def containerd_peers(lab: Lab, report: CaseReport, with_plugin: bool) -> list[Peer]:
    containerd = lab.containerd
    starters: dict[str, Callable[[], Peer]] = {
        "direct": lambda: containerd,
        "proxy": lambda: lab.hop("proxy", containerd, "containerd"),
        "grpc-only": lambda: lab.hop("grpc-only", containerd, "containerd"),
        "koord": lambda: lab.hop("koord", containerd, "containerd"),
        "aio-relay": lambda: lab.hop("aio-relay", containerd, "containerd"),
        "go-relay": lambda: lab.hop("go-relay", containerd, "containerd"),
    }
    if lab.baseline is not None:
        starters["baseline"] = lambda: lab.hop("baseline", containerd, "containerd")
    if with_plugin:
        starters["plugin"] = lambda: lab.plugin_proxy
        starters["plugin-notrace"] = lambda: lab.untraced_plugin_proxy
        if lab.baseline is not None:
            starters["baseline-plugin"] = lambda: lab.baseline_plugin_proxy
        starters["koord-plugin"] = lambda: lab.koord_plugin_proxy
        starters["nri"] = lambda: lab.nri_proxy
        if lab.baseline is not None:
            starters["baseline-nri"] = lambda: lab.baseline_nri_proxy
    return available(lab, report, starters)


def case_kubelet(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = containerd_peers(lab, report, with_plugin=False)
    with open_channel(lab.containerd.socket) as channel:
        client = CriClient(channel)
        started = time.perf_counter()
        pods = NodePods.create(client, scale.pods, lab.base / "pod-logs")
        report.notes.append(f"{scale.pods} pods with one running container each, created in "
                            f"{time.perf_counter() - started:.1f} s")
        try:
            result = alternate(peers, lambda peer: steady_state(peer, pods, scale.kubelet_seconds), 1,
                               warmup=lambda peer: steady_state(peer, pods, 2))
            mix = kubelet_mix(pods)
            replayed = alternate(peers, lambda peer: replay(lab, peer, mix, scale.kubelet_seconds), scale.replay_rounds,
                                 warmup=lambda peer: replay(lab, peer, mix, 2))
            lists = {method.rpartition("/")[2]: sparse_lists(lab, peers, method, request, scale)
                     for method, request in ((LIST_CONTAINERS, UNFILTERED_CONTAINERS),
                                             (LIST_SANDBOXES, UNFILTERED_SANDBOXES))}
        finally:
            started = time.perf_counter()
            pods.remove(client)
            report.notes.append(f"removed them in {time.perf_counter() - started:.1f} s")
    idle = idle_cpu_percent(peers, scale.idle_seconds)
    report.raw.update(result=result, replay=replayed, sparse_lists=lists, idle_cpu_percent=idle)
    report.row(f"kubelet steady state, {scale.pods} pods", "calls/s", column(result, "calls_per_s"),
               note="the schedule of PLEG relist, status, stats and pod syncs, from a Python client")
    report.row("CPU of one core, kubelet steady state", "%", column(result, "cpu_percent"),
               note="direct: containerd's own CPU, for scale")
    report.row(f"kubelet mix replay (Go clients), {scale.pods} pods", "calls/s", column(replayed, "calls_per_s"),
               note="the real kubelet v1.35's mix, each method from a grpc-go client at its own pace "
                    "(bench.cases.containerd.KUBELET_MIX)")
    report.row("CPU of one core, kubelet mix replay", "%", column(replayed, "cpu_percent"))
    row = report.row("CPU per call, kubelet mix replay", "us", column(replayed, "cpu_us_per_call"))
    ratio = row.ratio("proxy", "koord")
    if ratio is not None:
        report.target(row, "proxy CPU under the kubelet's mix <= koord-runtime-proxy's", ratio <= 1.0, f"{ratio:.2f}x")
    for name, measured in lists.items():
        size = measured.get("direct", {}).get("response_bytes")
        report.row(f"{name}, {scale.pods} pods, 5 calls/s, p50", "us", column(measured, "p50_us"),
                   note=f"unfiltered, {size / 1024:.0f} KB answers" if size else "")
        report.row(f"CPU per {name} call at 5 calls/s", "us", column(measured, "cpu_us_per_call"))
    report.row("CPU of one core, idle (no calls)", "%", idle)


# The real kubelet's calls on a steady node, each method at its own pace (seconds between calls), as counted in
# front of containerd 1.6 (kubelet v1.35.8, standalone): PLEG relists every second (ListPodSandbox, ListContainers),
# runtime status every 5 s, Version ~8 a minute, stats every 10 s, images twice a minute; a pod's sync reads its
# containers' status (one ContainerStatus per pod a minute here). No probes: ExecSync is a runc exec, the runtime's
# cost, not a hop's.
KUBELET_MIX = (("ListPodSandbox", 1.0), ("ListContainers", 1.0), ("Status", 5.0), ("Version", 7.5),
               ("ImageFsInfo", 10.0), ("ListContainerStats", 10.0), ("ListImages", 30.0))
POD_STATUS_PERIOD_S = 60.0
LIST_SANDBOXES = RUNTIME + "ListPodSandbox"
UNFILTERED_CONTAINERS = cri.ListContainersRequest().SerializeToString()
UNFILTERED_SANDBOXES = cri.ListPodSandboxRequest().SerializeToString()


def kubelet_mix(pods: NodePods) -> list[tuple[str, bytes, float]]:
    """The kubelet's mix on `pods`: (method path, encoded request, seconds between its calls)."""
    requests = {"ListPodSandbox": cri.ListPodSandboxRequest(), "ListContainers": cri.ListContainersRequest(),
                "Status": cri.StatusRequest(), "Version": cri.VersionRequest(version="v1"),
                "ImageFsInfo": cri.ImageFsInfoRequest(), "ListContainerStats": cri.ListContainerStatsRequest(),
                "ListImages": cri.ListImagesRequest()}
    mix = [((IMAGES if name in ("ImageFsInfo", "ListImages") else RUNTIME) + name,
            requests[name].SerializeToString(), period) for name, period in KUBELET_MIX]
    if pods.pods:
        container_id = pods.pods[0][1]
        mix.append((RUNTIME + "ContainerStatus", cri.ContainerStatusRequest(container_id=container_id)
                    .SerializeToString(), POD_STATUS_PERIOD_S / len(pods.pods)))
    return mix


def sparse_lists(lab: Lab, peers: list[Peer], method: str, request: bytes, scale: Scale) -> Results:
    """An unfiltered list of the node's pods through each peer at the kubelet's pace, alternating."""
    return alternate(peers, lambda peer: sparse_calls(lab, peer, method, request, scale.kubelet_seconds / 2),
                     scale.replay_rounds, warmup=lambda peer: sparse_calls(lab, peer, method, request, 1))


def replay(lab: Lab, peer: Peer, mix: list[tuple[str, bytes, float]], seconds: float) -> Metrics:
    """The mix through `peer` for `seconds`, one benchgo client per method at once: the hop's CPU (its threads'
    schedstat, ns: a window of ~1 % is too little for 10 ms ticks), calls/s and CPU per call."""
    before, started = threads_cpu_seconds(peer.pid), time.monotonic()
    with ThreadPoolExecutor(len(mix)) as pool:
        runs = list(pool.map(lambda call: run_client(lab.benchgo, peer.socket, call[0], lab.request_file(call[1]),
                                                     seconds=seconds, interval=call[2]), mix))
    elapsed = time.monotonic() - started
    used = threads_cpu_seconds(peer.pid) - before
    calls = sum(int(run["calls"]) + int(run["errors"]) for run in runs)
    return {"cpu_percent": used / elapsed * 100, "calls_per_s": calls / elapsed,
            "cpu_us_per_call": used * 1e6 / calls if calls else float("nan"),
            "errors": sum(int(run["errors"]) for run in runs)}


def idle_cpu_percent(peers: list[Peer], seconds: float) -> dict[str, float | None]:
    """Each process's CPU % of one core over one window in which nobody calls (all measured at once)."""
    before, started = {peer.name: threads_cpu_seconds(peer.pid) for peer in peers}, time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {peer.name: (threads_cpu_seconds(peer.pid) - before[peer.name]) / elapsed * 100 for peer in peers}


# --- case: pod startup with a plugin on all hooks ---------------------------------------------------------

STARTUP_STEPS = ("RunPodSandbox", "CreateContainer", "StartContainer")
LIFECYCLE_STEPS = (*STARTUP_STEPS, "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox")


def pod_lifecycle(client: CriClient, log_root: Path) -> Metrics:
    """One host-network pod with one container, from RunPodSandbox to RemovePodSandbox: ms per step."""
    pod_config = client.pod_config("bench", log_root / uuid.uuid4().hex[:12])
    container_config = client.container_config("app")
    times: Metrics = {}

    def timed(step: str, action: Callable[[], T]) -> T:
        before = time.perf_counter()
        result = action()
        times[f"{step}_ms"] = (time.perf_counter() - before) * 1e3
        return result

    pod_id = timed("RunPodSandbox", lambda: client.run_pod(pod_config))
    container_id = timed("CreateContainer", lambda: client.create_container(pod_id, container_config, pod_config))
    timed("StartContainer", lambda: client.start_container(container_id))
    timed("StopContainer", lambda: client.stop_container(container_id, grace=0))
    timed("RemoveContainer", lambda: client.remove_container(container_id))
    timed("StopPodSandbox", lambda: client.stop_pod(pod_id))
    timed("RemovePodSandbox", lambda: client.remove_pod(pod_id))
    times["startup_ms"] = sum(times[f"{step}_ms"] for step in STARTUP_STEPS)
    times["total_ms"] = sum(times[f"{step}_ms"] for step in LIFECYCLE_STEPS)
    return times


@contextmanager
def cri_clients(peers: list[Peer]) -> Iterator[dict[str, CriClient]]:
    with ExitStack() as stack:
        yield {peer.name: CriClient(stack.enter_context(open_channel(peer.socket))) for peer in peers}


def case_startup(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = [peer for peer in containerd_peers(lab, report, with_plugin=True) if peer.name != "aio-relay"]
    log_root = lab.base / "pod-logs"
    with cri_clients(peers) as clients:
        result = alternate(peers, lambda peer: pod_lifecycle(clients[peer.name], log_root), scale.lifecycles)
    counts = lab.plugin_counts()
    nri_counts = lab.nri_counts()
    report.raw.update(result=result, plugin_calls=counts, nri_plugin_calls=nri_counts)
    row = report.row("pod startup (Run, Create, Start), median", "ms", column(result, "startup_ms"),
                     note="plugin: the proxy with a no-op plugin on all seven hooks; plugin-notrace: the same "
                     "with the decision trace off (--hook-trace-entries=0); nri: the proxy hosting NRI with one "
                     "no-op NRI plugin on every event")
    nri_ratio = row.ratio("nri", "direct")
    if nri_ratio is not None:
        report.notes.append(f"pod startup with one NRI plugin on all events vs direct: {nri_ratio:.2f}x; "
                            f"its calls per event: {json.dumps(nri_counts, sort_keys=True)}")
    ratio = row.ratio("plugin", "direct")
    if ratio is not None:
        report.target(row, f"startup with a plugin on all hooks <= {PLUGIN_STARTUP_LIMIT}x direct",
                      ratio <= PLUGIN_STARTUP_LIMIT, f"{ratio:.2f}x")
    report.row("pod lifecycle (7 calls), median", "ms", column(result, "total_ms"))
    steps = "; ".join(f"{step} " + "/".join(f"{result[peer.name][step + '_ms']:.0f}" for peer in peers)
                      for step in LIFECYCLE_STEPS)
    report.notes.append(f"median ms per step, {'/'.join(peer.name for peer in peers)}: {steps}")
    cost = traced_call_microseconds()
    report.raw.update(trace_cost=cost)
    report.notes.append(f"decision trace, in-process, one plugin answering a koordlet-like change: "
                        f"{cost['trace_us_per_call']:.0f} us per traced call on top of the merge's "
                        f"{cost['untraced_us']:.0f} us (bench.trace_cost)")
    plugin_peers = sum(1 for peer in peers if "plugin" in peer.name)  # they share the one no-op plugin
    report.notes.append(f"no-op plugin calls (expected {plugin_peers * (scale.lifecycles + 1)} per lifecycle hook; "
                        f"PreUpdateContainerResources is in no lifecycle): {json.dumps(counts, sort_keys=True)}")
