"""What a benchmark run ran on: machine, versions, commit and command, for the report's header and JSON."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import grpc
from google import protobuf

REPO = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def tool_version(argv: list[str]) -> str:
    try:
        finished = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (finished.stdout or finished.stderr).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unavailable"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(argv: list[str], quick: bool) -> dict[str, Any]:
    status = git("status", "--porcelain").splitlines()
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "git_dirty": bool(status),
        "git_status": status[:50],
        "command": shlex.join(["python3", *argv]),
        "quick": quick,
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": protobuf.__version__,
        "go": tool_version(["go", "version"]),
        "kernel": platform.release(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
