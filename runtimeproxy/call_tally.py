"""Calls counted by a bounded key and an outcome, with their latency, for the metrics endpoint.

The hot path pays for one list append per call; the pending list is folded into counters and histograms when
it is scraped (or when it grows long). Keys come from fixed tables (CRI methods, Docker routes), never from a
request's IDs, so cardinality stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtimeproxy.hooks.stats import LatencyHistogram

# Image pulls and attached streams take minutes: relayed calls' histograms reach further than the hook one.
RELAYED_CALL_LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)
# Fold the pending list once it holds this many calls, so an unscraped proxy stays small.
FOLD_AFTER_CALLS = 4096

Key = tuple[str, ...]


class CallTally:
    def __init__(self, buckets_seconds: tuple[float, ...], outcome_label: Callable[[Any], str] = str) -> None:
        """`outcome_label` turns what record() was given into the label (run at fold time, off the hot path)."""
        self._buckets = buckets_seconds
        self._outcome_label = outcome_label
        self._pending: list[tuple[Key, Any, float]] = []
        self.calls: dict[tuple[str, ...], int] = {}  # (*key, outcome) -> calls
        self.latency: dict[Key, LatencyHistogram] = {}

    def record(self, key: Key, outcome: Any, seconds: float) -> None:
        self._pending.append((key, outcome, seconds))
        if len(self._pending) > FOLD_AFTER_CALLS:
            self.fold()

    def fold(self) -> None:
        """Move pending calls into the counters (runs on the event loop, like the calls)."""
        pending, self._pending[:] = list(self._pending), []
        calls, latency = self.calls, self.latency
        for key, outcome, seconds in pending:
            counted = (*key, self._outcome_label(outcome))
            calls[counted] = calls.get(counted, 0) + 1
            histogram = latency.get(key)
            if histogram is None:
                histogram = latency[key] = LatencyHistogram(self._buckets)
            histogram.observe(seconds)
