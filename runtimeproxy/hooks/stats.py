"""Call statistics of plugins of every kind, one table: outcomes, last error, latency, changes per (kind, plugin,
scope).

Recorded by each kind's chain step (hooks.step) on every plugin call; read by the admin status and the metrics
endpoint, kind by kind. Bounded: one entry per (kind, plugin, hook or event), a fixed bucket array and a fixed-size
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


class CallStats:
    """Every plugin call of this proxy process, one table for every plugin kind: one entry per (kind, plugin,
    scope); collisions by (hook, earlier plugin, later plugin, field family), whatever the plugins' kinds;
    evictions by (plugin, outcome). A kind's chain step records through its rows (`of_kind`)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str, str], HookCallStats] = {}
        # (hook, earlier plugin, later plugin, field family) -> calls where both set the field differently.
        self.collisions: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        # (plugin, outcome) -> containers a plugin of another protocol (NRI) asked to evict.
        self.evictions: collections.Counter[tuple[str, str]] = collections.Counter()
        self._kinds: dict[str, KindStats] = {}

    def of_kind(self, kind: str) -> KindStats:
        """The rows of one plugin kind (hooks.kinds.PluginKind.name)."""
        rows = self._kinds.get(kind)
        if rows is None:
            rows = self._kinds[kind] = KindStats(self, kind)
        return rows

    def entry(self, kind: str, plugin: str, scope: str) -> HookCallStats:
        stats = self._by_key.get((kind, plugin, scope))
        if stats is None:
            stats = self._by_key[(kind, plugin, scope)] = HookCallStats()
        return stats

    def items(self) -> list[tuple[tuple[str, str, str], HookCallStats]]:
        """(kind, plugin, scope) -> calls, sorted."""
        return sorted(self._by_key.items())

    def collided(self, hook: str, earlier: str, later: str, family: str) -> None:
        self.collisions[(hook, earlier, later, family)] += 1

    def evicted(self, plugin: str, outcome: str, containers: int = 1) -> None:
        """Containers a plugin asked to evict: stopped ("ok"), or why not ("failed", "unknown", "shadow")."""
        self.evictions[(plugin, outcome)] += containers


def _last_error(stats: HookCallStats, outcome: str, error: str) -> None:
    stats.last_error = printable(f"{outcome}: {error}") if error else outcome
    stats.last_error_unix_seconds = time.time()


class KindStats:
    """One plugin kind's rows of the table: what its chain step records, what status and metrics read of it."""

    def __init__(self, table: CallStats, kind: str) -> None:
        self.table = table
        self.kind = kind

    @property
    def collisions(self) -> collections.Counter[tuple[str, str, str, str]]:
        return self.table.collisions

    @property
    def evictions(self) -> collections.Counter[tuple[str, str]]:
        return self.table.evictions

    def record(self, plugin: str, scope: str, outcome: str, seconds: float, error: str = "") -> None:
        stats = self.of(plugin, scope)
        stats.outcomes[outcome] += 1
        stats.latency.observe(seconds)
        stats.recent_seconds.append(seconds)
        if outcome != OK:
            _last_error(stats, outcome, error)

    def refused(self, plugin: str, scope: str, outcome: str, error: str, changed: bool) -> None:
        """A call counted ok whose answer the chain's result refused (hooks.chain.ChainRecord.settle): counted under
        `outcome` instead, and (`changed`) no longer as a change, as an answer refused when it came."""
        stats = self.of(plugin, scope)
        stats.outcomes.subtract((OK,))
        if stats.outcomes[OK] <= 0:
            del stats.outcomes[OK]
        stats.outcomes[outcome] += 1
        stats.changes -= changed
        _last_error(stats, outcome, error)

    def changed(self, plugin: str, scope: str) -> None:
        """An answer of this plugin changed the request."""
        self.of(plugin, scope).changes += 1

    def shadowed(self, plugin: str, scope: str, changed: bool, disagreed: bool) -> None:
        """An answer in shadow: would it have changed the request, and would it have set something else?"""
        stats = self.of(plugin, scope)
        stats.shadow_changes += changed
        stats.shadow_disagreements += disagreed

    def collided(self, hook: str, earlier: str, later: str, family: str) -> None:
        self.table.collided(hook, earlier, later, family)

    def evicted(self, plugin: str, outcome: str, containers: int = 1) -> None:
        self.table.evicted(plugin, outcome, containers)

    def of(self, plugin: str, scope: str) -> HookCallStats:
        return self.table.entry(self.kind, plugin, scope)

    def items(self) -> list[tuple[tuple[str, str], HookCallStats]]:
        """(plugin, scope) -> calls of this kind, sorted."""
        return [((plugin, scope), stats) for (kind, plugin, scope), stats in self.table.items() if kind == self.kind]

    def failures(self, plugin: str) -> int:
        return sum(calls.failures for (name, _), calls in self.items() if name == plugin)
