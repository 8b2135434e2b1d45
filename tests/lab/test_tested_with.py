"""The Tested-with table: records per run, folded into one Markdown table; the docs page is the rendering of the
committed records (a hand edit fails), which name where each column comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab import runtimes
from rplab.tested_with import (
    BY_HAND, CI_SOURCE, DOCS_PAGE, DOCS_RECORDS, TESTED_WITH_ENV, docs_page, main, merged_outcome, read_records,
    write_record,
)
from rplab.kubelet_node import KUBELET_VERSION, NEWEST_KUBELET_VERSION


def test_a_failure_in_any_phase_wins_then_a_skip() -> None:
    assert merged_outcome(None, "passed") == "passed"
    assert merged_outcome("passed", "failed") == "failed"
    assert merged_outcome("failed", "passed") == "failed"
    assert merged_outcome("skipped", "passed") == "skipped"


def test_two_runs_make_one_column_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(runtimes.CONTAINERD_ENV, raising=False)
    monkeypatch.delenv(runtimes.DOCKERD_ENV, raising=False)
    monkeypatch.setenv(TESTED_WITH_ENV, CI_SOURCE)
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


def test_a_run_by_hand_is_marked_so_with_its_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TESTED_WITH_ENV, "1")
    record = json.loads(write_record({"tests/e2e/test_hooks.py::a": "passed"}, tmp_path).read_text())
    assert record["run"]["source"] == BY_HAND and record["run"]["date"]
    assert f"({BY_HAND}, {record['run']['date']}) |" in docs_page(read_records(tmp_path)).splitlines()[-3]
    monkeypatch.setenv(TESTED_WITH_ENV, CI_SOURCE)
    later = json.loads(write_record({"tests/e2e/test_cgroup_v2.py::a": "passed"}, tmp_path).read_text())
    assert later["run"] == record["run"]  # a later process joins the run it adds suites to


def test_the_docs_page_is_the_rendering_of_the_committed_records() -> None:
    """`.venv/bin/python -m rplab.tested_with --docs` writes both; a hand edit of either side fails here."""
    records = read_records(DOCS_RECORDS)
    assert records, f"no records in {DOCS_RECORDS}"
    assert DOCS_PAGE.read_text() == docs_page(records)


def test_no_other_page_has_a_tested_with_table_of_its_own() -> None:
    """A table pasted into a page goes stale: the only one is the rendered page."""
    pasted = [path.name for path in DOCS_PAGE.parent.glob("*.md")
              if path != DOCS_PAGE and "| suite | containerd" in path.read_text()]
    assert pasted == []


def test_the_committed_records_name_their_runs_and_mark_a_run_by_hand() -> None:
    """Every column says where it comes from: a scripts/test.sh pass of a date, or a run by hand of a date."""
    records = read_records(DOCS_RECORDS)
    for name, record in records.items():
        run = record["run"]
        assert run["source"] in (CI_SOURCE, BY_HAND) and run["date"], name
    assert any(record["run"]["source"] == CI_SOURCE for record in records.values())


def test_docs_writes_the_records_and_the_page_and_takes_any_suite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generic over suites: a kubelet suite's rows appear as any other's."""
    reports, docs = tmp_path / "reports", tmp_path / "docs"
    monkeypatch.setattr("rplab.tested_with.DOCS_RECORDS", docs / "tested-with")
    monkeypatch.setattr("rplab.tested_with.DOCS_PAGE", docs / "tested-with.md")
    monkeypatch.setenv(TESTED_WITH_ENV, CI_SOURCE)
    write_record({"tests/e2e/test_kubelet_pods.py::a": "passed", "tests/e2e/test_cgroup_v2.py::b": "passed"},
                 reports)
    (docs / "tested-with").mkdir(parents=True)
    (docs / "tested-with" / "tested-with-stale.json").write_text("{}")  # a record of an older run: replaced
    assert main(["--dir", str(reports), "--docs"]) == 0
    assert sorted(path.name for path in (docs / "tested-with").iterdir()) == \
        sorted(path.name for path in reports.glob("tested-with-*.json"))
    page = (docs / "tested-with.md").read_text()
    assert "| test_kubelet_pods.py | 1 passed |" in page and "| test_cgroup_v2.py | 1 passed |" in page
    assert f"| {CI_SOURCE}, " in page


def test_a_run_of_the_kubelet_suite_records_the_kubelet_version(tmp_path: Path) -> None:
    path = write_record({"tests/e2e/test_real_kubelet.py::a": "passed"}, tmp_path)
    assert json.loads(path.read_text())["kubelet"] == KUBELET_VERSION
    again = write_record({"tests/e2e/test_hooks.py::a": "passed"}, tmp_path)  # a later run on the same runtimes
    assert json.loads(again.read_text())["kubelet"] == KUBELET_VERSION
    assert "kubelet" not in json.loads(write_record({"tests/e2e/test_hooks.py::a": "passed"},
                                                    tmp_path / "other").read_text())


def test_the_guest_kubelet_suite_adds_the_newest_kubelet_to_the_runs_record(tmp_path: Path) -> None:
    write_record({"tests/e2e/test_real_kubelet.py::a": "passed"}, tmp_path)  # the first pass
    path = write_record({"tests/e2e/test_cgroup_v2_kubelet.py::a": "passed"}, tmp_path)  # the guest's process
    assert json.loads(path.read_text())["kubelet"] == f"{KUBELET_VERSION}, {NEWEST_KUBELET_VERSION}"
