"""The bench's compiled peer (peers/benchgo: client, relay, backend, dockerclient, httpproxy): its binary and
running the clients.

benchgo is a package of the project's Go module (peers/), built and cached by rplab.peers like every other peer:
grpc-go at the version peers/go.mod pins, rebuilt only when the module's sources change.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rplab.peers import peer_binary

CLIENT_TIMEOUT_SECONDS = 600
# Every kubelet CRI call carries a deadline (--runtime-request-timeout, 2 minutes by default), and a
# relay that honours deadlines pays for it: so every call of the client carries one too.
KUBELET_TIMEOUT_SECONDS = 120.0


class GoPeerError(RuntimeError):
    pass


def build_benchgo() -> Path:
    """The benchgo binary for the current sources, built on first use (rplab.peers.PeerBuildError if it fails)."""
    return peer_binary("benchgo")


def run_client(binary: Path, socket: Path, method: str, request_file: Path | None, *, concurrency: int = 1,
               seconds: float | None = None, count: int | None = None, warmup: int = 0,
               timeout: float = KUBELET_TIMEOUT_SECONDS, interval: float = 0.0,
               metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One benchgo client run: its JSON result (calls, errors, calls_per_s, p50_us, p99_us, ...).
    `interval`: seconds each goroutine pauses after a call (sparse calls, as a kubelet makes them)."""
    argv = [str(binary), "client", "-socket", str(socket), "-method", method, "-timeout", str(timeout)]
    if interval:
        argv += ["-interval", str(interval)]
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
