"""Case 6, idle: each hop's CPU over a window in which nobody calls, the proxy with no plugins and with 500
registered plugins (issue 22: an idle proxy costs nothing), beside the relays in front of the instant backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.cases.containerd import idle_cpu_percent
from bench.cases.measure import Scale, available
from bench.peers import Lab, Peer
from bench.report import CaseReport
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.plugin.registration import registration

MANY_PLUGINS = 500
IDLE_CPU_LIMIT = 0.1  # % of one core, with no plugins and with MANY_PLUGINS
# After start: registration read, the idle trim done, the first probes settled.
SETTLE_SECONDS = 3.0
WINDOW_FACTOR = 2  # the window is this many times the scale's idle_seconds: 0.1 % is small


def many_plugins_dir(base: Path, name: str, count: int) -> Path:
    """`count` registrations for all seven hooks, each its own endpoint (channels open on demand: none
    of these is ever connected while nobody calls)."""
    directory = base / f"{name}-hooks"
    directory.mkdir()
    for index in range(count):
        (directory / f"p{index:04d}.json").write_bytes(
            registration(directory / f"p{index:04d}.sock", list(HOOK_NAMES)))
    return directory


def idle_peers(lab: Lab, report: CaseReport, plugins: int) -> list[Peer]:
    """The proxy (and the baseline's) with `plugins` registered; with none, the relays beside them."""
    backend = lab.backend

    def proxy(name: str, checkout: Path | None) -> Callable[[], Peer]:
        def start() -> Peer:
            label = f"idle-{name}-{plugins}"
            hooks = many_plugins_dir(lab.base, label, plugins) if plugins else None
            peer = lab._proxy(label, backend, hook_dir=hooks, checkout=checkout)  # noqa: SLF001 - the lab's own
            peer.name = name
            return peer
        return start

    starters: dict[str, Callable[[], Peer]] = {"proxy": proxy("proxy", None)}
    if lab.baseline is not None:
        starters["baseline"] = proxy("baseline", lab.baseline)
    if not plugins:
        starters |= {"direct": lambda: backend, "aio-relay": lambda: lab.hop("aio-relay", backend),
                     "go-relay": lambda: lab.hop("go-relay", backend)}
    return available(lab, report, starters)


def case_idle(lab: Lab, scale: Scale, report: CaseReport) -> None:
    seconds = scale.idle_seconds * WINDOW_FACTOR
    for plugins in (0, MANY_PLUGINS):
        peers = idle_peers(lab, report, plugins)
        time.sleep(SETTLE_SECONDS)
        idle = idle_cpu_percent(peers, seconds)
        report.raw[f"idle_cpu_percent_{plugins}_plugins"] = idle
        row = report.row(f"CPU of one core, idle, {plugins} plugins", "%", dict(idle),
                         note=f"one {seconds:.0f} s window, all peers at once" if not plugins else "")
        value = idle.get("proxy")
        if value is not None:
            report.target(row, f"idle proxy with {plugins} plugins <= {IDLE_CPU_LIMIT} % of a core",
                          value <= IDLE_CPU_LIMIT, f"{value:.3f} %")
