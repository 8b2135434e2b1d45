"""Debian roots of other releases, for building and trying what nodes run: a Debian 11 root (glibc 2.31) to build
the release bundle in and run it on, Debian 12 and 13 roots to install the package and the wheel in.

Each root is made once with `debootstrap --variant=minbase` from the Debian mirror this machine's apt already
uses, kept as a tarball under ~/.cache/runtimeproxy/roots (name, suite and extra packages in its key), and
unpacked afresh wherever a build or test wants one, so nothing a test does survives into the next. A root never
touches the machine's own packages or apt sources.

    python -m rplab.roots make bullseye [--packages gcc,make]   # prints the tarball's path
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from runtimeproxy.usage import OneLineParser

CACHE = Path(os.environ.get("RUNTIMEPROXY_ROOTS_CACHE", Path.home() / ".cache" / "runtimeproxy" / "roots"))
APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
APT_SOURCES_LIST = Path("/etc/apt/sources.list")
DEBOOTSTRAP_TIMEOUT_SECONDS = 1800
# The glibc of each suite, for the messages and docs.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_LOCAL_CAS = Path("/usr/local/share/ca-certificates")
GLIBC = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41"}


class RootError(RuntimeError):
    pass


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 sources or a one-line sources.list)."""
    if APT_SOURCES.is_file():
        for line in APT_SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    if APT_SOURCES_LIST.is_file():
        for line in APT_SOURCES_LIST.read_text().splitlines():
            fields = line.split()
            if fields[:1] == ["deb"] and "security" not in line:
                return next(field for field in fields[1:] if "://" in field)
    raise RootError("no Debian mirror found in the machine's apt sources")


def tarball_path(suite: str, packages: Sequence[str] = ()) -> Path:
    key = hashlib.sha256(" ".join([suite, *sorted(packages)]).encode()).hexdigest()[:12]
    return CACHE / f"{suite}-{key}.tar"


def make_root(suite: str, packages: Sequence[str] = ()) -> Path:
    """The tarball of a minbase root of `suite` with `packages`, made on first use."""
    tarball = tarball_path(suite, packages)
    if tarball.exists():
        return tarball
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise RootError("debootstrap is not installed (apt-get install debootstrap; scripts/setup.sh does)")
    CACHE.mkdir(parents=True, exist_ok=True)
    work = tarball.with_suffix(".partial")
    shutil.rmtree(work, ignore_errors=True)
    argv = [debootstrap, "--variant=minbase"]
    if packages:
        argv.append("--include=" + ",".join(packages))
    argv += [suite, str(work), debian_mirror()]
    made = subprocess.run(argv, capture_output=True, text=True, timeout=DEBOOTSTRAP_TIMEOUT_SECONDS)
    if made.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RootError(f"debootstrap {suite} failed: {(made.stdout + made.stderr)[-3000:]}")
    partial = tarball.with_suffix(".tar.partial")
    subprocess.run(["tar", "-C", str(work), "-cf", str(partial), "."], check=True)
    shutil.rmtree(work)
    partial.replace(tarball)
    return tarball


def unpack(tarball: Path, destination: Path) -> Path:
    """A fresh copy of the root in `destination` (emptied first), ready for chroot: the host's DNS and the
    certificate authorities the host trusts (a network that inspects TLS has its own), so pip and apt inside
    reach what they reach from the host."""
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(destination), "-xf", str(tarball)], check=True)
    shutil.copyfile("/etc/resolv.conf", destination / "etc" / "resolv.conf")
    # The bundle for now, and the host's own authorities for when the root's ca-certificates rebuilds it.
    for source in (HOST_CA_BUNDLE, HOST_LOCAL_CAS):
        if source.exists():
            target = destination / source.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, target)
    return destination


@contextmanager
def mounted(root: Path, *binds: tuple[Path, Path]) -> Iterator[Path]:
    """`root` with /proc, /dev and /sys mounted and each (host path, path in the root) bound, until the block
    ends; everything is unmounted again whatever happens inside."""
    mounts: list[Path] = []
    try:
        for kind, target in (("proc", "proc"), ("sysfs", "sys")):
            _mount(["-t", kind, kind], root / target, mounts)
        _mount(["--bind", "/dev"], root / "dev", mounts)
        for source, inside in binds:
            target = root / str(inside).lstrip("/")
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            _mount(["--bind", str(source)], target, mounts)
        yield root
    finally:
        for target in reversed(mounts):
            subprocess.run(["umount", "--lazy", str(target)], check=False)


def _mount(options: list[str], target: Path, mounts: list[Path]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *options, str(target)], check=True)
    mounts.append(target)


def chroot_run(root: Path, argv: Sequence[str], *, timeout: float = 600,
               environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` run inside `root` with a clean environment (PATH of the root's own)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8", "PIP_CERT": str(HOST_CA_BUNDLE), "SSL_CERT_FILE": str(HOST_CA_BUNDLE),
           **(environment or {})}
    return subprocess.run(["chroot", str(root), *argv], env=env, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.roots", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make", help="make (or find) a root's tarball and print its path")
    make.add_argument("suite", choices=sorted(GLIBC))
    make.add_argument("--packages", default="", help="comma-separated Debian packages to include")
    args = parser.parse_args(argv)
    packages = [name for name in args.packages.split(",") if name]
    print(make_root(args.suite, packages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
