"""The soak case's arithmetic and its churn, without a kubelet."""

from __future__ import annotations

import pytest

from bench.cases import soak
from bench.cases.soak import Churn, Sample, slope_per_hour, summary


def test_the_slope_is_per_hour_and_zero_for_too_few_points() -> None:
    assert slope_per_hour([(0.0, 10.0), (1800.0, 11.0), (3600.0, 12.0)]) == pytest.approx(2.0)
    assert slope_per_hour([(0.0, 10.0)]) == 0.0
    assert slope_per_hour([(5.0, 1.0), (5.0, 2.0)]) == 0.0


def test_the_summary_reads_the_second_half_only() -> None:
    # RSS climbs while the node warms up, then stays flat: a flat second half is not a leak.
    samples = [Sample(float(t), cpu_seconds=t / 100, rss_mib=50.0 + min(t, 600) / 60, descriptors=40, tasks=12)
               for t in range(0, 1801, 60)]
    figures = summary(samples, churns=180)
    assert figures["rss_mib_per_hour"] == pytest.approx(0.0)
    assert figures["cpu_percent"] == pytest.approx(1.0)
    assert figures["descriptors_per_hour"] == 0.0 and figures["tasks_last"] == 12
    assert figures["rss_first_mib"] == 50.0 and figures["rss_last_mib"] == 60.0
    assert figures["cpu_percent_first_half"] == figures["cpu_percent_second_half"] == pytest.approx(1.0)
    assert figures["cpu_percent_per_hour"] == pytest.approx(0.0)


def test_the_cpu_slope_is_of_the_rate_not_of_the_cumulative_time() -> None:
    # CPU % rising from 1 % to 2 % over an hour: the rate's slope is 1 %/h.
    samples, cpu = [], 0.0
    for t in range(0, 3601, 60):
        samples.append(Sample(float(t), cpu_seconds=cpu, rss_mib=50.0, descriptors=40, tasks=12))
        cpu += 60 * (1 + (t + 30) / 3600) / 100
    figures = summary(samples, churns=0)
    assert figures["cpu_percent_per_hour"] == pytest.approx(1.0, abs=0.05)
    assert figures["cpu_percent_first_half"] < figures["cpu_percent_second_half"]


class FakeNode:
    def __init__(self) -> None:
        self.log: list[str] = []

    def write_pod(self, manifest: dict[str, object]) -> None:
        self.log.append(f"write {manifest['metadata']['name']}")  # type: ignore[index]

    def remove_pod(self, name: str) -> None:
        self.log.append(f"remove {name}")


def test_churn_removes_the_next_pod_each_period_and_writes_it_back_half_a_period_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(soak.time, "monotonic", lambda: now[0])
    node = FakeNode()
    churn = Churn(node, pods=2, period=10.0)  # type: ignore[arg-type]
    for second in range(1, 31):
        now[0] = 100.0 + second
        churn.step()
    churn.finish()
    assert node.log == ["remove steady-0", "write steady-0", "remove steady-1", "write steady-1",
                        "remove steady-0", "write steady-0"]
    assert churn.churns == 2  # the third write-back is finish()'s
