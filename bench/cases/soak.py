"""Case 8, a soak under the real kubelet (issue 39): N static pods for a long window with pods churning, through the
proxy with both plugin kinds (the no-op hook plugin on all seven hooks and one hosted no-op NRI plugin) and through
koord-runtime-proxy with the same hook plugin (it hosts no NRI). Every SAMPLE the hop's CPU time, RSS, open
descriptors and tasks are read from /proc; the case reports each hop's CPU % of a core over the window and the
slopes (least squares over the window's second half, after the node has warmed up) of RSS, descriptors and tasks:
flat means nothing leaks per call, per pod or per churn.

Churn: every `soak_churn_seconds` one static pod is removed and, half a period later, written back, so the kubelet
stops and removes the pod's sandbox and container and creates them anew: every hook point fires all window long.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.cases.containerd import containerd_peers
from bench.cases.kubelet_node import SETTLE_SECONDS, running_pods, sleeping_pod
from bench.cases.measure import Scale, available
from bench.peers import Lab, Metrics, Peer
from bench.procfs import CpuUsage, memory_mb
from bench.report import CaseReport
from rplab.kubelet_node import KubeletNode, wait_until

FLAT_RSS_MIB_PER_HOUR = 4.0  # the soak's target: under this, RSS growth is allocator noise, not a leak
FLAT_COUNT_PER_HOUR = 0.5  # descriptors and tasks: no growth at all, within one sample's rounding


@dataclass(frozen=True)
class Sample:
    """One reading of the hop's process at `seconds` into the window."""

    seconds: float
    cpu_seconds: float
    rss_mib: float
    descriptors: int
    tasks: int


def read_sample(pid: int, started: float) -> Sample:
    return Sample(seconds=time.monotonic() - started, cpu_seconds=CpuUsage.of_tree(pid).cpu,
                  rss_mib=memory_mb(pid), descriptors=len(os.listdir(f"/proc/{pid}/fd")),
                  tasks=len(os.listdir(f"/proc/{pid}/task")))


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, value) points, per hour; 0 for fewer than two points."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * 3600


def second_half(samples: Sequence[Sample]) -> list[Sample]:
    return [sample for sample in samples if sample.seconds >= samples[-1].seconds / 2]


def cpu_percent(first: Sample, last: Sample) -> float:
    """CPU % of one core between two samples."""
    elapsed = last.seconds - first.seconds
    return (last.cpu_seconds - first.cpu_seconds) / elapsed * 100 if elapsed else 0.0


def cpu_rates(samples: Sequence[Sample]) -> list[tuple[float, float]]:
    """(the interval's middle, CPU % over it) for each pair of consecutive samples: the rate whose slope says
    whether a call costs more as the soak goes on."""
    return [((a.seconds + b.seconds) / 2, cpu_percent(a, b)) for a, b in zip(samples, samples[1:])]


def summary(samples: Sequence[Sample], churns: int) -> Metrics:
    """The window's figures: CPU % of a core (over the window and each half), RSS first/last, and the second
    half's slopes (CPU's of its rate per interval)."""
    first, last, tail = samples[0], samples[-1], second_half(samples)
    slope: Callable[[Callable[[Sample], float]], float] = lambda value: slope_per_hour(
        [(sample.seconds, value(sample)) for sample in tail])
    return {"cpu_percent": cpu_percent(first, last),
            "cpu_percent_first_half": cpu_percent(first, tail[0]), "cpu_percent_second_half": cpu_percent(tail[0], last),
            "cpu_percent_per_hour": slope_per_hour(cpu_rates(tail)),
            "rss_first_mib": first.rss_mib, "rss_last_mib": last.rss_mib,
            "rss_mib_per_hour": slope(lambda s: s.rss_mib),
            "descriptors_first": float(first.descriptors), "descriptors_last": float(last.descriptors),
            "descriptors_per_hour": slope(lambda s: s.descriptors),
            "tasks_first": float(first.tasks), "tasks_last": float(last.tasks),
            "tasks_per_hour": slope(lambda s: s.tasks), "churns": float(churns), "window_s": last.seconds - first.seconds}


class Churn:
    """Removes one static pod and writes it back half a period later, the next pod each period."""

    def __init__(self, node: KubeletNode, pods: int, period: float) -> None:
        self._node, self._pods, self._period = node, pods, period
        self._next_at = time.monotonic() + period
        self._removed: int | None = None
        self._index = 0
        self.churns = 0

    def step(self) -> None:
        now = time.monotonic()
        if self._removed is not None and now >= self._next_at - self._period / 2:
            self._node.write_pod(sleeping_pod(self._removed))
            self._removed = None
            self.churns += 1
        if now >= self._next_at:
            self._removed = self._index % self._pods
            self._node.remove_pod(f"steady-{self._removed}")
            self._index += 1
            self._next_at = now + self._period

    def finish(self) -> None:
        if self._removed is not None:
            self._node.write_pod(sleeping_pod(self._removed))


