"""The benchmark's results: rows of one figure per peer, targets met or missed, the printed table, the JSON.

No processes, no clock, so it is unit-tested (tests/bench/test_bench_helpers.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Column order. direct: no hop; proxy: runtimeproxy; koord: koordinator's koord-runtime-proxy (the program
# ours replaces; it decodes and re-encodes every runtime.v1 message); aio-relay: the minimal grpcio aio relay;
# go-relay: grpc-go raw relay (koord-runtime-proxy's engine); go-proxy: Go's httputil.ReverseProxy
# (Docker mode's counterpart); socat: L4 byte relay; echo-hop: a bare Python grpc.aio server answering
# itself (one Python server hop, no upstream); plugin: the proxy with a no-op plugin on all hooks;
# plugin-notrace: the same with the decision trace off (--hook-trace-entries=0); nri: the proxy hosting NRI
# with one no-op NRI plugin on every event; decode-all: the proxy decoding and re-encoding every message;
# baseline, baseline-plugin: the proxy and the plugin peer of another revision (--baseline); koord-plugin:
# koord-runtime-proxy with the same no-op plugin on all seven hooks; soak: the proxy with both plugin kinds (the
# no-op hook plugin and a hosted no-op NRI plugin), the soak case's.
PEERS = ("direct", "proxy", "grpc-only", "baseline", "koord", "aio-relay", "go-relay", "go-proxy", "socat", "echo-hop", "plugin",
         "plugin-notrace", "baseline-plugin", "koord-plugin", "nri", "soak", "decode-all")
# Ratio columns: the proxy's figure over each anchor's, headed by the anchor's short name.
RATIOS = (("proxy", "direct"), ("proxy", "koord"), ("grpc-only", "koord"), ("proxy", "aio-relay"),
          ("proxy", "go-relay"), ("proxy", "go-proxy"), ("proxy", "baseline"))
RATIO_HEADS = {"direct": "/direct", "koord": "/koord", "aio-relay": "/aio", "go-relay": "/go",
               "go-proxy": "/go-http", "baseline": "/base"}


def ratio_head(pair: tuple[str, str]) -> str:
    """A ratio column's heading: the anchor's short name, after "g" when the gRPC-only proxy is the numerator."""
    figure, anchor = pair
    return RATIO_HEADS[anchor] if figure == "proxy" else f"g{RATIO_HEADS[anchor]}"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the rule the Go client uses too)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class Row:
    metric: str
    unit: str
    values: dict[str, float | None]  # per peer
    note: str = ""
    target: str = ""  # "met: ..." or "MISSED: ..."

    def ratio(self, peer: str, anchor: str) -> float | None:
        value, base = self.values.get(peer), self.values.get(anchor)
        if value is None or not base:
            return None
        return value / base


@dataclass
class Check:
    case: str
    metric: str
    target: str
    met: bool
    measured: str


@dataclass
class CaseReport:
    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def row(self, metric: str, unit: str, values: dict[str, float | None], note: str = "") -> Row:
        row = Row(metric, unit, dict(values), note)
        self.rows.append(row)
        return row

    def target(self, row: Row, target: str, met: bool, measured: str) -> None:
        row.target = f"{'met' if met else 'MISSED'}: {measured} ({target})"
        self.checks.append(Check(self.name, row.metric, target, met, measured))


def number(value: float | None) -> str:
    """Three significant figures or so, thousands separated; '-' for no value."""
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def columns_used(rows: list[Row]) -> list[str]:
    return [peer for peer in PEERS if any(row.values.get(peer) is not None for row in rows)]


def ratios_used(rows: list[Row]) -> list[tuple[str, str]]:
    return [pair for pair in RATIOS if any(row.ratio(*pair) is not None for row in rows)]


def render_case(report: CaseReport, metric_width: int = 40) -> list[str]:
    lines = [f"== {report.title}  [{report.seconds:.1f} s]"]
    peers, ratios = columns_used(report.rows), ratios_used(report.rows)
    if report.rows:
        header = f"{'metric':<{metric_width}} {'unit':<8}" + "".join(f" {peer:>10}" for peer in peers)
        header += "".join(f" {ratio_head(pair):>8}" for pair in ratios)
        lines.append(header + "  target")
    for row in report.rows:
        line = f"{row.metric:<{metric_width}} {row.unit:<8}"
        line += "".join(f" {number(row.values.get(peer)):>10}" for peer in peers)
        line += "".join(f" {ratio_text(row.ratio(*pair)):>8}" for pair in ratios)
        lines.append(f"{line}  {row.target}".rstrip())
        if row.note:
            lines.append(f"    ({row.note})")
    lines.extend(f"    note: {note}" for note in report.notes)
    if report.error:
        lines.append(f"    ERROR: {report.error}")
    return lines


def render_targets(reports: list[CaseReport]) -> list[str]:
    checks = [check for report in reports for check in report.checks]
    if not checks:
        return []
    return ["targets:", *(f"  {'met   ' if c.met else 'MISSED'}  {c.target:<52} {c.measured:<28} [{c.metric}]"
                          for c in checks)]


def render(reports: list[CaseReport], header: list[str]) -> str:
    lines = [*header, ""]
    for report in reports:
        lines.extend(render_case(report))
        lines.append("")
    lines.extend(render_targets(reports))
    return "\n".join(lines)


def render_markdown(reports: list[CaseReport]) -> str:
    """The rows of every case as one markdown table (for docs/performance.md)."""
    rows = [row for report in reports for row in report.rows]
    peers, ratios = columns_used(rows), ratios_used(rows)
    head = ["case", "metric", "unit", *peers, *(f"proxy / {anchor}" for _, anchor in ratios), "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for report in reports:
        for row in report.rows:
            cells = [report.name, row.metric, row.unit, *(number(row.values.get(peer)) for peer in peers),
                     *(ratio_text(row.ratio(*pair)) for pair in ratios), row.target]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header_lines(meta: dict[str, Any]) -> list[str]:
    dirty = " (dirty)" if meta["git_dirty"] else ""
    return [f"runtimeproxy benchmark  {meta['date']}  commit {meta['git_commit']}{dirty}",
            meta["command"],
            f"{meta['nproc']} cpus ({meta['cpu_model']}), Python {meta['python']}, grpcio {meta['grpcio']}, "
            f"{meta['go']}, kernel {meta['kernel']}, load {meta['loadavg_start']} -> {meta.get('loadavg_end')}"]


def write_json(path: Path, meta: dict[str, Any], scale: dict[str, Any], reports: list[CaseReport]) -> None:
    document = {
        "meta": meta,
        "scale": scale,
        "cases": [asdict(report) for report in reports],
        "targets": [asdict(check) for report in reports for check in report.checks],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
