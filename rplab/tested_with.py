"""The "Tested with" table: which runtime versions each e2e suite passed, failed or skipped on, from test runs.

Every pytest run of e2e tests with ``RUNTIMEPROXY_TESTED_WITH=1`` (scripts/test.sh sets it) writes one record (``tested-with-<containerd>-<dockerd>.json`` in the report
directory, by tests/e2e/conftest.py): the runtimes the run selected (rplab.runtimes) and, per suite (test file),
how many tests passed, failed and were skipped, and the kubelet's version when a suite ran the real kubelet
(rplab.kubelet_node). ``python -m rplab.tested_with`` folds the records there into one
Markdown table (``tested-with.md``, also printed): a row per suite, a column per runtime pair. scripts/test.sh
runs it after its passes.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from rplab.conformance import report_dir
from rplab.consumer_modules import KUBERNETES_VERSION as KUBELET_VERSION
from rplab.runtimes import selected

TESTED_WITH_ENV = "RUNTIMEPROXY_TESTED_WITH"
RECORD_GLOB = "tested-with-*.json"
# Suites that run a real kubelet process: a record of a run with one of them names the kubelet's version.
KUBELET_SUITES = ("test_kubelet.py",)
TABLE_NAME = "tested-with.md"
OUTCOMES = ("passed", "failed", "skipped")
# An item's outcome over its phases: a failure anywhere wins, then a skip.
PRECEDENCE = {"passed": 0, "skipped": 1, "failed": 2}


def merged_outcome(earlier: str | None, phase: str) -> str:
    return phase if earlier is None or PRECEDENCE[phase] > PRECEDENCE[earlier] else earlier


def run_record(outcomes: dict[str, str]) -> dict[str, object]:
    """The record of one run: {nodeid: outcome} counted per test file, and the runtimes the run selected."""
    suites: dict[str, Counter[str]] = {}
    for nodeid, outcome in outcomes.items():
        suites.setdefault(Path(nodeid.split("::", 1)[0]).name, Counter())[outcome] += 1
    runtimes = [selected(kind) for kind in ("containerd", "dockerd")]
    record: dict[str, object] = {
        "runtimes": [{"name": r.name, "kind": r.kind, "version": r.version} for r in runtimes],
        "suites": {name: dict(counts) for name, counts in sorted(suites.items())},
    }
    if any(suite in suites for suite in KUBELET_SUITES):
        record["kubelet"] = KUBELET_VERSION
    return record


def record_path(record: dict[str, object], directory: Path) -> Path:
    names = "-".join(runtime["name"] for runtime in record["runtimes"])  # type: ignore[attr-defined]
    return directory / f"tested-with-{names}.json"


def write_record(outcomes: dict[str, str], directory: Path | None = None) -> Path:
    """The run's record; a run on the same runtimes before it (in this report directory, which scripts/test.sh
    empties first: e.g. the cgroup v2 node's own process after the first pass) keeps its other suites."""
    record = run_record(outcomes)
    path = record_path(record, directory or report_dir())
    if path.exists():
        earlier = json.loads(path.read_text())
        record["suites"] = dict(sorted((earlier["suites"] | record["suites"]).items()))  # type: ignore[operator]
        if "kubelet" in earlier:
            record.setdefault("kubelet", earlier["kubelet"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _column(record: dict[str, object]) -> str:
    return " + ".join(f"{r['kind']} {r['version']}" for r in record["runtimes"])  # type: ignore[attr-defined]


def _cell(counts: dict[str, int] | None) -> str:
    if not counts:
        return "—"
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o))


def table(records: list[dict[str, object]]) -> str:
    """Markdown: a row per suite, a column per run's runtimes."""
    records = sorted(records, key=lambda r: [(x["kind"], x["version"]) for x in r["runtimes"]])  # type: ignore
    suites = sorted({suite for record in records for suite in record["suites"]})  # type: ignore[attr-defined]
    lines = ["| suite | " + " | ".join(_column(r) for r in records) + " |",
             "|---|" + "---|" * len(records)]
    for suite in suites:
        cells = [_cell(record["suites"].get(suite)) for record in records]  # type: ignore[attr-defined]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rplab.tested_with", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="report directory (default: $RUNTIMEPROXY_REPORT_DIR "
                        "or <repo>/reports)")
    args = parser.parse_args(argv)
    directory = args.dir or report_dir()
    records = [json.loads(path.read_text()) for path in sorted(directory.glob(RECORD_GLOB))]
    if not records:
        print(f"no records ({RECORD_GLOB}) in {directory}: run the e2e tests first")
        return 1
    text = table(records)
    (directory / TABLE_NAME).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
