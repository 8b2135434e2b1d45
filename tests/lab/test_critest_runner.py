"""rplab.critest: counting critest results from its junit report, retrying failed specs once."""

from __future__ import annotations

from pathlib import Path

import pytest

from rplab.conformance import conformance_verdict
from rplab import critest as critest_module
from rplab.critest import OFFLINE_SKIP, CritestResult, exact_spec_regexp, parse_junit

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1">
  <testsuite name="CRI validation" tests="5">
    <testcase name="[BeforeSuite]" status="passed"></testcase>
    <testcase name="[It] [k8s.io] Image Manager should pull" status="passed"></testcase>
    <testcase name="[It] [k8s.io] Streaming should exec" status="failed"><failure message="boom"></failure></testcase>
    <testcase name="[It] [k8s.io] AppArmor should enforce" status="skipped"><skipped message="disabled"></skipped></testcase>
    <testcase name="[It] [k8s.io] Networking should serve" status="passed"></testcase>
  </testsuite>
</testsuites>
"""


def test_parse_junit_counts_specs_only(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    result = parse_junit(report)
    assert result.passed == ["[It] [k8s.io] Image Manager should pull", "[It] [k8s.io] Networking should serve"]
    assert result.failed == ["[It] [k8s.io] Streaming should exec"]
    assert result.skipped == ["[It] [k8s.io] AppArmor should enforce"]
    assert result.counts() == "2 passed, 1 failed, 1 skipped"


def test_offline_skip_names_only_the_two_impossible_specs() -> None:
    import re

    pattern = re.compile(OFFLINE_SKIP)
    assert pattern.search("[k8s.io] Image Manager public image with digest should be pulled and removed")
    assert pattern.search("[k8s.io] Idempotence StopPodSandbox should not return an error if not found")
    assert pattern.search("[k8s.io] Idempotence StopContainer should not return an error if not found")
    assert not pattern.search("[k8s.io] Idempotence RemoveContainer should not return an error if not found")


def result(passed: list[str], failed: list[str] = []) -> CritestResult:  # noqa: B006 - never mutated
    return CritestResult(passed=list(passed), failed=list(failed))


def test_verdict_accepts_only_identical_passes() -> None:
    direct = ["[It] a", "[It] b"]
    assert conformance_verdict({"direct": result(direct), "proxy": result(direct)}) is None
    verdict = conformance_verdict({"direct": result(direct), "proxy": result(["[It] a"], ["[It] b"])})
    assert verdict == "proxy: 1 failed; proxy: passes direct, not here: [It] b"


def test_exact_spec_regexp_escapes_go_metacharacters() -> None:
    pattern = exact_spec_regexp(["[It] [k8s.io] Networking should support DNS config [Conformance]", "[It] a.b (c)"])
    assert pattern == r"\[k8s\.io\] Networking should support DNS config \[Conformance\]$|a\.b \(c\)$"


def test_exact_spec_regexp_leaves_out_ginkgo_labels() -> None:
    # junit names end with the spec's labels (the Serial decorator's); the text a focus matches does not.
    pattern = exact_spec_regexp(["[It] [k8s.io] Image Manager should pull [Conformance] [Serial]"])
    assert pattern == r"\[k8s\.io\] Image Manager should pull \[Conformance\]$"


def test_a_spec_that_passes_on_retry_is_flaky_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []

    def fake_run(critest: Path, socket: str, report: Path, *, focus: str = "", parallel: int = 1,
                 ginkgo: Path | None = None) -> CritestResult:
        calls.append((focus, parallel))
        if not focus:
            return CritestResult(passed=["[It] a"], failed=["[It] oom", "[It] broken"], output="first")
        return CritestResult(passed=["[It] oom"], failed=["[It] broken"], output="retry")

    monkeypatch.setattr(critest_module, "run_critest", fake_run)
    result = critest_module.run_critest_retrying(Path("critest"), "sock", tmp_path / "junit.xml", 4, Path("ginkgo"))
    assert calls == [("", 4), (exact_spec_regexp(["[It] oom", "[It] broken"]), 1)]  # the retry one spec at a time
    assert result.passed == ["[It] a", "[It] oom"] and result.failed == ["[It] broken"]
    assert result.flaky == ["[It] oom"]
    assert result.counts() == "2 passed, 1 failed, 0 skipped (flaky, passed on retry: [It] oom)"
