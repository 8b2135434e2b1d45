"""The compiled peers of the tests, lab and bench: the real Go clients and plugins the proxy is driven with.

Every peer is a main package (or, for a runner of another project's specs, a test package) under ``peers/``, the
project's one Go module. Third-party code comes from the Go module proxy at the versions ``peers/go.mod`` pins and
``peers/go.sum`` hashes; nothing third-party is kept in the repository. Binaries are built with the machine's Go
toolchain on first use and cached per source digest under ``~/.cache/runtimeproxy/peers``, so a second run builds
nothing. ``python -m rplab.peers`` builds them all (scripts/setup.sh runs it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rplab.consumer_modules import MODULES
from rplab.gotoolchain import BUILD_TIMEOUT_SECONDS, GoToolchainError, go_toolchain
from runtimeproxy.usage import OneLineParser

MODULE = Path(__file__).resolve().parent.parent / "peers"
CACHE = Path(os.environ.get("RUNTIMEPROXY_PEERS_CACHE", Path.home() / ".cache" / "runtimeproxy" / "peers"))


class PeerBuildError(GoToolchainError):
    pass


@dataclass(frozen=True)
class Peer:
    """One compiled peer: its package under peers/, built as a program or (``test_binary``) with ``go test -c``;
    ``modfile`` names an alternate go.mod in peers/ for a peer pinned to other versions of a module, ``tags`` the
    build tags that pick the package's files for those versions."""

    name: str
    package: str
    test_binary: bool = False
    modfile: str | None = None
    tags: tuple[str, ...] = ()
    # (module, its string variable) set at link time to the version go.mod requires of that module, as the
    # module's own release build does (cri-tools prints it in `crictl --version` and critest's banner).
    version_stamp: tuple[str, str] | None = None
    # A consumer module of rplab.consumer_modules (peers/<name>/, its own go.mod) instead of peers/ itself.
    consumer: str | None = None
    # Built with cgo: koordlet (its perf counters link libpfm4: Debian's libpfm4-dev), and koord-runtime-proxy beside
    # it: CGO_ENABLED picks other files of the standard library's net package, so a program built with the other
    # setting shares no compiled package above net with it; the others are static.
    cgo: bool = False
    # A real counterpart (a Kubernetes or koordinator program: minutes each to build, cold): left out of a plain
    # `python -m rplab.peers` (what setup runs, so the lab never waits for them); built on first use, or ahead by
    # `python -m rplab.peers --counterparts` (the test command, in the background).
    counterpart: bool = False
    # A counterpart only the cgroup v2 guest's suite runs (the newest kubelet): built last, while the host's
    # counterpart suites run instead of before them.
    guest_only: bool = False

    @property
    def module(self) -> Path:
        return MODULE / self.consumer if self.consumer else MODULE


CRI_TOOLS_VERSION = ("sigs.k8s.io/cri-tools", "pkg/version.Version")
# Every peer, by the name its binary gets; python -m rplab.peers builds all but the counterparts.
PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    Peer("criapidesc", "./criapidesc"),
    # The project's NRI plugin on NRI's real stub: the newest stub, and v0.8 (containerd 1.7.26 to 2.1's NRI).
    Peer("nriplugin-v0.12", "./nriplugin"),
    Peer("nriplugin-v0.8", "./nriplugin", modfile="nri-v0.8.mod", tags=("nri_v08",)),
    Peer("crilifecycle", "./crilifecycle"),
    # cri-tools' programs, built from the module go.mod requires (its `tool` lines keep them in go.sum).
    Peer("crictl", "sigs.k8s.io/cri-tools/cmd/crictl", version_stamp=CRI_TOOLS_VERSION),
    Peer("ginkgo", "github.com/onsi/ginkgo/v2/ginkgo"),  # critest -parallel N runs its processes
    Peer("critest", "./critest", test_binary=True, version_stamp=CRI_TOOLS_VERSION),  # critest's specs, our runner
    Peer("benchgo", "./benchgo"),  # the bench's load client, relays and instant backend
    # The real counterparts, each from its consumer module (rplab.consumer_modules): the kubelet process, and
    # koordinator's own runtime proxy, the program this project replaces.
    Peer("kubelet", "k8s.io/kubernetes/cmd/kubelet", consumer="kubelet", counterpart=True),
    Peer("kubelet-newest", "k8s.io/kubernetes/cmd/kubelet", consumer="kubelet-newest", counterpart=True,
         guest_only=True),
    Peer("koord-runtime-proxy", "github.com/koordinator-sh/koordinator/cmd/koord-runtime-proxy",
         consumer="koordinator", cgo=True, counterpart=True),
    # The plugin the proxy exists for, and the small cluster it needs (rplab.cluster): an API server and its etcd.
    Peer("koordlet", "github.com/koordinator-sh/koordinator/cmd/koordlet", consumer="koordlet", cgo=True, counterpart=True),
    Peer("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", consumer="kube-apiserver", counterpart=True),
    Peer("etcd", ".", consumer="etcd", counterpart=True),
)}


