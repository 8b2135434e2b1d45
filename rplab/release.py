"""The release bundle for nodes without Python 3.11, built in a Debian 11 root so it runs on glibc 2.31 and later.

Why so: PyInstaller bundles the build machine's libpython and libstdc++, which need that machine's glibc (2.36 on
Debian 12: no Ubuntu 22.04, no RHEL 9). Debian 11 has no Python 3.11, so the root builds one from Debian 12's
python3.11 source package (fetched with a private apt configuration, cached), and PyInstaller freezes the wheel
with it there.

Why a directory (PyInstaller's onedir) and not one self-unpacking file: a onefile binary unpacks itself into
$TMPDIR at every start, which fails on a `noexec` /tmp, leaves 36 MiB behind at every `kill -9`, runs the proxy as
the child of a bootloader that can be killed apart from it, and loads code from a directory other users may be
able to write. The bundle is installed once (root-owned, /opt/koord-runtime-proxy) and runs in place: one process,
nothing unpacked. It ships as a tarball and inside the .deb and .rpm (rplab.nodepackages). `runtimeproxyctl` is a link to the
same executable, which runs the command its name says.

    python -m rplab.release [--wheel FILE] [--out DIR]      # scripts/build_binary.sh runs this
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from rplab import CHECKOUT
from rplab.node_layout import CTL, PROXY
from rplab.roots import CACHE as ROOTS_CACHE, RootError, chroot_run, debian_mirror, make_root, mounted, unpack
from runtimeproxy.usage import OneLineParser

BUILD_SUITE = "bullseye"  # glibc 2.31: Ubuntu 20.04, Debian 11, RHEL 9 (2.34) and later
BUILD_PACKAGES = ("gcc", "make", "libc6-dev", "libssl-dev", "zlib1g-dev", "libffi-dev", "libbz2-dev",
                  "liblzma-dev", "libexpat1-dev", "uuid-dev", "binutils", "ca-certificates", "xz-utils")
# What the proxy and pip need of the standard library's C modules: a build missing one fails.
PYTHON_NEEDED_MODULES = ("ssl", "ctypes", "zlib", "lzma", "bz2", "pyexpat", "_uuid", "_json", "_socket", "select")
PYTHON_SOURCE_PACKAGE = "python3.11"  # Debian 12's, with Debian's security fixes
PYTHON_SOURCE_SUITE = "bookworm"
# Debian's patches that fix upstream (security fixes and backports), by name; the rest change Debian's layout.
PYTHON_FIX_PATCH = re.compile(r"^(CVE-|[0-9]{4}-3\.11-|relfile|shutdown-deadlock|frame_dealloc)")
PYTHON_PREFIX = "/opt/rp-python"
PYINSTALLER = "pyinstaller==6.22.3"
# The entry of the one executable: the command its name says (runtimeproxyctl is a link to it).
ENTRY = f"""import os, sys
if os.path.basename(sys.argv[0]) == {CTL!r}:
    from runtimeproxy.admin.ctl import main
else:
    from runtimeproxy.cli import main