def soak_window(lab: Lab, peer: Peer, scale: Scale) -> tuple[Metrics, list[Sample]]:
    """A kubelet through `peer` with `scale.soak_pods` static pods, churning, sampled for `scale.soak_seconds`:
    the figures and the samples."""
    node = KubeletNode(peer.socket, lab.base / f"soak-{peer.name}")
    node.start()
    try:
        for index in range(scale.soak_pods):
            node.write_pod(sleeping_pod(index))
        wait_until(lambda: running_pods(node) >= scale.soak_pods or None, 120 + scale.soak_pods * 3,
                   f"{scale.soak_pods} pods running")
        time.sleep(SETTLE_SECONDS)
        churn = Churn(node, scale.soak_pods, scale.soak_churn_seconds)
        started = time.monotonic()
        samples = [read_sample(peer.pid, started)]
        while samples[-1].seconds < scale.soak_seconds:
            time.sleep(1)
            churn.step()
            if time.monotonic() - started - samples[-1].seconds >= scale.soak_sample_seconds:
                samples.append(read_sample(peer.pid, started))
        churn.finish()
    finally:
        node.stop()
    return summary(samples, churn.churns), samples


def case_soak(lab: Lab, scale: Scale, report: CaseReport) -> None:
    hops = available(lab, report, {"soak": lambda: lab.soak_proxy, "koord-plugin": lambda: lab.koord_plugin_proxy})
    if not any(peer.name == "koord-plugin" for peer in hops):
        hops += [peer for peer in containerd_peers(lab, report, with_plugin=False) if peer.name == "koord"]
    results: dict[str, Metrics] = {}
    samples: dict[str, list[tuple[float, ...]]] = {}
    for peer in hops:
        calls_before = sum(lab.plugin_counts().values())
        results[peer.name], taken = soak_window(lab, peer, scale)
        results[peer.name]["plugin_calls"] = float(sum(lab.plugin_counts().values()) - calls_before)
        samples[peer.name] = [dataclasses.astuple(sample) for sample in taken]
    report.raw["result"] = results
    report.raw["samples"] = {"fields": [f.name for f in dataclasses.fields(Sample)], **samples}
    report.raw["nri_plugin_calls"] = lab.nri_counts("soak")
    column: Callable[[str], dict[str, float | None]] = lambda key: {name: m[key] for name, m in results.items()}
    minutes = scale.soak_seconds / 60
    report.notes.append(f"{scale.soak_pods} static pods for {minutes:.0f} min per hop, one pod churned every "
                        f"{scale.soak_churn_seconds:.0f} s; soak: the hook plugin on all hooks and a hosted NRI "
                        "plugin; koord-plugin: the same hook plugin (koord-runtime-proxy hosts no NRI)")
    cpu = report.row(f"CPU of one core over the soak, {scale.soak_pods} pods churning", "%", column("cpu_percent"))
    ratio = cpu.ratio("soak", "koord-plugin")
    if ratio is not None:
        report.target(cpu, "proxy CPU over the soak <= koord-runtime-proxy's", ratio <= 1.0, f"{ratio:.2f}x")
    ours = results.get("soak")
    for key, title, unit, flat in (("rss_mib_per_hour", "RSS", "MiB/h", FLAT_RSS_MIB_PER_HOUR),
                                   ("descriptors_per_hour", "open descriptors", "/h", FLAT_COUNT_PER_HOUR),
                                   ("tasks_per_hour", "tasks", "/h", FLAT_COUNT_PER_HOUR)):
        row = report.row(f"{title} slope, second half", unit, column(key))
        if ours is not None:
            report.target(row, f"proxy {title} flat (<= {flat} {unit})", ours[key] <= flat, f"{ours[key]:.2f}")
    report.row("CPU of one core, first half of the soak", "%", column("cpu_percent_first_half"))
    report.row("CPU of one core, second half", "%", column("cpu_percent_second_half"))
    report.row("CPU slope, second half", "%/h", column("cpu_percent_per_hour"),
               note="of the CPU % per sample interval; the samples are in the JSON")
    report.row("RSS at the end", "MiB", column("rss_last_mib"), note="the start's is in the JSON")
    report.row("pods churned", "", column("churns"))
    report.row("hook plugin calls", "", column("plugin_calls"))
