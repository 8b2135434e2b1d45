"""The runtime matrix: which containerd or dockerd the lab and the e2e tests run, by name.

``RUNTIMES`` maps a name (``containerd-2.1``, ``dockerd-28``, ...) to how to get that runtime and where its
binaries are. Three sources:

* the machine's own (Debian 12's ``containerd`` 1.6.20 and ``docker.io`` 20.10.24, installed by scripts/setup.sh);
* other Debian releases' packages, fetched with ``apt-get download`` through a PRIVATE apt configuration (its own
  sources list, lists and cache under the cache directory; the machine's apt sources stay as they were) and
  unpacked with ``dpkg -x`` into a directory per package version; never installed, as they would pull a newer libc;
* containerd's own module, built with ``go install`` at a pinned version into a GOBIN per version.

Every runtime runs with Debian 12's runc (newer Debian runc needs a newer glibc). A runtime's ``environment()``
puts its binaries first on PATH: containerd finds its shim there, dockerd its containerd.

``RUNTIMEPROXY_RUNTIME`` names the containerd and ``RUNTIMEPROXY_DOCKERD`` the dockerd that ``ContainerdInstance``
and ``DockerdInstance`` start when not told otherwise (default: the machine's own). A runtime not fetched yet is
fetched on first use; ``python -m rplab.runtimes fetch NAME...`` does it ahead (``list`` shows the table).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rplab.gotoolchain import go_toolchain
from runtimeproxy.usage import OneLineParser

CACHE = Path(os.environ.get("RUNTIMEPROXY_RUNTIMES_CACHE", Path.home() / ".cache" / "runtimeproxy" / "runtimes"))
CONTAINERD_ENV = "RUNTIMEPROXY_RUNTIME"
DOCKERD_ENV = "RUNTIMEPROXY_DOCKERD"
# The Debian archive the private apt configuration reads; by default the one the machine's apt already uses.
MIRROR_ENV = "RUNTIMEPROXY_DEBIAN_MIRROR"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
DEBIAN_SUITES = ("trixie", "sid")  # the package sets the table takes runtimes from
APT_TIMEOUT_SECONDS = 600
GO_INSTALL_TIMEOUT_SECONDS = 1800
SYSTEM_BIN_DIRS = (Path("/usr/sbin"), Path("/usr/bin"))  # Debian's, before /usr/local/bin's docker CLI 28.2


class RuntimeFetchError(RuntimeError):
    pass


@dataclass(frozen=True)
class DebianPackage:
    """One package of another Debian release, pinned to its exact version."""

    name: str
    version: str

    def unpacked(self, cache: Path) -> Path:
        return cache / "deb" / f"{self.name}_{self.version}"


@dataclass(frozen=True)
class GoInstall:
    """Commands of one Go module, built with ``go install MODULE/CMD@VERSION`` (CGO off: no btrfs)."""

    module: str
    version: str
    commands: tuple[str, ...]

    def gobin(self, cache: Path) -> Path:
        return cache / "go" / f"{self.module.rsplit('/', 2)[-2]}-{self.version}" / "bin"


@dataclass(frozen=True)
class Runtime:
    """A containerd or a dockerd of a given version: where it comes from and where its binaries are."""

    name: str
    kind: str  # "containerd" or "dockerd"
    version: str  # upstream version, as its Version call reports it
    packages: tuple[DebianPackage, ...] = ()
    go: GoInstall | None = None
    note: str = ""

    @property
    def system(self) -> bool:
        return not self.packages and self.go is None

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def source(self) -> str:
        if self.go is not None:
            return f"go install {self.go.module}/cmd/...@{self.go.version}"
        if self.packages:
            return "Debian " + ", ".join(f"{p.name} {p.version}" for p in self.packages)
        return "this machine (Debian 12 package)"

    def bin_dirs(self, cache: Path = CACHE) -> list[Path]:
        """Where this runtime's own binaries are, searched first."""
        if self.go is not None:
            return [self.go.gobin(cache)]
        return [package.unpacked(cache) / sub for package in self.packages for sub in ("usr/sbin", "usr/bin")
                if (package.unpacked(cache) / sub).is_dir()]

    def roots(self, cache: Path = CACHE) -> list[Path]:
        """The directories a fetch fills: one per Debian package, or the GOBIN."""
        return [self.go.gobin(cache)] if self.go is not None else [p.unpacked(cache) for p in self.packages]

    def fetched(self, cache: Path = CACHE) -> bool:
        return all(directory.is_dir() for directory in self.roots(cache))

    def binary(self, name: str, cache: Path = CACHE) -> Path:
        """The runtime's own ``name`` (fetched first if needed); for the machine's own, Debian's on PATH."""
        self.fetch(cache)
        for directory in [*self.bin_dirs(cache), *SYSTEM_BIN_DIRS]:
            candidate = directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(name)
        if found is None:
            raise RuntimeFetchError(f"{name} of {self.name} not found ({self.source})")
        return Path(found)

    def environment(self, cache: Path = CACHE, first: tuple[Path, ...] = ()) -> dict[str, str]:
        """The process environment of this runtime's daemons: ``first``, then its binaries, then PATH."""
        dirs = [*first, *self.bin_dirs(cache)]
        path = os.pathsep.join([*map(str, dirs), os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")])
        return {**os.environ, "PATH": path}

    def fetch(self, cache: Path = CACHE) -> None:
        if self.fetched(cache):
            return
        if self.go is not None:
            _go_install(self.go, cache)
        missing = [package for package in self.packages if not package.unpacked(cache).is_dir()]
        if missing:
            _fetch_debian(missing, cache)


def _containerd_from_go(version: str) -> GoInstall:
    return GoInstall("github.com/containerd/containerd/v2", f"v{version}",
                     ("cmd/containerd", "cmd/containerd-shim-runc-v2", "cmd/ctr"))


CONTAINERD_TRIXIE = DebianPackage("containerd", "1.7.24~ds1-6+deb13u1")
CONTAINERD_SID = DebianPackage("containerd", "2.1.9+ds1-5")
NEWEST_CONTAINERD = "2.4.2"  # the newest 2.x the Go module proxy serves (2026-11); 2.2.1 and later install

RUNTIMES: dict[str, Runtime] = {runtime.name: runtime for runtime in (
    Runtime("containerd-1.6", "containerd", "1.6.20", note="Debian 12; CRI v1 and v1alpha2"),
    Runtime("containerd-1.7", "containerd", "1.7.24", (CONTAINERD_TRIXIE,), note="Debian 13"),
    Runtime("containerd-2.1", "containerd", "2.1.9", (CONTAINERD_SID,), note="Debian unstable"),
    Runtime(f"containerd-{NEWEST_CONTAINERD.rsplit('.', 1)[0]}", "containerd", NEWEST_CONTAINERD,
            go=_containerd_from_go(NEWEST_CONTAINERD), note="built from source"),
    Runtime("dockerd-20.10", "dockerd", "20.10.24", note="Debian 12; API 1.41"),
    Runtime("dockerd-26", "dockerd", "26.1.5", (
        DebianPackage("docker.io", "26.1.5+dfsg1-9+deb13u1+b1"), DebianPackage("docker-cli", "26.1.5+dfsg1-9+deb13u1+b1"),
        CONTAINERD_TRIXIE), note="Debian 13, with its containerd 1.7.24"),
    Runtime("dockerd-28", "dockerd", "28.5.2", (
        DebianPackage("docker.io", "28.5.2+dfsg4-5"), DebianPackage("docker-cli", "28.5.2+dfsg4-5"),
        CONTAINERD_SID), note="Debian unstable, with its containerd 2.1.9"),
)}
DEFAULTS = {"containerd": "containerd-1.6", "dockerd": "dockerd-20.10"}
SELECTED_BY = {"containerd": CONTAINERD_ENV, "dockerd": DOCKERD_ENV}


def newest(kind: str) -> Runtime:
    """The newest runtime of a kind in the table (CI's second pass)."""
    return max((r for r in RUNTIMES.values() if r.kind == kind),
               key=lambda r: tuple(int(part) for part in r.version.split(".")))


def runtime_named(name: str, kind: str | None = None) -> Runtime:
    runtime = RUNTIMES.get(name)
    if runtime is None or (kind is not None and runtime.kind != kind):
        known = ", ".join(n for n, r in RUNTIMES.items() if kind is None or r.kind == kind)
        raise KeyError(f"unknown {kind or 'runtime'} {name!r} (known: {known})")
    return runtime


def selected(kind: str) -> Runtime:
    """The runtime of ``kind`` the environment selects (RUNTIMEPROXY_RUNTIME / RUNTIMEPROXY_DOCKERD)."""
    return runtime_named(os.environ.get(SELECTED_BY[kind]) or DEFAULTS[kind], kind)


# -- Debian packages through a private apt configuration -------------------------------------------------------

def machine_debian_mirror() -> str:
    """The URI of the Debian archive the machine's apt sources use (deb822 ``.sources`` or one-line ``.list``)."""
    configured = os.environ.get(MIRROR_ENV)
    if configured:
        return configured
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        if path.suffix not in {".list", ".sources"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        uris = re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M)
        for uri in uris:
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise RuntimeFetchError(f"no Debian archive in this machine's apt sources: set {MIRROR_ENV} to one")


class PrivateApt:
    """apt-get with its own sources list, lists, cache and preferences under ``root``: nothing of the machine's
    apt configuration is read or written but its keyring and apt.conf."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def options(self) -> list[str]:
        r = self.root
        settings = {
            "Dir::Etc::sourcelist": r / "sources.list", "Dir::Etc::sourceparts": r / "sources.list.d",
            "Dir::Etc::preferences": r / "preferences", "Dir::Etc::preferencesparts": r / "preferences.d",
            "Dir::State::Lists": r / "lists", "Dir::Cache": r / "cache",
            "APT::Sandbox::User": "root",  # the private dirs belong to root; _apt could not write them
            "Acquire::Languages": "none", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled": "false",
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled": "false",
        }
        return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]

    def prepare(self) -> None:
        for sub in ("sources.list.d", "preferences.d", "lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        mirror = machine_debian_mirror()
        (self.root / "sources.list").write_text("".join(
            f"deb [signed-by={DEBIAN_KEYRING}] {mirror} {suite} main\n" for suite in DEBIAN_SUITES))

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        argv = ["apt-get", "-q", *self.options(), *args]
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_SECONDS,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0:
            raise RuntimeFetchError(f"apt-get {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done

    def download(self, packages: list[DebianPackage], into: Path) -> None:
        """``apt-get download NAME=VERSION...``; the lists are refreshed once when a version is not in them."""
        wanted = [f"{p.name}={p.version}" for p in packages]
        self.prepare()
        try:
            self.run("download", *wanted, cwd=into)
        except RuntimeFetchError:
            self.run("update")
            try:
                self.run("download", *wanted, cwd=into)
            except RuntimeFetchError as error:
                raise RuntimeFetchError(f"{error}\n(the table pins exact Debian versions; if {', '.join(DEBIAN_SUITES)}"
                                        " moved on, update rplab/runtimes.py)") from error


def _fetch_debian(packages: list[DebianPackage], cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as temp:
        downloads = Path(temp)
        PrivateApt(cache / "apt").download(packages, downloads)
        for package in packages:
            deb = next(downloads.glob(f"{package.name}_*.deb"))
            partial = downloads / f"{package.name}.unpacked"
            subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)], check=True, timeout=300)
            target = package.unpacked(cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                partial.rename(target)


# -- go install ----------------------------------------------------------------------------------------------------

def _go_install(go: GoInstall, cache: Path) -> None:
    gobin = go.gobin(cache)
    partial = gobin.with_name("bin.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(partial), "GOFLAGS": "-buildvcs=false"}
    argv = [str(go_toolchain()), "install", *(f"{go.module}/{command}@{go.version}" for command in go.commands)]
    built = subprocess.run(argv, env=env, cwd=partial, capture_output=True, text=True,
                           timeout=GO_INSTALL_TIMEOUT_SECONDS)
    if built.returncode != 0:
        raise RuntimeFetchError(f"{' '.join(argv)} failed: {built.stderr.strip()[-3000:]}")
    partial.rename(gobin)


# -- command line ----------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.runtimes", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch runtimes into the cache (all when none is named)")
    fetch.add_argument("names", nargs="*", metavar="NAME", help=", ".join(RUNTIMES))
    sub.add_parser("list", help="the table: name, version, source, where its binaries are")
    sub.add_parser("newest", help="the newest containerd and dockerd names (CI's second pass)")
    args = parser.parse_args(argv)
    unknown = [name for name in getattr(args, "names", []) if name not in RUNTIMES]
    if unknown:
        parser.error(f"unknown runtime {', '.join(unknown)} (known: {', '.join(RUNTIMES)})")
    if args.command == "newest":
        print(newest("containerd").name, newest("dockerd").name)
        return 0
    for name in (args.names or list(RUNTIMES)) if args.command == "fetch" else RUNTIMES:
        runtime = RUNTIMES[name]
        if args.command == "fetch":
            runtime.fetch()
        where = ", ".join(map(str, runtime.roots())) or "PATH"
        state = "" if runtime.fetched() else " (not fetched)"
        print(f"{name:<16} {runtime.version:<9} {runtime.source}; binaries: {where}{state}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