raise SystemExit(main())
"""
PYTHON_BUILD_TIMEOUT_SECONDS = 3600


class ReleaseError(RuntimeError):
    pass


def python_source(cache: Path = ROOTS_CACHE / "python-source") -> Path:
    """Debian 12's python3.11 source: upstream's tarball with Debian's security and bug-fix patches applied
    (not its file-layout patches, which are for Debian's own build and install)."""
    unpacked = cache / "unpacked"
    if (unpacked / "configure").is_file():
        return unpacked
    download = cache / "download"
    apt = cache / "apt"
    for directory in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", download):
        directory.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb-src {debian_mirror()} {PYTHON_SOURCE_SUITE} main\n")
    options = [f"-oDir::Etc::SourceList={apt / 'sources.list'}", "-oDir::Etc::SourceParts=/nonexistent",
               f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}", "-qq"]
    _run(["apt-get", *options, "update"])
    _run(["apt-get", *options, "source", "--download-only", PYTHON_SOURCE_PACKAGE], cwd=download)
    (orig,) = download.glob("*.orig.tar.*")
    (debian,) = download.glob("*.debian.tar.*")
    work = cache / "unpacking"
    shutil.rmtree(work, ignore_errors=True)
    for archive in (orig, debian):
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
    (source,) = [path for path in work.iterdir() if path.is_dir() and path.name != "debian"]
    patches = work / "debian" / "patches"
    for name in (patches / "series").read_text().split():
        if PYTHON_FIX_PATCH.match(name):
            _run(["patch", "-p1", "-s", "--forward", "-i", str(patches / name)], cwd=source)
    shutil.rmtree(unpacked, ignore_errors=True)
    source.rename(unpacked)
    shutil.rmtree(work)
    return unpacked


# Debian's backported expat fixes make pyexpat include the interpreter's internal headers, which only a module
# built as a core module may: Debian builds it into the interpreter, here it is a shared module built so.
PYTHON_SETUP_LOCAL = "*shared*\npyexpat pyexpat.c -DPy_BUILD_CORE_MODULE -lexpat\n"


def python_build_script() -> str:
    return (f"set -e; cd /build/python; ./configure -q --prefix={PYTHON_PREFIX} --enable-shared "
            f"--with-system-expat LDFLAGS=-Wl,-rpath,{PYTHON_PREFIX}/lib >/dev/null; "
            f"make -s -j{os.cpu_count() or 2} >/dev/null 2>&1; make -s install >/dev/null; "
            f"{PYTHON_PREFIX}/bin/python3 -c 'import {', '.join(PYTHON_NEEDED_MODULES)}'")


def python_tarball() -> Path:
    """A Python 3.11 with a shared libpython built in the Debian 11 root, as a tarball of PYTHON_PREFIX."""
    builder = make_root(BUILD_SUITE, BUILD_PACKAGES)
    source = python_source()
    recipe = " ".join([builder.name, *sorted(os.listdir(source.parent / "download")), PYTHON_FIX_PATCH.pattern,
                       PYTHON_SETUP_LOCAL, python_build_script()])
    tarball = ROOTS_CACHE / f"rp-python-{BUILD_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}.tar"
    if tarball.exists():
        return tarball
    with tempfile.TemporaryDirectory(prefix="rp-python-build-") as work:
        root = unpack(builder, Path(work) / "root")
        shutil.copytree(source, root / "build" / "python", symlinks=True)
        (root / "build" / "python" / "Modules" / "Setup.local").write_text(PYTHON_SETUP_LOCAL)
        with mounted(root):
            built = chroot_run(root, ["sh", "-c", python_build_script()], timeout=PYTHON_BUILD_TIMEOUT_SECONDS)
        if built.returncode != 0:
            raise ReleaseError(f"building Python in the {BUILD_SUITE} root failed: {built.stderr[-3000:]}")
        partial = tarball.with_suffix(".partial")
        _run(["tar", "-C", str(root), "-cf", str(partial), PYTHON_PREFIX.lstrip("/")])
        partial.replace(tarball)
    return tarball


def build_bundle(wheel: Path, out: Path) -> Path:
    """The onedir bundle of `wheel` in out/<PROXY> (the executable, the runtimeproxyctl link, _internal)."""
    builder = make_root(BUILD_SUITE, BUILD_PACKAGES)
    python = python_tarball()
    with tempfile.TemporaryDirectory(prefix="rp-release-") as work:
        root = unpack(builder, Path(work) / "root")
        _run(["tar", "-C", str(root), "-xf", str(python)])
        build = root / "build"
        build.mkdir()
        shutil.copy2(wheel, build / wheel.name)
        (build / f"{PROXY}.py").write_text(ENTRY)
        script = " && ".join([
            "set -e", f"{PYTHON_PREFIX}/bin/python3 -m venv /build/venv",
            f"/build/venv/bin/pip install -q --disable-pip-version-check /build/{wheel.name} '{PYINSTALLER}'",
            "cd /build",
            # The generated protobuf modules are collected whole: reflection serves every descriptor they
            # register. The lab (test harness) and tkinter are never imported at run time.
            f"/build/venv/bin/pyinstaller --log-level WARN --noconfirm --onedir --strip --name {PROXY} "
            "--distpath /build/dist --workpath /build/work --specpath /build/spec "
            "--collect-submodules runtimeproxy.pb --collect-submodules runtimeproxy.admin "
            "--hidden-import grpc_health.v1.health --hidden-import grpc_reflection.v1alpha.reflection "
            "--hidden-import google.protobuf.internal.builder "
            "--exclude-module rplab --exclude-module tkinter --exclude-module pytest "
            f"/build/{PROXY}.py",
        ])
        with mounted(root):
            frozen = chroot_run(root, ["sh", "-c", script], timeout=1800)
        if frozen.returncode != 0:
            raise ReleaseError(f"freezing in the {BUILD_SUITE} root failed: {frozen.stdout[-2000:]}"
                               f"{frozen.stderr[-3000:]}")
        bundle = out / PROXY
        shutil.rmtree(bundle, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(build / "dist" / PROXY, bundle, symlinks=True)
    (bundle / CTL).symlink_to(PROXY)
    return bundle


def release_tarball(bundle: Path, version: str, out: Path) -> Path:
    """out/koord-runtime-proxy_<version>_linux_<arch>.tar.gz: the bundle as bin/ of the install directory."""
    tarball = out / f"{PROXY}_{version}_linux_{platform.machine()}.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(bundle, arcname=f"{PROXY}/bin")
    return tarball


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]  # runtimeproxy-<version>-py3-none-any.whl


def built_wheel(out: Path) -> Path:
    """The wheel of this checkout, built into `out`."""
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", str(out),
          str(CHECKOUT)])
    (wheel,) = out.glob("runtimeproxy-*.whl")
    return wheel


def _run(argv: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise ReleaseError(f"{' '.join(argv)} exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.release", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="the wheel to freeze (default: built from this checkout)")
    parser.add_argument("--out", type=Path, default=CHECKOUT / "dist")
    parser.add_argument("--packages", action="store_true", help="also build the .deb and .rpm (rplab.nodepackages)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    try:
        wheel = args.wheel.resolve() if args.wheel else built_wheel(out / "wheel")
        bundle = build_bundle(wheel, out)
        print(f"{bundle} (runs on glibc >= 2.31)")
        print(release_tarball(bundle, wheel_version(wheel), out))
        if args.packages:
            from rplab.nodepackages import build_deb, build_rpm
            print(build_deb(bundle, wheel_version(wheel), out))
            print(build_rpm(bundle, wheel_version(wheel), out))
    except (ReleaseError, RootError) as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