def source_digest(module: Path = MODULE) -> str:
    """A digest of everything a build reads from the module: Go sources, go.mod files and their sums (not those of
    a consumer module nested in it, which is a module of its own)."""
    nested = [path.parent for path in module.glob("*/go.mod")]
    digest = hashlib.sha256()
    for path in sorted(module.rglob("*")):
        if any(path.is_relative_to(inner) for inner in nested):
            continue
        if path.is_file() and (path.suffix in {".go", ".mod", ".sum"}):
            digest.update(str(path.relative_to(module)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_environment(peer: Peer) -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "1" if peer.cgo else "0", "GOFLAGS": "-buildvcs=false -mod=readonly"}


# Test programs, never debugged here: no symbol table or DWARF linked in (crictl 40 -> 28 MB; less for a machine
# with no build cache to link and write). The compiler's flags stay the default, so what a peer compiles (the
# standard library first) is shared in the build cache with every other build (containerd's, in set-up).
NO_DEBUG_LINK = ("-s", "-w")


def build_arguments(peer: Peer, output: Path) -> list[str]:
    """The go command's arguments that build `peer` into `output` (run in peers/)."""
    arguments = ["test", "-c"] if peer.test_binary else ["build"]
    if peer.modfile:
        arguments.append(f"-modfile={peer.modfile}")
    if peer.tags:
        arguments.append(f"-tags={','.join(peer.tags)}")
    link = list(NO_DEBUG_LINK)
    if peer.version_stamp:
        module_path, variable = peer.version_stamp
        link.append(f"-X {module_path}/{variable}={required_version(module_path)}")
    if peer.consumer:
        link += [f"-X {name}={value}" for name, value in MODULES[peer.consumer].version_variables]
    return [*arguments, f"-ldflags={' '.join(link)}", "-o", str(output), peer.package]


def required_version(module_path: str, module: Path = MODULE) -> str:
    """The version ``module``'s go.mod requires of ``module_path``."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module_path)} (v\S+)", (module / "go.mod").read_text(), re.M)
    if found is None:
        raise PeerBuildError(f"{module}/go.mod requires no {module_path}")
    return found.group(1)


def cached_binary(name: str, cache: Path = CACHE) -> Path:
    """Where peer ``name``'s binary for the current sources is (or will be, once built)."""
    return cache / source_digest(PEERS[name].module) / name


def is_built(name: str, cache: Path = CACHE) -> bool:
    return cached_binary(name, cache).exists()


def peer_binary(name: str, cache: Path = CACHE) -> Path:
    """The binary of peer ``name`` for the current sources, built on first use."""
    peer = PEERS[name]
    binary = cached_binary(name, cache)
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    # One build of a binary at a time: a test that needs it waits for a build already under way (the test
    # command's background build of the counterparts, another process of the suite) instead of starting another.
    with open(binary.with_name(f".{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            _build(peer, binary)
    return binary


def _build(peer: Peer, binary: Path) -> None:
    name = peer.name
    partial = binary.with_name(f".{name}.partial")
    try:
        go = go_toolchain()
    except GoToolchainError as error:
        raise PeerBuildError(str(error)) from error
    built = subprocess.run([str(go), *build_arguments(peer, partial)], cwd=peer.module,
                           env=build_environment(peer), capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
    if built.returncode != 0:
        raise PeerBuildError(f"building peer {name} failed: {built.stderr.strip()[-3000:]}")
    partial.replace(binary)


def counterparts_in_order(host_only: bool = False) -> list[str]:
    """The counterparts by name, the guest's last (or left out)."""
    chosen = [peer for peer in PEERS.values() if peer.counterpart and not (host_only and peer.guest_only)]
    return [peer.name for peer in sorted(chosen, key=lambda peer: (peer.guest_only, peer.name))]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.peers", description=__doc__)
    parser.add_argument("names", nargs="*", help="peers to build (when none is named: all but the counterparts)")
    parser.add_argument("--counterparts", action="store_true",
                        help="the real counterparts (the kubelet, koord-runtime-proxy, koordlet, kube-apiserver, etcd; "
                             "the cgroup v2 guest's newest kubelet last)")
    parser.add_argument("--host-only", action="store_true",
                        help="with --counterparts: only those the host's suites run (waits for a build under way)")
    args = parser.parse_args(argv)
    if args.names:
        chosen = args.names
    elif args.counterparts:
        chosen = counterparts_in_order(args.host_only)
    else:
        chosen = sorted(name for name, peer in PEERS.items() if not peer.counterpart)
    try:
        for name in chosen:
            cached, started = is_built(name), time.monotonic()
            binary = peer_binary(name)
            # Built here, or by another process this one waited for (the test command's background build).
            took = "cached" if cached else f"ready after {time.monotonic() - started:.0f} s"
            print(f"{name}: {binary} ({took})", flush=True)
    except PeerBuildError as error:
        print(f"rplab.peers: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
