"""The "Tested with" table: which runtime versions each e2e suite passed, failed or skipped on, from test runs.

Every pytest run of e2e tests with ``RUNTIMEPROXY_TESTED_WITH`` set writes one record
(``tested-with-<containerd>-<dockerd>.json`` in the report directory, by tests/e2e/conftest.py): the runtimes
the run selected (rplab.runtimes), the run (its date, commit, and source: ``scripts/test.sh``, which sets the
variable to its own name, or "by hand" for any other value) and, per suite (test file, whatever suites there are:
the kubelet's too), how many tests passed, failed and were skipped, and the kubelet's version when a suite ran the real
kubelet (rplab.kubelet_node). A later run on the same runtimes adds its
suites to the record (scripts/test.sh's cgroup v2 + systemd node, in a process of its own after the first pass).

    .venv/bin/python -m rplab.tested_with            # the report directory's records as one table (tested-with.md)
    .venv/bin/python -m rplab.tested_with --docs     # ... committed: docs/tested-with/*.json and the docs page

The table: a row per suite, a column per record. ``--docs`` replaces the committed records (docs/tested-with/)
with the report directory's (of a clean CI run) and writes the docs page docs/tested-with.md from them; the tests
check that page is the rendering of the committed records, so it is never edited by hand. ``--docs --dir
docs/tested-with`` renders the page again from the committed records alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from rplab import CHECKOUT
from rplab.conformance import report_dir
from rplab.consumer_modules import KUBERNETES_VERSION as KUBELET_VERSION
from rplab.consumer_modules import NEWEST_KUBERNETES_VERSION as NEWEST_KUBELET_VERSION
from rplab.runtimes import selected
from runtimeproxy.usage import OneLineParser

TESTED_WITH_ENV = "RUNTIMEPROXY_TESTED_WITH"
CI_SOURCE = "scripts/test.sh"  # the value scripts/test.sh gives TESTED_WITH_ENV; any other is a run by hand
BY_HAND = "by hand"
RECORD_GLOB = "tested-with-*.json"
# Suites that run a real kubelet process, and its version: a record of a run with one of them names the kubelets.
KUBELET_SUITES = {"test_real_kubelet.py": KUBELET_VERSION, "test_koord_differential.py": KUBELET_VERSION,
                  "test_koordlet.py": KUBELET_VERSION, "test_kubelet_resize.py": KUBELET_VERSION,
                  "test_cgroup_v2_kubelet.py": NEWEST_KUBELET_VERSION}  # the newest, where it runs: cgroup v2
TABLE_NAME = "tested-with.md"
DOCS_RECORDS = CHECKOUT / "docs" / "tested-with"
DOCS_PAGE = CHECKOUT / "docs" / "tested-with.md"
Record = dict[str, object]
OUTCOMES = ("passed", "failed", "skipped")
# An item's outcome over its phases: a failure anywhere wins, then a skip.
PRECEDENCE = {"passed": 0, "skipped": 1, "failed": 2}


def merged_outcome(earlier: str | None, phase: str) -> str:
    return phase if earlier is None or PRECEDENCE[phase] > PRECEDENCE[earlier] else earlier


def this_run() -> dict[str, str]:
    """The run a record comes from: today (UTC), the checkout's commit, and whether scripts/test.sh made it."""
    try:
        commit = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except OSError:
        commit = ""
    source = CI_SOURCE if os.environ.get(TESTED_WITH_ENV) == CI_SOURCE else BY_HAND
    return {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "commit": commit,
            "source": source}


def run_record(outcomes: dict[str, str]) -> Record:
    """The record of one run: {nodeid: outcome} counted per test file, the runtimes the run selected, the run."""
    suites: dict[str, Counter[str]] = {}
    for nodeid, outcome in outcomes.items():
        suites.setdefault(Path(nodeid.split("::", 1)[0]).name, Counter())[outcome] += 1
    runtimes = [selected(kind) for kind in ("containerd", "dockerd")]
    record: dict[str, object] = {
        "runtimes": [{"name": r.name, "kind": r.kind, "version": r.version} for r in runtimes],
        "suites": {name: dict(counts) for name, counts in sorted(suites.items())},
        "run": this_run(),
    }
    kubelets = {version for suite, version in KUBELET_SUITES.items() if suite in suites}
    if kubelets:
        record["kubelet"] = kubelet_versions(kubelets)
    return record


