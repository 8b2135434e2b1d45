"""Cases 1 and 2, against the instant Go backend: small calls (latency, calls/s, CPU per call) and large
responses (latency, CPU, memory), the proxy beside the aio relay, the Go relay, socat and a bare Python hop."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.cases.measure import Scale, alternate, available, column, row_ratio, sparse_calls
from bench.peers import LIST_CONTAINERS, VERSION, VERSION_REQUEST, Lab, Metrics, Peer
from bench.procfs import memory_mb
from bench.report import CaseReport
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

MB = 1 << 20
SMALL_CONCURRENCY = (1, 16, 64)
LARGE_SIZES_MB = (4, 16, 48)
DECODE_ALL_SIZE_MB = 16
CPU_TARGET_CONCURRENCY = 16
HOT_PATH_CPU_LIMIT = 1.1  # proxy CPU per call over the minimal aio relay's
RSS_SETTLED_LIMIT = 2.0  # proxy RSS after large messages (settled) over its idle RSS
SETTLE_SECONDS = 2.0
SETTLE_CALLS = 1000
SPARSE_ROUNDS = 3


def synthetic_peers(lab: Lab, report: CaseReport, with_echo: bool) -> list[Peer]:
    backend = lab.backend
    starters: dict[str, Callable[[], Peer]] = {
        "direct": lambda: backend,
        "proxy": lambda: lab.hop("proxy", backend),
        "grpc-only": lambda: lab.hop("grpc-only", backend),
        "koord": lambda: lab.hop("koord", backend),
        "aio-relay": lambda: lab.hop("aio-relay", backend),
        "go-relay": lambda: lab.hop("go-relay", backend),
        "socat": lambda: lab.hop("socat", backend),
    }
    if lab.baseline is not None:
        starters["baseline"] = lambda: lab.hop("baseline", backend)
    if with_echo:
        starters["echo-hop"] = lambda: lab.echo_hop
    return available(lab, report, starters)


def case_small(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = synthetic_peers(lab, report, with_echo=True)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for concurrency in SMALL_CONCURRENCY:
        def run(peer: Peer, seconds: float = scale.seconds, concurrency: int = concurrency) -> Metrics:
            return lab.client(peer, VERSION, VERSION_REQUEST, concurrency=concurrency, seconds=seconds)
        results[concurrency] = alternate(peers, run, scale.rounds,
                                         warmup=lambda peer: run(peer, scale.warmup_seconds))
    report.raw["results"] = {f"c{c}": result for c, result in results.items()}
    serial, busy = results[1], results[CPU_TARGET_CONCURRENCY]
    report.row("Version p50, c=1", "us", column(serial, "p50_us"))
    report.row("Version p99, c=1", "us", column(serial, "p99_us"))
    for concurrency, result in results.items():
        row = report.row(f"Version calls/s, c={concurrency}", "calls/s", column(result, "calls_per_s"))
        if concurrency == max(SMALL_CONCURRENCY):
            throughput_target(report, row, results)
    report.row("Version p50, c=16", "us", column(busy, "p50_us"))
    report.row("CPU per call in the hop, c=1", "us", column(serial, "cpu_us"))
    row = report.row(f"CPU per call in the hop, c={CPU_TARGET_CONCURRENCY}", "us", column(busy, "cpu_us"),
                     note="direct: the instant Go backend's own CPU; echo-hop: the Python server answering itself")
    ratio = row.ratio("proxy", "aio-relay")
    if ratio is not None:
        report.target(row, f"proxy CPU/call <= {HOT_PATH_CPU_LIMIT}x the minimal aio relay's",
                      ratio <= HOT_PATH_CPU_LIMIT, f"{ratio:.2f}x")
    report.row("RSS after the small calls", "MB", {peer.name: memory_mb(peer.pid) for peer in peers})
    sparse = alternate(peers, lambda peer: sparse_calls(lab, peer, VERSION, VERSION_REQUEST, scale.seconds * 3),
                       min(SPARSE_ROUNDS, scale.rounds), warmup=lambda peer: sparse_calls(lab, peer, VERSION,
                                                                                        VERSION_REQUEST, 1))
    report.raw["sparse"] = sparse
    report.row("CPU per call in the hop, 5 calls/s", "us", column(sparse, "cpu_us_per_call"),
               note="calls 0.2 s apart, as a kubelet's come: each wakes the hop's threads; echo-hop: a grpc.aio "
                    "server answering by itself, the floor of any grpcio server")
    headroom = row_ratio(busy, "direct", "proxy", "calls_per_s")
    if headroom is not None:
        report.notes.append(f"direct (client + Go backend alone) does {headroom:.0f}x the proxy's calls/s at "
                            f"c={CPU_TARGET_CONCURRENCY}: neither the client nor the backend limits the hops")


def throughput_target(report: CaseReport, row: Any, results: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> None:
    """At the highest concurrency the proxy keeps at least its 16-way calls/s, with no failed call."""
    top = max(SMALL_CONCURRENCY)
    if "proxy" not in results[top]:
        return
    errors = sum(int(run["errors"]) for result in results.values() for run in result["proxy"]["runs"])
    wide, busy = results[top]["proxy"]["calls_per_s"], results[CPU_TARGET_CONCURRENCY]["proxy"]["calls_per_s"]
    report.target(row, f"proxy calls/s at c={top} >= at c={CPU_TARGET_CONCURRENCY}, no errors",
                  wide >= busy and errors == 0, f"{wide / busy:.2f}x, {errors} errors")


def case_large(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = synthetic_peers(lab, report, with_echo=False)
    for mb in LARGE_SIZES_MB:  # the backend builds each canned answer on first use: not measured
        lab.client(lab.backend, LIST_CONTAINERS, sized_request(mb * MB), count=1)
    decode_all = available(lab, report, {"decode-all": lambda: lab.decode_all_proxy})
    for mb in LARGE_SIZES_MB:
        def run(peer: Peer, calls: int = scale.large_calls[mb], request: bytes = sized_request(mb * MB)) -> Metrics:
            return lab.client(peer, LIST_CONTAINERS, request, count=calls)
        compared = peers + decode_all if mb == DECODE_ALL_SIZE_MB else peers
        result = alternate(compared, run, scale.rounds, warmup=lambda peer: run(peer, 1))
        report.raw[f"{mb}MB"] = result
        row = report.row(f"ListContainers {mb} MB p50", "ms", column(result, "p50_us", 1e-3))
        if mb == 16 and row.values.get("go-relay"):
            ratio = row.ratio("proxy", "go-relay")
            report.target(row, "16 MB p50 <= the Go relay's", ratio is not None and ratio <= 1.0,
                          f"{ratio:.2f}x" if ratio else "no proxy figure")
        wrong = {name: f"{sum(int(run['errors']) for run in metrics['runs'])} errors, "
                       f"{int(metrics['response_bytes'])} bytes{first_error(metrics)}"
                 for name, metrics in result.items()
                 if metrics["errors"] or metrics["response_bytes"] < mb * MB}
        if wrong:
            report.notes.append(f"{mb} MB: wrong answers from {wrong}")
        if mb == 16:
            report.row("CPU per 16 MB call in the hop", "ms", column(result, "cpu_us", 1e-3),
                       note="direct: the Go backend's own")
    memory_rows(lab, peers, report)


def first_error(metrics: Mapping[str, Any]) -> str:
    """The first failed call's error of a peer's runs, in parentheses; empty if none failed."""
    errors = [run["first_error"] for run in metrics["runs"] if run.get("first_error")]
    return f" ({errors[0][:160]})" if errors else ""


def sized_request(size: int) -> bytes:
    """A ListContainers request asking the Go backend for an answer of about `size` bytes."""
    return cri.ListContainersRequest(filter=cri.ContainerFilter(id=f"size={size}")).SerializeToString()


def memory_rows(lab: Lab, peers: list[Peer], report: CaseReport) -> None:
    """RSS of each hop: idle at start, right after the large messages, and settled (a pause, then small calls)."""
    hops = [peer for peer in peers if peer.name != "direct"]
    report.row("RSS idle (at start)", "MB", {peer.name: peer.idle_rss_mb for peer in hops})
    report.row("RSS right after the large messages", "MB", {peer.name: memory_mb(peer.pid) for peer in hops})
    report.row("peak RSS (VmHWM)", "MB", {peer.name: memory_mb(peer.pid, "VmHWM") for peer in hops})
    time.sleep(SETTLE_SECONDS)
    for peer in hops:
        lab.client(peer, VERSION, VERSION_REQUEST, count=SETTLE_CALLS)
    settled = {peer.name: memory_mb(peer.pid) for peer in hops}
    row = report.row(f"RSS settled ({SETTLE_SECONDS:g} s, then {SETTLE_CALLS} small calls)", "MB", settled)
    proxy = next((peer for peer in hops if peer.name == "proxy"), None)
    if proxy is not None:
        ratio = settled["proxy"] / proxy.idle_rss_mb
        report.target(row, f"proxy settled RSS <= {RSS_SETTLED_LIMIT:g}x idle", ratio <= RSS_SETTLED_LIMIT,
                      f"{ratio:.2f}x idle ({proxy.idle_rss_mb:.0f} MB)")
