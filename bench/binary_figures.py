"""Figures for docs/performance.md, "The release bundle": the release bundle against the installed wheel.

    .venv/bin/python -m bench.binary_figures [--bundle DIR] [--runs N]   (from the repo root)

Builds the bundle with rplab.release (unless --bundle names one) and the wheel's virtualenv with
tests/packagekit.installed_wheel(), then prints:

- sizes: the bundle on disk and as its tarball; the venv's site-packages the proxy needs (pip, setuptools and
  their helpers left out);
- start time, median of N: spawn until health answers SERVING (in front of the synthetic instant backend),
  and `--version` wall time;
- the oldest glibc the bundle runs on: the highest GLIBC_x.y symbol version that the executable or any
  bundled shared object requires (`objdump -T`), and which file requires it.

A measuring tool, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rplab import CHECKOUT
from rplab.node_layout import CTL, PROXY
from rplab.process import ProxyProcess
from tests.kits.packages import PACKAGE_WORKDIR, installed_wheel  # tests/ is a plain directory: a namespace package
from runtimeproxy.usage import OneLineParser

REPO_ROOT = CHECKOUT

# Installed into every venv, never imported by the proxy.
VENV_TOOLING = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")
GLIBC_VERSION = re.compile(r"\bGLIBC_(\d+)\.(\d+)(?:\.(\d+))?\b")
ELF_MAGIC = b"\x7fELF"


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def build_bundle(out: Path) -> Path:
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build_binary.sh"), "--out", str(out)], check=True)
    return out / PROXY


def site_packages_bytes(bin_dir: Path) -> int:
    (site,) = (bin_dir.parent / "lib").glob("python3*/site-packages")
    return sum(tree_bytes(entry) for entry in site.iterdir()
               if not any(entry.name == tool or entry.name.startswith(f"{tool}-") for tool in VENV_TOOLING))


@contextmanager
def synthetic_backend(base: Path) -> Iterator[Path]:
    socket = base / "backend.sock"
    backend = subprocess.Popen([sys.executable, "-m", "rplab.synthetic", "--socket", str(socket)], cwd=CHECKOUT)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if backend.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the synthetic backend did not start")
            time.sleep(0.02)
        yield socket
    finally:
        backend.terminate()
        backend.wait(10)


def time_until_serving(command: list[str], backend: Path, base: Path,
                       on_serving: Callable[[], None] | None = None) -> float:
    """Seconds from spawn until health answers SERVING; `on_serving` runs while the proxy serves."""
    proxy = ProxyProcess(base / "rp.sock", backend, command=command)
    started = time.monotonic()
    proxy.start(timeout=60)
    elapsed = time.monotonic() - started
    try:
        if on_serving is not None:
            on_serving()
    finally:
        if proxy.stop() != 0:
            raise RuntimeError(f"{command} did not stop cleanly:\n{proxy.log_tail()}")
    return elapsed


def time_version(command: list[str]) -> float:
    started = time.monotonic()
    subprocess.run([*command, "--version"], check=True, capture_output=True)
    return time.monotonic() - started


def glibc_requirements(files: list[Path]) -> dict[Path, tuple[int, ...]]:
    """The highest GLIBC_x.y[.z] each ELF file's dynamic symbols require (files needing none left out)."""
    needs = {}
    for path in files:
        table = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True).stdout
        versions = [tuple(int(part) for part in match if part) for match in GLIBC_VERSION.findall(table)]
        if versions:
            needs[path] = max(versions)
    return needs


def elf_files(directory: Path) -> list[Path]:
    found = []
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as handle:
                if handle.read(4) == ELF_MAGIC:
                    found.append(path)
    return found


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def main() -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="a built bundle directory (default: build one)")
    parser.add_argument("--runs", type=int, default=5, help="runs per start-time figure (median)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="rp-figures-", dir="/tmp"))
    try:
        bundle = args.bundle or build_bundle(base / "release")
        venv_bin = installed_wheel()
        builds = {"bundle": [str(bundle / PROXY)], "wheel venv": [str(venv_bin / PROXY)]}
        with synthetic_backend(base) as backend:
            figures = {name: (median_of(args.runs, lambda c=command: time_until_serving(c, backend, base)),
                              median_of(args.runs, lambda c=command: time_version(c)))
                       for name, command in builds.items()}
        packed = subprocess.run(["tar", "-czf", "-", "-C", str(bundle), "."], check=True, capture_output=True).stdout

        print(f"python: {sys.version.split()[0]}; runs per figure: {args.runs} (median)")
        print(f"size: bundle {mib(tree_bytes(bundle))} on disk, {mib(len(packed))} as tar.gz; "
              f"wheel venv site-packages {mib(site_packages_bytes(venv_bin))} (plus the node's Python)")
        for name, (serving, version) in figures.items():
            print(f"start ({name}): until health SERVING {serving * 1000:.0f} ms, --version {version * 1000:.0f} ms")
        needs = glibc_requirements(elf_files(bundle))
        oldest = max(needs.values())
        culprits = sorted(path.name for path, version in needs.items() if version == oldest)
        print(f"oldest glibc: {'.'.join(map(str, oldest))} (required by {', '.join(culprits)}); "
              f"executable alone: {'.'.join(map(str, needs.get(bundle / PROXY, (0,))))}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(PACKAGE_WORKDIR, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
