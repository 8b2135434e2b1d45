"""mypy finds no error in the package (rplab, tooling, excepted), NRI messages included; its settings are setup.cfg's [mypy].

Stubs come from the test extra (types-protobuf, types-grpcio*); the cache lives outside the checkout, so a run
after the first takes a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def test_the_package_type_checks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "setup.cfg")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
