"""The package as a user meets it: the wheel built from this checkout, installed into a fresh virtualenv
outside the checkout. Built once per test session (tests share it through these functions)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Outside the checkout, so nothing can import the source tree by accident.
PACKAGE_WORKDIR = Path(tempfile.gettempdir()) / f"rp-package-{os.getpid()}"


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


@functools.cache
def built_wheel() -> Path:
    """The wheel `pip wheel .` builds from this checkout (no dependencies)."""
    out = PACKAGE_WORKDIR / "wheel"
    out.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
          "-q", "-w", str(out), str(REPO_ROOT)])
    wheels = sorted(out.glob("runtimeproxy-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def make_virtualenv(prefix: Path, python: str = sys.executable) -> Path:
    """A fresh virtualenv at prefix (no system site-packages); returns its bin directory."""
    _run([python, "-m", "venv", str(prefix)])
    return prefix / "bin"


@functools.cache
def installed_wheel() -> Path:
    """The bin directory of a fresh virtualenv with the built wheel installed from the package registry's deps."""
    bin_dir = make_virtualenv(PACKAGE_WORKDIR / "venv")
    _run([str(bin_dir / "pip"), "install", "--disable-pip-version-check", "-q", str(built_wheel())])
    return bin_dir