def kubelet_versions(versions: set[str]) -> str:
    """The kubelet versions a record names, oldest first ("v1.35.8, v1.37.2")."""
    return ", ".join(sorted(versions, key=lambda v: tuple(int(part) for part in v.lstrip("v").split("."))))


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
        record["suites"] = dict(sorted((earlier["suites"] | record["suites"]).items()))
        record["run"] = earlier.get("run", record["run"])  # the run it joins
        kubelets = {v for r in (earlier, record) for v in str(r.get("kubelet", "")).split(", ") if v}
        if kubelets:
            record["kubelet"] = kubelet_versions(kubelets)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _runtimes(record: Record) -> str:
    """The runtime pair, and the kubelet where a suite of the run drove the real one."""
    parts = [f"{r['kind']} {r['version']}" for r in record["runtimes"]]  # type: ignore[attr-defined]
    return " + ".join(parts + ([f"kubelet {record['kubelet']}"] if record.get("kubelet") else []))


def _runtime_order(record: Record) -> list[tuple[str, str]]:
    return [(runtime["kind"], runtime["version"]) for runtime in record["runtimes"]]  # type: ignore[attr-defined]


def _run(record: Record) -> dict[str, str]:
    return record.get("run") or {}  # type: ignore[return-value]  # records before runs were recorded: none


def _column(record: Record) -> str:
    """The runtimes; a run by hand says so, with its date."""
    run = _run(record)
    return _runtimes(record) + (f" ({BY_HAND}, {run.get('date')})" if run.get("source") == BY_HAND else "")


def _cell(counts: dict[str, int] | None) -> str:
    if not counts:
        return "—"
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o))


def table(records: list[Record]) -> str:
    """Markdown: a row per suite, a column per run's runtimes."""
    records = sorted(records, key=_runtime_order)
    suites = sorted({suite for record in records for suite in record["suites"]})  # type: ignore[attr-defined]
    lines = ["| suite | " + " | ".join(_column(r) for r in records) + " |",
             "|---|" + "---|" * len(records)]
    for suite in suites:
        cells = [_cell(record["suites"].get(suite)) for record in records]  # type: ignore[attr-defined]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_records(directory: Path) -> dict[str, Record]:
    """The records of a directory by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(directory.glob(RECORD_GLOB))}


def docs_page(records: dict[str, Record]) -> str:
    """docs/tested-with.md: where each column comes from (with its record, linked), then the table."""
    lines = [
        "# Tested with",
        "",
        f"<!-- Written by .venv/bin/python -m rplab.tested_with --docs from the records in docs/tested-with/: "
        "do not edit (tests/lab/test_tested_with.py checks it is their rendering). -->",
        "",
        "Each e2e suite (a test file) on each runtime pair, as the test runs recorded it: every pass of "
        f"`{CI_SOURCE}` writes its record, a row per suite it ran. Where the records come from and how they are "
        "refreshed: [Conformance](conformance.md#tested-with).",
        "",
        "| runtimes | run | record |",
        "|---|---|---|",
    ]
    for name, record in sorted(records.items(), key=lambda item: _runtime_order(item[1])):
        run = _run(record)
        described = ", ".join(part for part in (run.get("source", "unknown"), run.get("date", ""),
                                                 f"commit {run['commit']}" if run.get("commit") else "") if part)
        lines.append(f"| {_runtimes(record)} | {described} | [{name}](tested-with/{name}) |")
    return "\n".join(lines) + "\n\n" + table(list(records.values()))


def write_docs(source: Path) -> Path:
    """Replace the committed records with `source`'s (unless it is where they are) and write the docs page."""
    records = read_records(source)
    if source.resolve() != DOCS_RECORDS.resolve():
        for old in DOCS_RECORDS.glob(RECORD_GLOB):
            old.unlink()
        DOCS_RECORDS.mkdir(parents=True, exist_ok=True)
        for name in records:
            shutil.copyfile(source / name, DOCS_RECORDS / name)
    DOCS_PAGE.write_text(docs_page(records))
    return DOCS_PAGE


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.tested_with", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="report directory (default: $RUNTIMEPROXY_REPORT_DIR "
                        "or <repo>/reports)")
    parser.add_argument("--docs", action="store_true", help="commit the records into docs/tested-with/ and write "
                        "the docs page docs/tested-with.md from them")
    args = parser.parse_args(argv)
    directory = args.dir or report_dir()
    records = list(read_records(directory).values())
    if not records:
        print(f"no records ({RECORD_GLOB}) in {directory}: run scripts/test.sh (or the e2e tests with "
              f"{TESTED_WITH_ENV}={CI_SOURCE}) first")
        return 1
    if args.docs:
        print(write_docs(directory))
        return 0
    text = table(records)
    (directory / TABLE_NAME).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
