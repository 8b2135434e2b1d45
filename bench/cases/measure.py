"""How much each case measures (Scale: --quick or full), and the one way peers are compared (alternate)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.gopeers import run_client
from bench.peers import Lab, Metrics, Peer
from bench.procfs import threads_cpu_seconds
from bench.report import CaseReport

Results = dict[str, dict[str, Any]]  # per peer: medians and runs (alternate's result)


@dataclass(frozen=True)
class Scale:
    rounds: int  # measured runs per peer (alternating), after one warm-up run each
    seconds: float  # per small-call run
    warmup_seconds: float
    large_calls: Mapping[int, int]  # calls per run, per size in MB
    pods: int  # pods (one running container each) for the kubelet steady state
    kubelet_seconds: float  # measured window per hop
    replay_rounds: int  # rounds of the kubelet mix replay and of the sparse list calls
    idle_seconds: float  # one window for every hop's idle CPU
    kubelet_node_pods: int  # static pods of the real kubelet (kubelet-node case)
    kubelet_node_seconds: float  # its measured window per hop
    soak_pods: int  # static pods of the soak's kubelet (soak case)
    soak_seconds: float  # its sampled window per hop
    soak_sample_seconds: float  # between samples of the hop's process
    soak_churn_seconds: float  # between two pods churned
    lifecycles: int  # pod lifecycles per peer
    docker_containers: int  # pod-sandbox containers in the Docker case's dockerd
    docker_seconds: float  # per list or inspect run
    exec_calls: int  # exec round trips per run at concurrency 1 (twice as many at EXEC_CONCURRENCY)


QUICK = Scale(rounds=1, seconds=0.5, warmup_seconds=0.3, large_calls={4: 4, 16: 3, 48: 2}, pods=20,
              kubelet_seconds=5.0, replay_rounds=1, idle_seconds=3.0, kubelet_node_pods=10, kubelet_node_seconds=20.0,
              soak_pods=10, soak_seconds=120.0, soak_sample_seconds=10.0, soak_churn_seconds=10.0,
              lifecycles=3, docker_containers=20, docker_seconds=0.3,
              exec_calls=4)
FULL = Scale(rounds=5, seconds=2.0, warmup_seconds=0.5, large_calls={4: 20, 16: 10, 48: 4}, pods=110,
             kubelet_seconds=20.0, replay_rounds=3, idle_seconds=10.0, kubelet_node_pods=110,
             kubelet_node_seconds=120.0, soak_pods=110, soak_seconds=1800.0, soak_sample_seconds=30.0,
             soak_churn_seconds=10.0, lifecycles=15, docker_containers=100, docker_seconds=0.6,
             exec_calls=15)


def alternate(peers: list[Peer], measure: Callable[[Peer], Metrics], rounds: int,
              warmup: Callable[[Peer], object] | None = None) -> dict[str, dict[str, Any]]:
    """The one place peers are compared: a warm-up each, then `rounds` rounds of one run per peer in turn.

    Per peer: the median of every numeric metric over the rounds, plus "runs" (all of them, for the JSON).
    """
    for peer in peers:
        (warmup or measure)(peer)
    runs: dict[str, list[Metrics]] = {peer.name: [] for peer in peers}
    for _ in range(rounds):
        for peer in peers:
            runs[peer.name].append(measure(peer))
    result: dict[str, dict[str, Any]] = {}
    for name, measured in runs.items():
        keys = [key for key, value in measured[0].items() if isinstance(value, (int, float))]
        result[name] = {key: statistics.median(run[key] for run in measured) for key in keys}
        result[name]["runs"] = measured
    return result


# A kubelet's calls come a few a second, not back to back: each one finds the hop's threads asleep and pays
# their wake-ups, which back-to-back calls share. Sparse runs call at this pace.
SPARSE_INTERVAL_S = 0.2


def sparse_calls(lab: Lab, peer: Peer, method: str, request: bytes, seconds: float) -> Metrics:
    """`method` through `peer` at the kubelet's pace (SPARSE_INTERVAL_S apart) for `seconds`: the client's figures
    (p50, answer size) and the hop's CPU per call from its threads' schedstat (ns: ~50 calls are too few for
    10 ms ticks)."""
    before = threads_cpu_seconds(peer.pid)
    result = run_client(lab.benchgo, peer.socket, method, lab.request_file(request), seconds=seconds,
                        interval=SPARSE_INTERVAL_S)
    calls = int(result["calls"]) + int(result["errors"])
    result["cpu_us_per_call"] = (threads_cpu_seconds(peer.pid) - before) * 1e6 / calls if calls else float("nan")
    return result


def column(result: Mapping[str, Mapping[str, Any]], key: str, scale: float = 1.0) -> dict[str, float | None]:
    """One figure per peer; none for a peer whose every call failed (a p50 of no calls is no figure)."""
    return {name: (metrics[key] * scale if key in metrics and metrics.get("calls", 1) else None)
            for name, metrics in result.items()}


def available(lab: Lab, report: CaseReport, starters: Mapping[str, Callable[[], Peer]]) -> list[Peer]:
    """The peers that start; one that does not is a note, and the case goes on without it."""
    peers = []
    for name, start in starters.items():
        try:
            peers.append(start())
        except Exception as error:  # noqa: BLE001
            report.notes.append(f"{name} left out: {short(error)}")
    return peers


def row_ratio(result: Mapping[str, Mapping[str, Any]], peer: str, anchor: str, key: str) -> float | None:
    if peer not in result or anchor not in result or not result[anchor][key]:
        return None
    return float(result[peer][key] / result[anchor][key])


def short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[:limit] + "..."
