"""The benchmark command (`.venv/bin/python -m bench`): parse the options, run the cases against one Lab, print the table,
write the JSON; every process and temporary directory is removed at the end, also on failure or Ctrl-C."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import bench
from bench.cases import CASES, DEFAULT_CASES, LONG_CASES, Case
from bench.cases.measure import FULL, QUICK, Scale, short
from bench.machine import machine_info
from bench.peers import BENCH_DIR, REPO, Lab
from bench.report import CaseReport, header_lines, render, render_markdown, write_json
from runtimeproxy.usage import OneLineParser

DEFAULT_JSON = BENCH_DIR / "results" / "latest.json"


def run_case(case: Case, lab: Lab, scale: Scale) -> CaseReport:
    report = CaseReport(case.name, case.title)
    print(f"bench: {case.title} ...", flush=True)
    started = time.perf_counter()
    try:
        case.run(lab, scale, report)
    except Exception as error:  # noqa: BLE001 - the run goes on with the next case
        report.error = short(error, 2000)
        traceback.print_exc()
    report.seconds = time.perf_counter() - started
    status = f"FAILED: {report.error[:300]}" if report.error else "done"
    print(f"bench: {case.name} {status} in {report.seconds:.1f} s", flush=True)
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog=".venv/bin/python -m bench", description=bench.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs: the whole thing in about 1.5 minutes")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the results (%(default)s)")
    parser.add_argument("--markdown", action="store_true", help="also print the rows as one markdown table")
    parser.add_argument("--baseline", metavar="REV",
                        help="also run the proxy of git revision REV (a temporary worktree) as peer 'baseline' "
                             "(and 'baseline-plugin', 'baseline-nri'), to compare before and after a change in one run")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help=f"comma-separated subset of {', '.join(CASES)}, or all (every one but {', '.join(LONG_CASES)}; "
                             "default: %(default)s)")
    args = parser.parse_args(argv)
    args.case_names = [name.strip() for name in args.cases.split(",") if name.strip()]
    if args.case_names == ["all"]:
        args.case_names = [name for name in CASES if name not in LONG_CASES]
    unknown = [name for name in args.case_names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    return args


def baseline_checkout(revision: str, base: Path, stack: ExitStack) -> Path:
    """A detached worktree of `revision` under `base`, removed at the end."""
    directory = base / "baseline-checkout"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(directory), revision],
                   check=True)
    stack.callback(subprocess.run, ["git", "-C", str(REPO), "worktree", "remove", "--force", str(directory)],
                   check=False)
    print(f"bench: baseline {revision} = {subprocess.run(['git', '-C', str(directory), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}", flush=True)
    return directory


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds like Ctrl-C: everything is cleaned up


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    scale = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored (`cmd &`)
    # Every Python peer (the proxy included) imports this checkout, not an installed copy.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    meta = machine_info(["-m", "bench", *argv], args.quick)
    reports: list[CaseReport] = []
    interrupted = False
    started = time.perf_counter()
    with ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="rpb-", dir="/tmp"))  # short: unix socket paths are limited
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        lab = Lab(base, stack, baseline_checkout(args.baseline, base, stack) if args.baseline else None)
        try:
            for name in args.case_names:
                reports.append(run_case(CASES[name], lab, scale))
        except KeyboardInterrupt:
            interrupted = True
            print("bench: interrupted; cleaning up", file=sys.stderr, flush=True)
        print("bench: stopping processes and removing temporary files", flush=True)
    meta.update(loadavg_end=[round(x, 2) for x in os.getloadavg()],
                total_seconds=round(time.perf_counter() - started, 1), interrupted=interrupted)
    print()
    print(render(reports, header_lines(meta)))
    if args.markdown:
        print()
        print(render_markdown(reports))
    write_json(args.json, meta, asdict(scale), reports)
    print(f"\nresults written to {args.json}  (total {meta['total_seconds']} s)")
    return 130 if interrupted else 0
