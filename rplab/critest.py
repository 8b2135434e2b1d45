"""Run critest, the Kubernetes CRI conformance suite, against a CRI socket and count its results.

critest gets the socket as both runtime and image endpoint and writes a junit report; the counts come
from that report. Two specs cannot pass offline against containerd 1.6 and are skipped
(``OFFLINE_SKIP``): the pull of a public image by its upstream digest (no local build can have it) and the
Stop idempotence specs (containerd 1.6 answers NotFound for an unknown ID; newer runtimes answer OK).

A spec that fails is run once more on its own (``run_critest_retrying``): one that passes then is reported as
flaky, not failed. containerd 1.6 itself has one such spec here: the OOMKilled reason, when the shim misses
the OOM event of a container killed right after it starts (no TaskOOM event in containerd's log).
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

OFFLINE_SKIP = ("public image with digest should be pulled"
                "|Idempotence Stop(PodSandbox|Container) should not return an error if not found")
CRITEST_TIMEOUT_SECONDS = 900


@dataclass
class CritestResult:
    """Outcome of one critest run: spec names by status, the junit report and the console output."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)  # failed, then passed when run again (counted as passed)
    report: Path | None = None
    output: str = ""
    returncode: int = 0

    def counts(self) -> str:
        flaky = f" (flaky, passed on retry: {'; '.join(self.flaky)})" if self.flaky else ""
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped{flaky}"


def parse_junit(report: Path) -> CritestResult:
    """Spec names by outcome from a ginkgo junit report (suite set-up nodes are not specs)."""
    result = CritestResult(report=report)
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name.startswith("[It]"):
            continue  # [BeforeSuite], [SynchronizedAfterSuite] ...
        if case.find("skipped") is not None:
            result.skipped.append(name)
        elif case.find("failure") is not None or case.find("error") is not None:
            result.failed.append(name)
        else:
            result.passed.append(name)
    return result


GO_REGEXP_SPECIALS = set("\\.+*?()|[]{}^$")
# The labels ginkgo appends to a junit spec name and not to the text a focus matches; critest's specs have only
# the one its Serial decorator brings.
JUNIT_LABELS_SUFFIX = " [Serial]"


def exact_spec_regexp(names: list[str]) -> str:
    """A ginkgo focus (Go regexp) matching exactly the specs named as in the junit report ("[It] ...")."""
    def literal(text: str) -> str:
        return "".join("\\" + c if c in GO_REGEXP_SPECIALS else c for c in text)

    # Anchored at the end only: ginkgo matches the focus against a text with something before the spec name.
    return "|".join(f"{literal(name.removeprefix('[It] ').removesuffix(JUNIT_LABELS_SUFFIX))}$" for name in names)


def run_critest(critest: Path, socket: str | Path, report: Path, *, skip: str = OFFLINE_SKIP, focus: str = "",
                timeout: float = CRITEST_TIMEOUT_SECONDS, parallel: int = 1,
                ginkgo: Path | None = None) -> CritestResult:
    """Run every spec but ``skip`` (only ``focus``, if given) against the CRI socket; junit report to ``report``.
    ``parallel`` > 1: that many spec processes, run by the ginkgo CLI ``ginkgo`` (as critest's -parallel)."""
    endpoint = f"unix://{socket}"
    report.parent.mkdir(parents=True, exist_ok=True)
    command = [str(critest), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
               f"-ginkgo.skip={skip}", f"-ginkgo.junit-report={report}", "-ginkgo.no-color",
               *([f"-ginkgo.focus={focus}"] if focus else [])]
    if parallel > 1:
        if ginkgo is None:
            raise ValueError("critest's -parallel needs the ginkgo CLI")
        command += [f"-parallel={parallel}", f"-ginkgo-cli={ginkgo}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "GINKGO_NO_COLOR": "TRUE"}, cwd=report.parent)
    output = proc.stdout + proc.stderr
    if not report.is_file():
        raise RuntimeError(f"critest wrote no report (exit {proc.returncode}):\n{output[-3000:]}")
    result = parse_junit(report)
    result.output, result.returncode = output, proc.returncode
    return result


def run_critest_retrying(critest: Path, socket: str | Path, report: Path, parallel: int = 1,
                         ginkgo: Path | None = None) -> CritestResult:
    """``run_critest``, then the failed specs once more on their own, one at a time: those that pass now move to
    ``flaky``."""
    result = run_critest(critest, socket, report, parallel=parallel, ginkgo=ginkgo)
    if not result.failed:
        return result
    retry = run_critest(critest, socket, report.with_name(report.stem + "-retry.xml"),
                        focus=exact_spec_regexp(result.failed))
    result.flaky = [name for name in result.failed if name in retry.passed]
    result.failed = [name for name in result.failed if name not in result.flaky]
    result.passed += result.flaky
    result.output += "\n--- retry of the failed specs ---\n" + retry.output
    return result
