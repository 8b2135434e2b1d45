"""The Tested-with table: records per run, folded into one Markdown table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab import runtimes
from rplab.kubelet_node import KUBELET_VERSION
from rplab.tested_with import main, merged_outcome, write_record


def test_a_failure_in_any_phase_wins_then_a_skip() -> None:
    assert merged_outcome(None, "passed") == "passed"
    assert merged_outcome("passed", "failed") == "failed"
    assert merged_outcome("failed", "passed") == "failed"
    assert merged_outcome("skipped", "passed") == "skipped"


def test_two_runs_make_one_column_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(runtimes.CONTAINERD_ENV, raising=False)
    monkeypatch.delenv(runtimes.DOCKERD_ENV, raising=False)
    outcomes = {"tests/e2e/test_hooks.py::a": "passed", "tests/e2e/test_hooks.py::b": "skipped",
                "tests/e2e/test_nri.py::c": "failed"}
    write_record(outcomes, tmp_path)
    monkeypatch.setenv(runtimes.CONTAINERD_ENV, "containerd-2.1")
    second = write_record({"tests/e2e/test_hooks.py::a": "passed"}, tmp_path)
    assert json.loads(second.read_text())["runtimes"][0] == {"name": "containerd-2.1", "kind": "containerd",
                                                             "version": "2.1.9"}
    assert main(["--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| suite | containerd 1.6.20 + dockerd 20.10.24 | containerd 2.1.9 + dockerd 20.10.24 |",
        "|---|---|---|",
        "| test_hooks.py | 1 passed, 1 skipped | 1 passed |",
        "| test_nri.py | 1 failed | — |",
    ]


def test_a_later_run_on_the_same_runtimes_adds_its_suites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/test.sh runs the cgroup v2 node in a process of its own after the first pass, on the same runtimes."""
    monkeypatch.delenv(runtimes.CONTAINERD_ENV, raising=False)
    monkeypatch.delenv(runtimes.DOCKERD_ENV, raising=False)
    write_record({"tests/e2e/test_hooks.py::a": "passed"}, tmp_path)
    path = write_record({"tests/e2e/test_cgroup_v2.py::a": "passed"}, tmp_path)
    assert json.loads(path.read_text())["suites"] == {"test_cgroup_v2.py": {"passed": 1},
                                                      "test_hooks.py": {"passed": 1}}


def test_a_run_of_the_kubelet_suite_records_the_kubelet_version(tmp_path: Path) -> None:
    path = write_record({"tests/e2e/test_kubelet.py::a": "passed"}, tmp_path)
    assert json.loads(path.read_text())["kubelet"] == KUBELET_VERSION
    again = write_record({"tests/e2e/test_hooks.py::a": "passed"}, tmp_path)  # a later run on the same runtimes
    assert json.loads(again.read_text())["kubelet"] == KUBELET_VERSION
    assert "kubelet" not in json.loads(write_record({"tests/e2e/test_hooks.py::a": "passed"},
                                                    tmp_path / "other").read_text())
