"""The compiled peers of the tests, lab and bench: the real Go clients and plugins the proxy is driven with.

Every peer is a main package (or, for a runner of another project's specs, a test package) under ``peers/``, the
project's one Go module. Third-party code comes from the Go module proxy at the versions ``peers/go.mod`` pins and
``peers/go.sum`` hashes; nothing third-party is kept in the repository. Binaries are built with the machine's Go
toolchain on first use and cached per source digest under ``~/.cache/runtimeproxy/peers``, so a second run builds
nothing. ``python -m rplab.peers`` builds them all (scripts/setup.sh runs it).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MODULE = Path(__file__).resolve().parent.parent / "peers"
CACHE = Path(os.environ.get("RUNTIMEPROXY_PEERS_CACHE", Path.home() / ".cache" / "runtimeproxy" / "peers"))
# Where the machine's Go is when it is not on PATH (the toolchain tarball's usual place).
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))
BUILD_TIMEOUT_SECONDS = 1800


class PeerBuildError(RuntimeError):
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


# Every peer, by the name its binary gets; python -m rplab.peers builds them all.
PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    Peer("criapidesc", "./criapidesc"),
    # The project's NRI plugin on NRI's real stub: the newest stub, and v0.8 (containerd 1.7.26 to 2.1's NRI).
    Peer("nriplugin-v0.12", "./nriplugin"),
    Peer("nriplugin-v0.8", "./nriplugin", modfile="nri-v0.8.mod", tags=("nri_v08",)),
    Peer("crilifecycle", "./crilifecycle"),
)}


def go_toolchain() -> Path:
    found = shutil.which("go")
    if found:
        return Path(found)
    for candidate in GO_FALLBACKS:
        if candidate.is_file():
            return candidate
    raise PeerBuildError("the compiled peers need Go (1.21 or later fetches the toolchain peers/go.mod names): "
                         "put it on PATH")


def source_digest(module: Path = MODULE) -> str:
    """A digest of everything a build reads from the module: Go sources, go.mod files and their sums."""
    digest = hashlib.sha256()
    for path in sorted(module.rglob("*")):
        if path.is_file() and (path.suffix in {".go", ".mod", ".sum"}):
            digest.update(str(path.relative_to(module)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_environment() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=readonly"}


def build_arguments(peer: Peer, output: Path) -> list[str]:
    """The go command's arguments that build `peer` into `output` (run in peers/)."""
    arguments = ["test", "-c"] if peer.test_binary else ["build"]
    if peer.modfile:
        arguments.append(f"-modfile={peer.modfile}")
    if peer.tags:
        arguments.append(f"-tags={','.join(peer.tags)}")
    return [*arguments, "-o", str(output), peer.package]


def peer_binary(name: str, cache: Path = CACHE) -> Path:
    """The binary of peer ``name`` for the current sources, built on first use."""
    peer = PEERS[name]
    binary = cache / source_digest() / name
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".{name}.partial")
    built = subprocess.run([str(go_toolchain()), *build_arguments(peer, partial)], cwd=MODULE,
                           env=build_environment(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
    if built.returncode != 0:
        raise PeerBuildError(f"building peer {name} failed: {built.stderr.strip()[-3000:]}")
    partial.replace(binary)
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rplab.peers", description=__doc__)
    parser.add_argument("names", nargs="*", help="peers to build (all when none is named)")
    args = parser.parse_args(argv)
    for name in args.names or sorted(PEERS):
        print(f"{name}: {peer_binary(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
