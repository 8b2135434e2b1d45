"""The node packages (rplab.nodepackages) installed, upgraded and removed in a fresh Debian 12 root, as on a node.

dpkg runs inside the root (chroot), the .deb built from the release bundle of this checkout: the commands are on
PATH and run there, the unit passes `systemd-analyze verify`, an upgrade and a removal keep the operator's hook
configs, and a removal leaves none of the package's files. The .rpm (no RPM distribution's root can be made here)
is installed, upgraded and erased in the same kind of root by `rpm --root` with its own database: the same files
land, the commands run, the operator's configs stay.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy import __version__
from rplab.nodepackages import HOOK_DIR, PACKAGE, SHARE_DIR, SOCKET_UNITS, UNIT_DIR, build_deb, build_rpm
from rplab.node_layout import CTL, INSTALL_DIR, PROXY
from rplab.roots import chroot_run, make_root, mounted, unpack

NODE_SUITE = "bookworm"
OPERATOR_CONFIG = f"{HOOK_DIR}/koordlet.json"


@pytest.fixture(scope="module")
def debs(bundle: Path, workdir: Path) -> tuple[Path, Path]:
    """The package of this checkout and a later version of it (the upgrade)."""
    return build_deb(bundle, __version__, workdir / "debs"), build_deb(bundle, f"{__version__}+1", workdir / "debs")


@pytest.fixture
def node(workdir: Path) -> Iterator[Path]:
    with mounted(unpack(make_root(NODE_SUITE), workdir / "deb-node")) as root:
        yield root


def dpkg(root: Path, *args: str) -> str:
    done = chroot_run(root, ["dpkg", *args])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def package_files(root: Path) -> list[str]:
    listed = dpkg(root, "-L", PACKAGE).split()
    return [path for path in listed if path.startswith(("/opt", "/usr", "/lib", "/etc"))]


def test_install_upgrade_and_remove_keep_the_operators_configs_and_leave_nothing_else(
        node: Path, debs: tuple[Path, Path]) -> None:
    first, later = debs
    for deb in debs:
        shutil.copy2(deb, node / "tmp" / deb.name)
    dpkg(node, "-i", f"/tmp/{first.name}")
    for name in (PROXY, CTL):  # on PATH, running in the root
        done = chroot_run(node, [name, "--version"])
        assert done.stdout.strip() == f"{name} {__version__}", done.stderr
    for path in (f"{UNIT_DIR}/{PACKAGE}.service", *(f"{UNIT_DIR}/{unit.name}" for unit in SOCKET_UNITS),
                 f"{SHARE_DIR}/kubelet-runtime-endpoint.conf", HOOK_DIR):
        assert (node / path.lstrip("/")).exists(), path
    files = [path for path in package_files(node)
             if not (node / path.lstrip("/")).is_dir()]  # the links in /usr/bin point into the root's /opt
    (node / OPERATOR_CONFIG.lstrip("/")).write_text('{"remote-endpoint": "/run/koordlet.sock"}')

    dpkg(node, "-i", f"/tmp/{later.name}")
    assert f"Version: {__version__}+1" in dpkg(node, "-s", PACKAGE)
    assert (node / OPERATOR_CONFIG.lstrip("/")).exists()

    dpkg(node, "--purge", PACKAGE)
    assert [path for path in files if (node / path.lstrip("/")).is_symlink() or (node / path.lstrip("/")).exists()] \
        == []
    assert not (node / INSTALL_DIR.lstrip("/")).exists()
    assert (node / OPERATOR_CONFIG.lstrip("/")).read_text().startswith("{")


def test_the_installed_unit_passes_systemd_analyze_verify(node: Path, debs: tuple[Path, Path]) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    shutil.copy2(debs[0], node / "tmp" / debs[0].name)
    dpkg(node, "-i", f"/tmp/{debs[0].name}")
    unit = node / UNIT_DIR.lstrip("/") / f"{PACKAGE}.service"
    # verify checks that ExecStart exists: the installed bundle's path seen from the host.
    checked = unit.with_name("verify-" + unit.name)
    checked.write_text(unit.read_text().replace(INSTALL_DIR, str(node / INSTALL_DIR.lstrip("/"))))
    sockets = [str(unit.with_name(socket_unit.name)) for socket_unit in SOCKET_UNITS]
    done = subprocess.run([analyze, "verify", str(checked), *sockets], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{unit.parent}:"})
    assert done.returncode == 0 and checked.name not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_rpm_installs_upgrades_and_erases_leaving_the_operators_configs(
        node: Path, bundle: Path, workdir: Path) -> None:
    rpm = shutil.which("rpm")
    if rpm is None:
        pytest.skip("Debian's rpm is not installed")
    first, later = (build_rpm(bundle, version, workdir / "rpms") for version in (__version__, f"{__version__}+1"))
    database = node / "var" / "lib" / "rpm"
    database.mkdir(parents=True, exist_ok=True)

    def rpm_in_root(*args: str) -> str:
        done = subprocess.run([rpm, f"--root={node}", "--dbpath=/var/lib/rpm", *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    rpm_in_root("-i", "--nodeps", str(first))  # the root's glibc and zlib are dpkg's, not in rpm's database
    for name in (PROXY, CTL):
        done = chroot_run(node, [name, "--version"])
        assert done.stdout.strip() == f"{name} {__version__}", done.stderr
    assert (node / UNIT_DIR.lstrip("/") / f"{PACKAGE}.service").is_file()
    (node / OPERATOR_CONFIG.lstrip("/")).write_text('{"remote-endpoint": "/run/koordlet.sock"}')
    rpm_in_root("-U", "--nodeps", str(later))
    assert rpm_in_root("-q", PACKAGE).startswith(f"{PACKAGE}-{__version__}+1-1")
    rpm_in_root("-e", "--nodeps", PACKAGE)
    assert not (node / INSTALL_DIR.lstrip("/")).exists()
    assert not (node / "usr" / "bin" / PROXY).is_symlink()
    assert (node / OPERATOR_CONFIG.lstrip("/")).is_file()
