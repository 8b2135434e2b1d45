"""Case 5, Docker mode against a private real dockerd: list, inspect and exec round trips through the proxy,
beside the Go reverse proxy and socat, driven by `benchgo dockerclient`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.cases.measure import Results, Scale, alternate, available, column
from bench.docker_node import RUNNING_SANDBOXES
from bench.peers import Lab, Metrics, Peer
from bench.report import CaseReport, Row

DOCKER_READS = ("list", "inspect")
DOCKER_CONCURRENCY = (1, 16)
EXEC_CONCURRENCY = 4
# Exec round trip p50 through the proxy over the Go reverse proxy's: against direct every hop, socat
# included, measured up to 1.2x on a loaded machine, so the anchor that pays the same hop is the yardstick.
EXEC_GO_PROXY_LIMIT = 1.1
# Issue 22: the hop's CPU per call and the p50 of list, inspect and the exec round trip, over the Go reverse
# proxy's (koord-runtime-proxy's Docker mode is one).
HOP_CPU_GO_PROXY_LIMIT = 1.3
P50_GO_PROXY_LIMIT = 1.2


def docker_peers(lab: Lab, report: CaseReport) -> list[Peer]:
    dockerd = lab.dockerd
    starters: dict[str, Callable[[], Peer]] = {
        "direct": lambda: dockerd,
        "proxy": lambda: lab.hop("proxy", dockerd, "dockerd"),
        "go-proxy": lambda: lab.hop("go-proxy", dockerd, "dockerd"),
        "socat": lambda: lab.hop("socat", dockerd, "dockerd"),
    }
    if lab.baseline is not None:
        starters["baseline"] = lambda: lab.hop("baseline", dockerd, "dockerd")
    return available(lab, report, starters)



def case_docker(lab: Lab, scale: Scale, report: CaseReport) -> None:
    started = time.perf_counter()
    node = lab.docker_node(scale.docker_containers)
    sandboxes, exec_target = node.write_ids(lab.base)
    report.notes.append(f"{len(node.sandbox_ids)} pod-sandbox containers (pause image, Kubernetes labels), "
                        f"{RUNNING_SANDBOXES} of them running, + 1 busybox exec target: made in "
                        f"{time.perf_counter() - started:.1f} s")
    peers = docker_peers(lab, report)
    reads = {op: {concurrency: measure_docker_reads(lab, scale, peers, op, sandboxes, concurrency)
                  for concurrency in DOCKER_CONCURRENCY} for op in DOCKER_READS}
    execs = {concurrency: measure_execs(lab, scale, peers, exec_target, concurrency)
             for concurrency in (1, EXEC_CONCURRENCY)}
    report.raw.update(reads={f"{op}_c{c}": result for op, by_c in reads.items() for c, result in by_c.items()},
                      execs={f"c{c}": result for c, result in execs.items()})
    for op in DOCKER_READS:
        docker_read_rows(report, op, reads[op])
    exec_rows(report, execs)
    busiest = {f"{op} c={max(DOCKER_CONCURRENCY)}": reads[op][max(DOCKER_CONCURRENCY)] for op in DOCKER_READS}
    busiest[f"exec c={EXEC_CONCURRENCY}"] = execs[EXEC_CONCURRENCY]
    client_rows(report, busiest)
    docker_answer_notes(report, {f"{op} c={c}": result for op, by_c in reads.items() for c, result in by_c.items()}
                        | {f"exec c={c}": result for c, result in execs.items()})
    report.notes.append(f"answers: list {reads['list'][1]['direct']['response_bytes'] / 1024:.0f} KiB, inspect "
                        f"{reads['inspect'][1]['direct']['response_bytes'] / 1024:.1f} KiB, exec output stream "
                        f"{int(execs[1]['direct']['response_bytes'])} bytes")


def measure_docker_reads(lab: Lab, scale: Scale, peers: list[Peer], op: str, ids: Path, concurrency: int) -> Results:
    def read(peer: Peer, seconds: float = scale.docker_seconds) -> Metrics:
        return lab.docker_client(peer, op, ids, concurrency=concurrency, seconds=seconds)
    return alternate(peers, read, scale.rounds, warmup=lambda peer: read(peer, scale.warmup_seconds))


def measure_execs(lab: Lab, scale: Scale, peers: list[Peer], target: Path, concurrency: int) -> Results:
    calls = scale.exec_calls if concurrency == 1 else 2 * scale.exec_calls

    def execute(peer: Peer, calls: int = calls) -> Metrics:
        return lab.docker_client(peer, "exec", target, concurrency=concurrency, count=calls)
    return alternate(peers, execute, scale.rounds, warmup=lambda peer: execute(peer, 2))


def docker_read_rows(report: CaseReport, op: str, result: Mapping[int, Results]) -> None:
    serial, busy = result[1], result[max(DOCKER_CONCURRENCY)]
    go_proxy_target(report, report.row(f"{op} p50, c=1", "us", column(serial, "p50_us")), "p50",
                    P50_GO_PROXY_LIMIT)
    report.row(f"{op} p99, c=1", "us", column(serial, "p99_us"))
    for concurrency, by_peer in result.items():
        report.row(f"{op} calls/s, c={concurrency}", "calls/s", column(by_peer, "calls_per_s"))
    report.row(f"{op}: CPU per call in the hop, c=1", "us", column(serial, "cpu_us"))
    row = report.row(f"{op}: CPU per call in the hop, c={max(DOCKER_CONCURRENCY)}", "us", column(busy, "cpu_us"),
                     note="direct: dockerd's own threads, for scale" if op == DOCKER_READS[0] else "")
    go_proxy_target(report, row, "hop CPU per call", HOP_CPU_GO_PROXY_LIMIT)


def go_proxy_target(report: CaseReport, row: Row, what: str, limit: float) -> None:
    """The proxy's figure in `row` over the Go reverse proxy's, against `limit`."""
    ratio = row.ratio("proxy", "go-proxy")
    if ratio is not None:
        report.target(row, f"{what} through the proxy <= {limit}x the Go reverse proxy's", ratio <= limit,
                      f"{ratio:.2f}x")


def exec_rows(report: CaseReport, result: Mapping[int, Results]) -> None:
    serial, busy = result[1], result[EXEC_CONCURRENCY]
    row = report.row("exec round trip p50, c=1", "ms", column(serial, "p50_us", 1e-3),
                     note="exec create + start (101, raw stream to EOF) + inspect until exited: `echo x`")
    go_proxy_target(report, row, "exec p50", min(EXEC_GO_PROXY_LIMIT, P50_GO_PROXY_LIMIT))
    report.row("exec round trip p99, c=1", "ms", column(serial, "p99_us", 1e-3))
    report.row("exec round trips/s, c=1", "calls/s", column(serial, "calls_per_s"))
    report.row(f"exec round trips/s, c={EXEC_CONCURRENCY}", "calls/s", column(busy, "calls_per_s"))
    report.row("exec: CPU per round trip in the hop, c=1", "us", column(serial, "cpu_us"))
    row = report.row(f"exec: CPU per round trip in the hop, c={EXEC_CONCURRENCY}", "us", column(busy, "cpu_us"),
                     note="socat's CPU comes in 10 ms ticks (its per-connection children), the others' in ns")
    go_proxy_target(report, row, "exec hop CPU per round trip", HOP_CPU_GO_PROXY_LIMIT)


def client_rows(report: CaseReport, busiest: Mapping[str, Results]) -> None:
    """The load side's own CPU per call beside the hops': the client is not what limits a figure."""
    for index, (label, result) in enumerate(busiest.items()):
        report.row(f"client CPU per call, {label}", "us", column(result, "client_cpu_us"),
                   note="" if index else "benchgo dockerclient's own CPU, driving each peer")
    shares = [f"{label} {result['proxy']['client_cpu_us'] / result['proxy']['cpu_us']:.2f}"
              for label, result in busiest.items() if result.get("proxy", {}).get("cpu_us")]
    if shares:
        report.notes.append("the client's own CPU per call over the proxy's, driving it: " + ", ".join(shares))


def docker_answer_notes(report: CaseReport, results: Mapping[str, Results]) -> None:
    """Failed calls, and exec round trips that took more than one inspect, per measurement."""
    for label, by_peer in results.items():
        polls = {name: sum(int(run.get("extra_requests", 0)) for run in metrics["runs"])
                 for name, metrics in by_peer.items()}
        if any(polls.values()):
            report.notes.append(f"{label}: extra exec inspects (dockerd still said running): {polls}")
        failed = {name: sum(int(run["errors"]) for run in metrics["runs"]) for name, metrics in by_peer.items()}
        firsts = {name: next((run["first_error"] for run in by_peer[name]["runs"] if run.get("first_error")), "")
                  for name, count in failed.items() if count}
        if firsts:
            report.notes.append(f"{label}: failed calls {failed}; e.g. {firsts}")
