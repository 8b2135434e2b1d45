"""The package as a user meets it: the wheel built from this checkout, installed into a fresh virtualenv
outside the checkout. Built once per test session (tests share it through these functions)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.kits.docs import doc_block  # tests/ is a plain directory: bench.binary_figures imports this too

REPO_ROOT = Path(__file__).resolve().parents[2]
# Outside the checkout, so nothing can import the source tree by accident.
PACKAGE_WORKDIR = Path(tempfile.gettempdir()) / f"rp-package-{os.getpid()}"


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


# Not copied into the build: what a build leaves behind (a stale build/lib would leak into the wheel).
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                     "reports", "results")


@functools.cache
def built_wheel() -> Path:
    """The wheel `pip wheel .` builds from a clean copy of this checkout (no dependencies)."""
    source = PACKAGE_WORKDIR / "source"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(REPO_ROOT, source, ignore=_NOT_SOURCE)
    out = PACKAGE_WORKDIR / "wheel"
    out.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
          "-q", "-w", str(out), str(source)])
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


# The node install of docs/install.md, run as written (tests/test_packaging.py, tests/e2e/test_debian_roots.py):
# the block it marks `<!-- run: node-install -->`.
NODE_INSTALL_PAGE = "docs/install.md"
NODE_INSTALL_ID = "node-install"
NODE_INSTALL_PREFIX = "/opt/koord-runtime-proxy"


def node_install_block() -> list[str]:
    """The shell lines of the docs' node install block."""
    return doc_block(NODE_INSTALL_PAGE, NODE_INSTALL_ID).splitlines()


def node_install_lines() -> list[str]:
    """The lines of the node install block that name the install prefix."""
    return [line for line in node_install_block() if NODE_INSTALL_PREFIX in line]


def install_as_documented(prefix: Path, python_dir: str = "/usr/bin") -> list[tuple[str, str]]:
    """Run the docs' node install lines with prefix for /opt/koord-runtime-proxy, Debian's python3 first on PATH,
    in a clean copy of the checkout; returns (line, output) for each."""
    source = PACKAGE_WORKDIR / "install-source"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(REPO_ROOT, source, ignore=_NOT_SOURCE)
    environment = {**os.environ, "PATH": f"{python_dir}:{os.environ.get('PATH', '')}"}
    environment.pop("PYTHONPATH", None)
    outputs = []
    for line in node_install_lines():
        command = line.replace(NODE_INSTALL_PREFIX, str(prefix))
        done = subprocess.run(["sh", "-ec", command], cwd=source, env=environment, capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"{NODE_INSTALL_PAGE} line {line!r} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        outputs.append((line, done.stdout))
    return outputs
