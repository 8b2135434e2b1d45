"""Call statistics of hook plugins, per plugin and hook: outcomes, last error, latency, changes.

Recorded by the dispatcher on every plugin call; read by the admin status and the metrics
endpoint. Bounded: one entry per (plugin file, hook), a fixed bucket array and a fixed-size
sample window each; collisions by (hook, plugin pair, field with map keys collapsed). Knows no transport.
"""

from __future__ import annotations

import bisect
import collections
import time
from dataclasses import dataclass, field

from runtimeproxy.hooks.validate import printable

OK = "ok"
# Upper bounds of the latency histogram buckets (seconds); +Inf is implied.
LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
# Recent samples kept per (plugin, hook) for p50/p99 in status.
LATENCY_WINDOW_SAMPLES = 512


@dataclass
class LatencyHistogram:
    """Cumulative-at-export histogram: per-bucket counts, sum and count."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_SECONDS
    counts: list[int] = field(default_factory=list)
    total_seconds: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total_seconds += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus-style buckets: ("0.001", calls ≤ 1 ms), …, ("+Inf", all calls)."""
        running = 0
        buckets: list[tuple[str, int]] = []
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            running += count
            buckets.append((bound, running))
        return buckets


@dataclass
class HookCallStats:
    """One plugin's calls of one hook."""

    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    changes: int = 0
    shadow_changes: int = 0  # answers in shadow that would have changed the request
    shadow_disagreements: int = 0  # ... and set a field to another value than the one applied
    last_error: str = ""
    last_error_unix_seconds: float = 0.0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    recent_seconds: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_WINDOW_SAMPLES)
    )

    @property
    def calls(self) -> int:
        return sum(self.outcomes.values())

    @property
    def failures(self) -> int:
        return self.calls - self.outcomes[OK]

    def percentile_seconds(self, fraction: float) -> float:
        """Nearest-rank percentile of the recent calls; 0 if there were none."""
        samples = sorted(self.recent_seconds)
        if not samples:
            return 0.0
        return samples[min(len(samples) - 1, int(fraction * len(samples)))]


class HookStats:
    """All (plugin, hook) statistics of this proxy process."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], HookCallStats] = {}
        # (hook, earlier plugin, later plugin, field family) -> calls where both set the field differently.
        self.collisions: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        # (plugin, outcome) -> containers a plugin of another protocol (NRI) asked to evict.
        self.evictions: collections.Counter[tuple[str, str]] = collections.Counter()

    def record(self, plugin: str, hook: str, outcome: str, seconds: float, error: str = "") -> None:
        stats = self.of(plugin, hook)
        stats.outcomes[outcome] += 1
        stats.latency.observe(seconds)
        stats.recent_seconds.append(seconds)
        if outcome != OK:
            stats.last_error = printable(f"{outcome}: {error}") if error else outcome
            stats.last_error_unix_seconds = time.time()

    def changed(self, plugin: str, hook: str) -> None:
        """A pre-hook answer of this plugin changed the request."""
        self.of(plugin, hook).changes += 1

    def shadowed(self, plugin: str, hook: str, changed: bool, disagreed: bool) -> None:
        """An answer in shadow: would it have changed the request, and would it have set something else?"""
        stats = self.of(plugin, hook)
        stats.shadow_changes += changed
        stats.shadow_disagreements += disagreed

    def evicted(self, plugin: str, outcome: str, containers: int = 1) -> None:
        """Containers a plugin asked to evict: stopped ("ok"), or why not ("failed", "unknown", "shadow")."""
        self.evictions[(plugin, outcome)] += containers

    def collided(self, hook: str, earlier: str, later: str, family: str) -> None:
        self.collisions[(hook, earlier, later, family)] += 1

    def of(self, plugin: str, hook: str) -> HookCallStats:
        stats = self._by_key.get((plugin, hook))
        if stats is None:
            stats = self._by_key[(plugin, hook)] = HookCallStats()
        return stats

    def items(self) -> list[tuple[tuple[str, str], HookCallStats]]:
        return sorted(self._by_key.items())
