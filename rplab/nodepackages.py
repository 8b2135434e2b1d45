"""The node packages: a .deb and an .rpm holding the release bundle, the systemd units, a kubelet drop-in (shipped
disabled) and the hook directory, built with dpkg-deb and rpmbuild (Debian's `rpm`) as node agents ship theirs.

Contents (the same in both):
  /opt/koord-runtime-proxy/bin/            the bundle (rplab.release): koord-runtime-proxy, runtimeproxyctl, _internal
  /usr/bin/koord-runtime-proxy, /usr/bin/runtimeproxyctl     links into it, so both are on PATH
  /usr/lib/systemd/system/koord-runtime-proxy.service        deploy/koord-runtime-proxy.service
  /usr/lib/systemd/system/koord-runtime-proxy{,-admin}.socket  deploy/'s: its CRI and admin sockets, held by systemd
  /usr/share/koord-runtime-proxy/kubelet-runtime-endpoint.conf   the kubelet drop-in, to copy into
                                           /etc/systemd/system/kubelet.service.d/ to switch the kubelet over
  /etc/runtime/hookserver.d/               the hook directory; the operator's files in it are never the package's

The maintainer scripts only reload systemd where it runs, restart a running proxy on upgrade and stop the service
on removal: installing does not start or enable it (the kubelet must be pointed at it first), and nothing the
operator wrote is touched. The sockets come with the service (its Wants= and Also=): an enabled service gets them
enabled on upgrade too (from a version without them), and the restart that follows is the last to refuse a call:
from then on systemd holds the sockets across every restart.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from rplab import CHECKOUT
from rplab.node_layout import CTL, INSTALL_DIR, PROXY

PACKAGE = "koord-runtime-proxy"
UNIT = CHECKOUT / "deploy" / f"{PROXY}.service"
SOCKET_UNITS = (CHECKOUT / "deploy" / f"{PROXY}.socket", CHECKOUT / "deploy" / f"{PROXY}-admin.socket")
SOCKET_NAMES = " ".join(unit.name for unit in SOCKET_UNITS)
KUBELET_DROPIN = CHECKOUT / "deploy" / "kubelet-runtime-endpoint.conf"
HOOK_DIR = "/etc/runtime/hookserver.d"
UNIT_DIR = "/usr/lib/systemd/system"  # where packages put units, on Debian and RPM distributions alike
SHARE_DIR = f"/usr/share/{PACKAGE}"
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}

SYSTEMD_RUNNING = "[ -d /run/systemd/system ]"
# An enabled service gets its sockets enabled (an upgrade from a version without them); a running one is restarted
# on the new bundle (the restart starts the sockets it wants first). A first install starts and enables nothing.
# (rpm runs the new package's %post but the old one's %postun: the enabling goes in %post.)
ENABLE_SOCKETS = (f"    if systemctl is-enabled --quiet {PACKAGE}.service; then systemctl enable {SOCKET_NAMES} >/dev/null 2>&1"
                  " || true; fi")
RESTART_SERVICE = f"    if systemctl is-active --quiet {PACKAGE}.service; then systemctl restart {PACKAGE}.service || true; fi"
STOP_SERVICE = f"""  systemctl stop {PACKAGE}.service {SOCKET_NAMES} || true
  systemctl disable {PACKAGE}.service {SOCKET_NAMES} >/dev/null 2>&1 || true"""
MAINTAINER_SCRIPTS = {
    "postinst": f"""#!/bin/sh
set -e
if [ "$1" = configure ] && {SYSTEMD_RUNNING}; then
  systemctl daemon-reload || true
  if [ -n "$2" ]; then
{ENABLE_SOCKETS}
{RESTART_SERVICE}
  fi
fi
""",
    "prerm": f"""#!/bin/sh
set -e
if [ "$1" = remove ] && {SYSTEMD_RUNNING}; then
{STOP_SERVICE}
fi
""",
    "postrm": f"""#!/bin/sh
