"""critest, the Kubernetes CRI conformance suite: direct, through the proxy, through the proxy with a
koordlet-style echo plugin on all seven hooks (policy Fail), and through the proxy hosting NRI with the
project's no-op NRI plugin on every NRI event, in one run against one containerd.

Whatever passes direct must pass through the proxy, both ways. The junit reports go to
``$RUNTIMEPROXY_REPORT_DIR`` (default ``<repo>/reports``); the counts appear in the terminal summary.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import orjson
import pytest

from rplab.conformance import NRI_PLUGIN_ID, ConformanceLab, critest_nri_admin, echo_record, run_conformance
from rplab.critest import CritestResult
from runtimeproxy.admin.ctl import main as ctl_main
from runtimeproxy.hooks.names import HOOK_NAMES


@pytest.fixture(scope="module")
def critest_runs(critest_binary: Path, conformance_lab: ConformanceLab, report_dir: Path,
                 conformance_summary: list[str]) -> dict[str, CritestResult]:
    def summarize(target: str, result: CritestResult, report: Path) -> None:
        conformance_summary.append(f"critest {target:<13} {result.counts()}  (junit: {report})")

    return run_conformance(conformance_lab, critest_binary, report_dir, summarize)


def failures(result: CritestResult) -> str:
    return "\n".join(result.failed) + "\n" + result.output[-4000:]


def test_critest_direct_passes(critest_runs: dict[str, CritestResult]) -> None:
    direct = critest_runs["direct"]
    assert direct.passed and not direct.failed, failures(direct)


@pytest.mark.parametrize("target", ["proxy", "proxy+plugin", "proxy+nri"])
def test_critest_through_proxy_passes_what_passes_direct(critest_runs: dict[str, CritestResult], target: str) -> None:
    direct, proxied = critest_runs["direct"], critest_runs[target]
    assert not proxied.failed, failures(proxied)
    assert sorted(proxied.passed) == sorted(direct.passed)
    assert sorted(proxied.skipped) == sorted(direct.skipped)


def test_echo_plugin_saw_every_hook_critest_calls(critest_runs: dict[str, CritestResult],
                                                  conformance_lab: ConformanceLab) -> None:
    record = echo_record(conformance_lab, "critest-hooked")
    hooks = {orjson.loads(line)["hook"] for line in record.read_bytes().splitlines()}
    # critest v1.32 has no UpdateContainerResources spec; test_crictl's `crictl update` covers that hook.
    assert hooks == set(HOOK_NAMES) - {"PreUpdateContainerResources"}


def test_nri_plugin_saw_every_event_critest_causes(critest_runs: dict[str, CritestResult],
                                                   conformance_lab: ConformanceLab) -> None:
    out = io.StringIO()
    assert ctl_main([f"--admin-endpoint={critest_nri_admin(conformance_lab)}", "status", "-o", "json"], out=out) == 0
    plugin, = [p for p in json.loads(out.getvalue())["nri_plugins"] if p["name"] == NRI_PLUGIN_ID]
    calls = {entry["hook"]: entry for entry in plugin["event_stats"]}
    # critest never updates a container's resources (see above): no UpdateContainer events.
    assert {event for event, entry in calls.items() if entry["calls"]} >= {
        "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer", "PostCreateContainer",
        "StartContainer", "PostStartContainer", "StopContainer", "RemoveContainer"}
    assert all(entry["failures"] == 0 for entry in calls.values())
