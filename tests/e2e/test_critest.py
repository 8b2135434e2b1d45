"""critest, the Kubernetes CRI conformance suite: direct, through the proxy, and through the proxy with a
koordlet-style echo plugin on all seven hooks (policy Fail), in one run against one containerd.

Whatever passes direct must pass through the proxy, both ways. The junit reports go to
``$RUNTIMEPROXY_REPORT_DIR`` (default ``<repo>/reports``); the counts appear in the terminal summary.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rplab.conformance import ConformanceLab, echo_record, run_conformance
from rplab.critest import CritestResult
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


@pytest.mark.parametrize("target", ["proxy", "proxy+plugin"])
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
