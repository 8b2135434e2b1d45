"""The compiled peers (bench/go: benchgo client, relay, backend, dockerclient, httpproxy): building them and
running the clients.

benchgo is built with Debian's Go toolchain in GOPATH mode against Debian's grpc-go sources
(golang-go, golang-google-grpc-dev): offline, no module download. The binary is cached per
source digest under ~/.cache/runtimeproxy/benchgo, so it is rebuilt only when bench/go changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GO_SOURCES = Path(__file__).resolve().parent / "go"
CACHE = Path.home() / ".cache" / "runtimeproxy" / "benchgo"
DEBIAN_GOPATH = Path("/usr/share/gocode")
INSTALL_HINT = "apt-get install -y golang-go golang-google-grpc-dev golang-google-protobuf-dev"
CLIENT_TIMEOUT_SECONDS = 600
# Every kubelet CRI call carries a deadline (--runtime-request-timeout, 2 minutes by default), and a
# relay that honours deadlines pays for it: so every call of the client carries one too.
KUBELET_TIMEOUT_SECONDS = 120.0


class GoPeerError(RuntimeError):
    pass


def source_digest(directory: Path = GO_SOURCES) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.go")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_benchgo(cache: Path = CACHE) -> Path:
    """The benchgo binary for the current sources, built on first use."""
    go = shutil.which("go")
    if go is None or not (DEBIAN_GOPATH / "src/google.golang.org/grpc").is_dir():
        raise GoPeerError(f"the compiled peers need Debian's Go and grpc-go: {INSTALL_HINT}")
    binary = cache / source_digest() / "benchgo"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(DEBIAN_GOPATH), "GOFLAGS": "",
           "GOCACHE": str(cache / "gocache"), "CGO_ENABLED": "0"}
    partial = binary.with_suffix(".partial")
    built = subprocess.run([go, "build", "-o", str(partial), "."], cwd=GO_SOURCES, env=env,
                           capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        raise GoPeerError(f"go build failed: {built.stderr.strip()[-2000:]}")
    partial.replace(binary)
    return binary


def run_client(binary: Path, socket: Path, method: str, request_file: Path | None, *, concurrency: int = 1,
               seconds: float | None = None, count: int | None = None, warmup: int = 0,
               timeout: float = KUBELET_TIMEOUT_SECONDS,
               metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One benchgo client run: its JSON result (calls, errors, calls_per_s, p50_us, p99_us, ...)."""
    argv = [str(binary), "client", "-socket", str(socket), "-method", method, "-timeout", str(timeout)]
    if request_file is not None:
        argv += ["-request", str(request_file)]
    for key, value in (metadata or {}).items():
        argv += ["-metadata", f"{key}={value}"]
    return _run(argv, socket, concurrency, seconds, count, warmup)


def run_docker_client(binary: Path, socket: Path, op: str, ids_file: Path | None, *, concurrency: int = 1,
                      seconds: float | None = None, count: int | None = None, warmup: int = 0) -> dict[str, Any]:
    """One benchgo dockerclient run (op: list, inspect or exec), with the same JSON result as run_client."""
    argv = [str(binary), "dockerclient", "-socket", str(socket), "-op", op]
    if ids_file is not None:
        argv += ["-ids", str(ids_file)]
    return _run(argv, socket, concurrency, seconds, count, warmup)


def _run(argv: list[str], socket: Path, concurrency: int, seconds: float | None, count: int | None,
         warmup: int) -> dict[str, Any]:
    argv = [*argv, "-concurrency", str(concurrency), "-warmup", str(warmup)]
    argv += ["-count", str(count)] if count else ["-seconds", str(seconds or 1.0)]
    finished = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_SECONDS)
    if finished.returncode != 0:
        raise GoPeerError(f"benchgo {argv[1]} on {socket.name}: {finished.stderr.strip()[-500:]}")
    return json.loads(finished.stdout)