set -e
if {SYSTEMD_RUNNING}; then systemctl daemon-reload || true; fi
""",
}


def control(version: str, installed_kib: int) -> str:
    return (f"Package: {PACKAGE}\nVersion: {version}\nArchitecture: {DEB_ARCH.get(platform.machine(), 'amd64')}\n"
            "Maintainer: runtimeproxy developers <maintainers@users.noreply.github.com>\n"
            f"Installed-Size: {installed_kib}\nDepends: libc6 (>= 2.31), zlib1g\nRecommends: containerd | docker.io\n"
            "Section: admin\nPriority: optional\n"
            "Description: CRI proxy running runtime hook and NRI plugins between the kubelet and the runtime\n"
            " A drop-in for koordinator's koord-runtime-proxy: the kubelet talks to it as to containerd\n"
            " (or dockerd through cri-dockerd); it forwards every call and lets resource-management plugins\n"
            " adjust pods and containers. Start it, then point the kubelet at its socket with the drop-in in\n"
            f" {SHARE_DIR}.\n")


def stage(bundle: Path, staging: Path) -> None:
    """The packages' files under `staging`, as they land on the node."""
    shutil.copytree(bundle, staging / INSTALL_DIR.lstrip("/") / "bin", symlinks=True)
    usr_bin = staging / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    for name in (PROXY, CTL):
        (usr_bin / name).symlink_to(f"{INSTALL_DIR}/bin/{name}")
    for unit in (UNIT, *SOCKET_UNITS):
        _install(unit, staging / UNIT_DIR.lstrip("/") / unit.name)
    _install(KUBELET_DROPIN, staging / SHARE_DIR.lstrip("/") / KUBELET_DROPIN.name)
    (staging / HOOK_DIR.lstrip("/")).mkdir(parents=True)


def build_deb(bundle: Path, version: str, out: Path) -> Path:
    """out/koord-runtime-proxy_<version>_<arch>.deb from the bundle `rplab.release` built."""
    with tempfile.TemporaryDirectory(prefix="rp-deb-") as work:
        staging = Path(work) / "pkg"
        stage(bundle, staging)
        debian = staging / "DEBIAN"
        debian.mkdir()
        for name, text in MAINTAINER_SCRIPTS.items():
            (debian / name).write_text(text)
            (debian / name).chmod(0o755)
        size = sum(path.lstat().st_size for path in staging.rglob("*") if path.is_file()) // 1024
        (debian / "control").write_text(control(version, size))
        deb = out / f"{PACKAGE}_{version}_{DEB_ARCH.get(platform.machine(), 'amd64')}.deb"
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(staging), str(deb)], check=True,
                       capture_output=True)
    return deb


def rpm_spec(version: str, staging: Path) -> str:
    """The spec: the staged files as they are (no stripping: PyInstaller's executable carries its archive), the
    same scriptlets as the .deb's ($1 counts the installed versions: 0 on removal, 2 on upgrade)."""
    return f"""Name: {PACKAGE}
Version: {version.replace("-", "~")}
Release: 1
Summary: CRI proxy running runtime hook and NRI plugins between the kubelet and the runtime
License: Apache-2.0
AutoReqProv: no
Requires: glibc >= 2.31, zlib
%global debug_package %{{nil}}
%global __os_install_post %{{nil}}
%global _build_id_links none

%description
A drop-in for koordinator's koord-runtime-proxy: the kubelet talks to it as to containerd (or dockerd through
cri-dockerd); it forwards every call and lets resource-management plugins adjust pods and containers.

%install
cp -a {staging}/. %{{buildroot}}/

%files
{INSTALL_DIR}
/usr/bin/{PROXY}
/usr/bin/{CTL}
{UNIT_DIR}/{UNIT.name}
{"".join(f"{UNIT_DIR}/{unit.name}{chr(10)}" for unit in SOCKET_UNITS)}{SHARE_DIR}
%dir {HOOK_DIR}

%post
if {SYSTEMD_RUNNING}; then
  systemctl daemon-reload || true
  if [ "$1" -ge 2 ]; then
{ENABLE_SOCKETS}
  fi
fi

%preun
if [ "$1" -eq 0 ] && {SYSTEMD_RUNNING}; then
{STOP_SERVICE}
fi

%postun
if {SYSTEMD_RUNNING}; then
  systemctl daemon-reload || true
  if [ "$1" -ge 1 ]; then
{RESTART_SERVICE}
  fi
fi
"""


def build_rpm(bundle: Path, version: str, out: Path) -> Path:
    """out/koord-runtime-proxy-<version>-1.<arch>.rpm from the bundle `rplab.release` built."""
    rpmbuild = shutil.which("rpmbuild")
    if rpmbuild is None:
        raise RuntimeError("rpmbuild is not installed (Debian's rpm package; scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="rp-rpm-") as work:
        staging = Path(work) / "staging"
        stage(bundle, staging)
        spec = Path(work) / f"{PACKAGE}.spec"
        spec.write_text(rpm_spec(version, staging))
        done = subprocess.run([rpmbuild, "-bb", "--quiet", f"--define=_topdir {work}/rpmbuild",
                               f"--define=_rpmdir {work}/rpms", str(spec)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"rpmbuild failed: {done.stderr[-3000:]}")
        (built,) = Path(work, "rpms").rglob("*.rpm")
        out.mkdir(parents=True, exist_ok=True)
        rpm = out / built.name
        shutil.copyfile(built, rpm)
    return rpm


def _install(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    target.chmod(0o644)
