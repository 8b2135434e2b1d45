"""The documented commands with nothing but Debian's own python3: the setup on this machine with only /usr/bin on
PATH, and the node install in fresh Debian 12 and 13 roots (debootstrap), as written, with the root's own python3
(3.11 and 3.13); on Debian 13 the package's unit tests run too.

Debian's python3 refuses `pip install` outside a virtualenv (PEP 668): setup.sh and the node install each make
one, never touching the system's Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runtimeproxy import __version__
from rplab.roots import chroot_run, make_root, mounted, unpack

from tests.kits.machine import require_command
from tests.kits.packages import REPO_ROOT, _NOT_SOURCE, node_install_block

DEBIAN_ONLY_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The package's own unit tests (what runs without a runtime); the e2e and lab tests need this machine's parts.
UNIT_TEST_DIRS = ("tests/cri", "tests/hooks", "tests/docker", "tests/nri", "tests/plugin", "tests/admin")


def clean_copy(destination: Path) -> Path:
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(REPO_ROOT, destination, ignore=_NOT_SOURCE)
    return destination


def test_setup_with_only_debians_python_makes_the_checkouts_virtualenv_from_it(workdir: Path) -> None:
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("this machine has no /usr/bin/python3")
    checkout = clean_copy(workdir / "debian-python-checkout")
    environment = {"PATH": DEBIAN_ONLY_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, env=environment, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    venv = checkout / ".venv"
    assert "home = /usr/bin" in (venv / "pyvenv.cfg").read_text()
    version = subprocess.run([str(venv / "bin" / "koord-runtime-proxy"), "--version"], capture_output=True,
                             text=True, cwd="/")
    assert version.stdout.strip() == f"koord-runtime-proxy {__version__}"


@pytest.mark.parametrize(("suite", "python"), [("bookworm", "3.11"), ("trixie", "3.13")])
def test_the_documented_node_install_runs_as_written_in_a_fresh_debian_root(
        workdir: Path, suite: str, python: str) -> None:
    require_command("debootstrap", "debootstrap")
    root = unpack(make_root(suite), workdir / f"{suite}-node")
    clean_copy(root / "src")
    with mounted(root):
        for line in node_install_block():  # what needs a running systemd is the docs' next block
            done = chroot_run(root, ["sh", "-ec", f"cd /src && {line}"], timeout=900,
                              environment={"DEBIAN_FRONTEND": "noninteractive"})
            assert done.returncode == 0, f"{line}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        for command in ("koord-runtime-proxy", "runtimeproxyctl"):  # on PATH, as the next blocks of the docs call them
            done = chroot_run(root, [command, "--version"])
            assert done.stdout.strip().endswith(__version__), done.stderr
        interpreter = chroot_run(root, ["/opt/koord-runtime-proxy/bin/python", "-c",
                                        "import sys; print('%d.%d' % sys.version_info[:2])"])
        assert interpreter.stdout.strip() == python
        if suite == "trixie":
            _run_unit_tests(root)


def _run_unit_tests(root: Path) -> None:
    """The package's unit tests on the root's Python (3.13 on Debian 13), in the node install's virtualenv."""
    installed = chroot_run(root, ["sh", "-ec", "cd /src && /opt/koord-runtime-proxy/bin/pip install -q '.[test]'"],
                           timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    tested = chroot_run(root, ["sh", "-ec", "cd /src && /opt/koord-runtime-proxy/bin/python -m pytest -q "
                               f"-p no:cacheprovider {' '.join(UNIT_TEST_DIRS)}"], timeout=1200)
    summary = tested.stdout.strip().splitlines()[-1] if tested.stdout.strip() else ""
    assert tested.returncode == 0 and " passed" in summary and "failed" not in summary, \
        tested.stdout[-4000:] + tested.stderr[-2000:]
