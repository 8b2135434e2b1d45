#!/usr/bin/env python3
"""runtimeproxy benchmark: the proxy beside its anchors, driven by a compiled client.

    python3 bench/bench.py [--quick] [--json PATH] [--cases small,large,kubelet,startup,docker]

Load side: `benchgo client` (bench/go, built by this script with Debian's Go; see gopeers.py):
raw bytes, one HTTP/2 connection, N goroutines. It gets about 10x the calls/s a Python client
does, so the client is never what limits a figure.

Peers, each its own process, all in one run:
  direct     the instant backend itself (`benchgo backend`; real containerd in the containerd cases,
             a private real dockerd in the Docker case)
  proxy      runtimeproxy (`python -m runtimeproxy`, this checkout)
  aio-relay  the smallest grpcio aio relay (bench/aio_relay.py): the floor for a Python relay
  go-relay   `benchgo relay`: grpc-go UnknownServiceHandler + pass-through codec, the engine
             koord-runtime-proxy forwards with
  socat      an L4 byte relay (no HTTP/2 at all): the floor of any extra hop
  go-proxy   `benchgo httpproxy`: net/http/httputil.ReverseProxy between unix sockets (101 upgrades
             included), roughly what koord-runtime-proxy's Docker mode is; Docker case only
  echo-hop   a bare Python grpc.aio server answering itself (rplab.synthetic): what one
             Python server hop costs, with no upstream call
  plugin     the proxy with a no-op plugin (bench/noop_plugin.py) on all seven hooks
  decode-all the proxy with --benchmark-decode-all (every message decoded and re-encoded: the
             rejected design), at 16 MB

Cases (--cases picks some):
  small    Version: p50/p99 at concurrency 1, calls/s at 1, 16, 64; CPU per call in each hop process
  large    ListContainers of 4, 16, 48 MB: p50, CPU per call; RSS idle, right after, settled
           (the answer's size is asked for in the request, so even the minimal relay gets it right)
  kubelet  a kubelet's steady state on a node with N pods (real containerd): each hop's CPU % of one core
  startup  pod startup (RunPodSandbox, CreateContainer, StartContainer) and the whole lifecycle, real
           containerd: direct, proxy, proxy + no-op plugin on all seven hooks, go-relay
  docker   Docker mode against a private real dockerd with N pod-sandbox containers (a few running) and
           one busybox container to exec into, driven by `benchgo dockerclient` (HTTP/1.1, keep-alive,
           N goroutines): list (GET /containers/json?all=1) and inspect (cycling through the N) p50/p99
           at 1, calls/s at 1 and 16; an exec round trip (create, start with the 101 upgrade and the raw
           stream to EOF, inspect until exited) p50/p99 at 1, calls/s at 4; CPU per call in each hop and
           in the client. Peers: direct (dockerd), proxy (--backend-runtime-mode=Docker), go-proxy, socat.
           No plugin peer: no hook fires on list, inspect or exec. It takes about 2.3 minutes (mostly
           exec round trips, ~70 ms of runc each), so it is not in the default set: ask for it with
           --cases docker (or --cases all).

Figures are medians over the rounds; in each round every peer runs once, in turn, so drifting load
hits all alike. CPU per call comes from utime+stime in /proc/PID/stat of the hop process (and its
children, for socat) over a run, divided by the calls it served; in the Docker case, for hops that do
not fork, from their threads' schedstat (ns), as an exec run is too few calls for 10 ms ticks. MB =
2**20 bytes. Ratio columns are the proxy's figure over direct's, the aio relay's, the Go relay's and
the Go reverse proxy's. Targets are printed met or MISSED, never asserted. Results also go to JSON
(bench/results/latest.json) with machine, date, commit and command. Every process and temporary
directory is removed at the end, also on failure or Ctrl-C; a failing case prints its error and the
run goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))  # runnable from a checkout
sys.path.insert(0, str(BENCH_DIR))

import grpc  # noqa: E402
from google import protobuf  # noqa: E402

from docker_node import RUNNING_SANDBOXES, DockerNode  # noqa: E402
from gopeers import build_benchgo, run_client, run_docker_client  # noqa: E402
from procfs import CpuUsage, memory_mb, threads_cpu_seconds  # noqa: E402
from report import CaseReport, render, render_markdown  # noqa: E402
from rplab.containerd import ContainerdInstance, check_prerequisites  # noqa: E402
from rplab.cri import CriClient, open_channel  # noqa: E402
from rplab.docker_images import build_docker_archives  # noqa: E402
from rplab.dockerd import (  # noqa: E402
    DockerdInstance,
    DockerModeProxy,
    check_docker_prerequisites,
    docker_api_ping,
)
from rplab.example_plugin import registration  # noqa: E402
from rplab.images import build_and_import  # noqa: E402
from rplab.process import ProxyProcess  # noqa: E402
from rplab.synthetic import list_containers_response  # noqa: E402
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri  # noqa: E402
from runtimeproxy.hooks.plugins import HOOK_NAMES  # noqa: E402

T = TypeVar("T")
Metrics = dict[str, float]

MB = 1 << 20
DEFAULT_JSON = BENCH_DIR / "results" / "latest.json"
IMAGE_CACHE = Path.home() / ".cache" / "runtimeproxy" / "images"

RUNTIME, IMAGES = "/runtime.v1.RuntimeService/", "/runtime.v1.ImageService/"
VERSION, LIST_CONTAINERS = RUNTIME + "Version", RUNTIME + "ListContainers"
VERSION_REQUEST = cri.VersionRequest(version="v1").SerializeToString()
VERSION_RESPONSE = cri.VersionResponse(version="0.1.0", runtime_name="benchgo", runtime_version="1.0",
                                       runtime_api_version="v1").SerializeToString()

SMALL_CONCURRENCY = (1, 16, 64)
LARGE_SIZES_MB = (4, 16, 48)
DECODE_ALL_SIZE_MB = 16
CPU_TARGET_CONCURRENCY = 16
HOT_PATH_CPU_LIMIT = 1.1  # proxy CPU per call over the minimal aio relay's
RSS_SETTLED_LIMIT = 2.0  # proxy RSS after large messages (settled) over its idle RSS
SETTLE_SECONDS = 2.0
PLUGIN_STARTUP_LIMIT = 1.15  # pod startup through the proxy with a no-op plugin on all hooks, over direct
CHILD_EXIT_SECONDS = 0.2
SOCAT_BUFFER_BYTES = 1 << 20  # socat's default 8 KiB per read/write makes it the slowest hop for MBs
SOCAT_BACKLOG = 128  # socat's default listen backlog of 5 refuses 16 HTTP clients connecting at once
SETTLE_CALLS = 1000
# A kubelet's calls on a steady node (pkg/kubelet: PLEG relist, runtime status, stats, pod syncs).
RELIST_PERIOD_S, STATUS_PERIOD_S, STATS_PERIOD_S, POD_SYNC_PERIOD_S = 1, 5, 10, 60


@dataclass(frozen=True)
class Scale:
    rounds: int  # measured runs per peer (alternating), after one warm-up run each
    seconds: float  # per small-call run
    warmup_seconds: float
    large_calls: Mapping[int, int]  # calls per run, per size in MB
    pods: int  # pods (one running container each) for the kubelet steady state
    kubelet_seconds: float  # measured window per hop
    idle_seconds: float  # one window for every hop's idle CPU
    lifecycles: int  # pod lifecycles per peer
    docker_containers: int  # pod-sandbox containers in the Docker case's dockerd
    docker_seconds: float  # per list or inspect run
    exec_calls: int  # exec round trips per run at concurrency 1 (twice as many at EXEC_CONCURRENCY)


QUICK = Scale(rounds=1, seconds=0.5, warmup_seconds=0.3, large_calls={4: 4, 16: 3, 48: 2}, pods=20,
              kubelet_seconds=5.0, idle_seconds=3.0, lifecycles=3, docker_containers=20, docker_seconds=0.3,
              exec_calls=4)
FULL = Scale(rounds=5, seconds=2.0, warmup_seconds=0.5, large_calls={4: 20, 16: 10, 48: 4}, pods=110,
             kubelet_seconds=20.0, idle_seconds=10.0, lifecycles=15, docker_containers=100, docker_seconds=0.6,
             exec_calls=15)


# --- processes ------------------------------------------------------------------------------------------


@dataclass
class Peer:
    """One thing the client can call: its socket and the process whose CPU and memory count."""

    name: str
    socket: Path
    pid: int
    idle_rss_mb: float = 0.0
    forks: bool = False  # serves each connection in a child process (socat)
    http: bool = False  # speaks the Docker Engine API (HTTP/1.1), not gRPC


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def quietly(label: str, action: Callable[[], object]) -> None:
    """For cleanups: one failure must not keep the others from running."""
    try:
        action()
    except Exception as error:  # noqa: BLE001
        print(f"bench: cleanup: {label} failed: {error}", file=sys.stderr)


def wait_until(ready: Callable[[], bool], what: str, timeout: float,
               proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout:.0f}s")
        time.sleep(0.05)


def answers_version(socket: Path) -> bool:
    if not socket.exists():
        return False
    with open_channel(socket) as channel:
        try:
            channel.unary_unary(VERSION)(VERSION_REQUEST, timeout=1)
            return True
        except grpc.RpcError:
            return False


def serves(socket: Path) -> bool:
    if not socket.exists():
        return False
    with open_channel(socket) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=1)
            return True
        except grpc.FutureTimeoutError:
            return False


def settled_rss(pid: int) -> float:
    time.sleep(0.3)
    return memory_mb(pid)


class Lab:
    """The processes the cases share, each started on first use and stopped by the ExitStack.

    A process that failed to start fails again at once for the next case, without a retry.
    """

    def __init__(self, base: Path, stack: ExitStack) -> None:
        self.base = base
        self.stack = stack
        self._started: dict[str, Any] = {}
        self._failed: dict[str, BaseException] = {}
        self.plugin_proc: subprocess.Popen[bytes] | None = None

    def _once(self, key: str, start: Callable[[], T]) -> T:
        if key in self._failed:
            raise RuntimeError(f"{key} failed to start earlier: {self._failed[key]}")
        if key not in self._started:
            try:
                self._started[key] = start()
            except Exception as error:
                self._failed[key] = error
                raise
        return self._started[key]  # type: ignore[no-any-return]

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.base / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        self.stack.callback(quietly, name, lambda: stop_process(proc))
        return proc

    def _served(self, name: str, socket: Path, argv: list[str], http: bool = False) -> Peer:
        """Spawn a server process and wait until Version (HTTP: dockerd's /_ping) answers through it."""
        proc = self._spawn(name, argv)
        ready = docker_api_ping if http else answers_version
        wait_until(lambda: ready(socket), name, 30, proc)
        return Peer(name, socket, proc.pid, settled_rss(proc.pid), http=http)

    @property
    def benchgo(self) -> Path:
        return self._once("benchgo build", build_benchgo)

    def request_file(self, request: bytes) -> Path:
        """A file holding `request`, for the client."""
        path = self.base / "requests" / (hashlib.sha1(request).hexdigest() + ".bin")
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(request)
        return path

    def client(self, peer: Peer, method: str, request: bytes, **options: Any) -> Metrics:
        """One client run against `peer`, with the CPU the hop process spent per call it served."""
        return self._measured(peer, lambda: run_client(self.benchgo, peer.socket, method,
                                                       self.request_file(request), **options))

    def docker_client(self, peer: Peer, op: str, ids_file: Path | None, **options: Any) -> Metrics:
        """One Docker client run (list, inspect, exec) against `peer`, with the hop's CPU per call."""
        return self._measured(peer, lambda: run_docker_client(self.benchgo, peer.socket, op, ids_file, **options))

    def _measured(self, peer: Peer, run: Callable[[], dict[str, Any]]) -> Metrics:
        """`run`, with the CPU the hop process spent per call: utime+stime of its tree (10 ms ticks), or for
        a Docker-case hop that does not fork, its threads' schedstat (ns): an exec run is too few calls
        for ticks."""
        precise = peer.http and not peer.forks
        before, before_s = CpuUsage.of_tree(peer.pid), threads_cpu_seconds(peer.pid) if precise else 0.0
        result = run()
        if peer.forks:
            time.sleep(CHILD_EXIT_SECONDS)  # the child ends and is reaped: its CPU moves into cutime
        used = CpuUsage.of_tree(peer.pid).minus(before)
        cpu = threads_cpu_seconds(peer.pid) - before_s if precise else used.cpu
        served = result["calls"] + result["errors"] + result["warmup_calls"]
        result["cpu_us"] = cpu * 1e6 / served if served else float("nan")
        result["system_us"] = used.system * 1e6 / served if served else float("nan")
        result["faults"] = used.minor_faults / served if served else float("nan")
        return result

    @property
    def backend(self) -> Peer:
        """The instant backend (`benchgo backend`), serving canned answers; the "direct" peer."""
        def start() -> Peer:
            answers = self.base / "answers"
            answers.mkdir()
            (answers / "Version.bin").write_bytes(VERSION_RESPONSE)
            (answers / "ListContainers.unit.bin").write_bytes(list_containers_response(1))
            socket = self.base / "backend.sock"
            return self._served("direct", socket, [str(self.benchgo), "backend", "-listen", str(socket),
                                                   "-answers", str(answers)])
        return self._once("backend", start)

    @property
    def echo_hop(self) -> Peer:
        """A bare Python grpc.aio server answering by itself (the synthetic backend)."""
        def start() -> Peer:
            socket = self.base / "echo.sock"
            return self._served("echo-hop", socket, [sys.executable, "-m", "rplab.synthetic",
                                                     "--socket", str(socket)])
        return self._once("echo-hop", start)

    def hop(self, kind: str, upstream: Peer, label: str = "") -> Peer:
        """A relay of `kind` (proxy, aio-relay, go-relay, socat; go-proxy for HTTP) in front of `upstream`."""
        key = f"{kind} {label or upstream.name}"
        starters = {"proxy": self._proxy, "aio-relay": self._aio_relay, "go-relay": self._go_relay,
                    "socat": self._socat, "go-proxy": self._go_proxy}
        return self._once(key, lambda: starters[kind](key.replace(" ", "-"), upstream))

    def _proxy(self, name: str, upstream: Peer, hook_dir: Path | None = None, log_level: str = "warning",
               extra_args: tuple[str, ...] = ()) -> Peer:
        """The proxy in front of `upstream`: CRI mode, or Docker mode in front of an HTTP peer (dockerd)."""
        directory = self.base / name
        directory.mkdir()
        arguments = [f"--log-level={log_level}", *extra_args]
        proxy: ProxyProcess
        if upstream.http:
            proxy = DockerModeProxy(directory / "rp.sock", upstream.socket, extra_args=arguments)
        else:
            hooks = hook_dir or directory / "hooks"
            proxy = ProxyProcess(directory / "rp.sock", upstream.socket, hook_config_dir=hooks, extra_args=arguments)
        self.stack.callback(quietly, f"proxy {name}", proxy.stop)
        proxy.start()
        assert proxy.pid is not None
        self._started[f"process {name}"] = proxy
        return Peer("proxy", proxy.listen_path, proxy.pid, settled_rss(proxy.pid), http=upstream.http)

    @property
    def decode_all_proxy(self) -> Peer:
        """The rejected design (--benchmark-decode-all: every message decoded and re-encoded), for scale."""
        def start() -> Peer:
            peer = self._proxy("decode-all", self.backend, extra_args=("--benchmark-decode-all",))
            peer.name = "decode-all"
            return peer
        return self._once("decode-all proxy", start)

    def _aio_relay(self, name: str, upstream: Peer) -> Peer:
        socket = self.base / f"{name}.sock"
        return self._served("aio-relay", socket, [sys.executable, str(BENCH_DIR / "aio_relay.py"),
                                                  "--listen", str(socket), "--backend", str(upstream.socket)])

    def _go_relay(self, name: str, upstream: Peer) -> Peer:
        socket = self.base / f"{name}.sock"
        return self._served("go-relay", socket, [str(self.benchgo), "relay", "-listen", str(socket),
                                                 "-backend", str(upstream.socket)])

    def _socat(self, name: str, upstream: Peer) -> Peer:
        socat = shutil.which("socat")
        if socat is None:
            raise RuntimeError("socat is not installed (apt-get install -y socat)")
        socket = self.base / f"{name}.sock"
        listen = f"UNIX-LISTEN:{socket},fork,backlog={SOCAT_BACKLOG}"
        peer = self._served("socat", socket, [socat, f"-b{SOCAT_BUFFER_BYTES}", listen,
                                              f"UNIX-CONNECT:{upstream.socket}"], http=upstream.http)
        peer.forks = True
        return peer

    def _go_proxy(self, name: str, upstream: Peer) -> Peer:
        socket = self.base / f"{name}.sock"
        return self._served("go-proxy", socket, [str(self.benchgo), "httpproxy", "-listen", str(socket),
                                                 "-backend", str(upstream.socket)], http=True)

    @property
    def dockerd(self) -> Peer:
        """A private real dockerd with the lab images loaded; the "direct" peer of the Docker case."""
        def start() -> Peer:
            problem = check_docker_prerequisites()
            if problem:
                raise RuntimeError(f"cannot run dockerd here: {problem}")
            instance = DockerdInstance(self.base / "dk")
            self.stack.callback(quietly, "dockerd", instance.stop)  # removes every container, unmounts
            instance.start()
            instance.load_images(build_docker_archives(IMAGE_CACHE))
            pid = int((instance.base_dir / "dockerd.pid").read_text())
            return Peer("direct", instance.socket, pid, memory_mb(pid), http=True)
        return self._once("dockerd", start)

    def docker_node(self, containers: int) -> DockerNode:
        """The Docker case's containers in the lab dockerd (made once)."""
        return self._once("docker node", lambda: DockerNode.create(self.dockerd.socket, containers))

    @property
    def containerd(self) -> Peer:
        """A private containerd with the lab's images imported; the "direct" peer of the real cases."""
        def start() -> Peer:
            problem = check_prerequisites()
            if problem:
                raise RuntimeError(f"cannot run containerd here: {problem}")
            instance = ContainerdInstance(self.base / "ctd")
            self.stack.callback(quietly, "containerd", instance.stop)
            instance.start()
            build_and_import(instance.address, IMAGE_CACHE)
            assert instance.pid is not None
            return Peer("direct", Path(instance.address), instance.pid, memory_mb(instance.pid))
        return self._once("containerd", start)

    @property
    def plugin_proxy(self) -> Peer:
        """A proxy in front of containerd with the no-op plugin registered for all seven hooks."""
        def start() -> Peer:
            socket = self.base / "noop" / "noop.sock"
            argv = [sys.executable, str(BENCH_DIR / "noop_plugin.py"), "--socket", str(socket),
                    "--counts", str(self.plugin_counts_path)]
            self.plugin_proc = self._spawn("noop-plugin", argv)
            wait_until(lambda: serves(socket), "no-op plugin", 30, self.plugin_proc)
            hook_dir = self.base / "plugin-hooks"
            hook_dir.mkdir()
            (hook_dir / "noop.json").write_bytes(registration(socket, list(HOOK_NAMES)))
            # Logs at info: "plugin noop.json registered" is an info line (there are no per-call ones).
            peer = self._proxy("plugin-proxy", self.containerd, hook_dir=hook_dir, log_level="info")
            proxy = self._started["process plugin-proxy"]
            wait_until(lambda: "plugin noop.json registered" in proxy.log_tail(200), "plugin registration", 15)
            peer.name = "plugin"
            return peer
        return self._once("plugin proxy", start)

    @property
    def plugin_counts_path(self) -> Path:
        return self.base / "noop" / "counts.json"

    def plugin_counts(self) -> dict[str, int]:
        """The no-op plugin's calls per hook so far (it writes them on SIGUSR1)."""
        if self.plugin_proc is None:
            return {}
        self.plugin_counts_path.unlink(missing_ok=True)
        self.plugin_proc.send_signal(signal.SIGUSR1)
        wait_until(self.plugin_counts_path.exists, "no-op plugin counts", 10, self.plugin_proc)
        return json.loads(self.plugin_counts_path.read_text())


# --- measuring ------------------------------------------------------------------------------------------


def alternate(peers: list[Peer], measure: Callable[[Peer], Metrics], rounds: int,
              warmup: Callable[[Peer], object] | None = None) -> dict[str, dict[str, Any]]:
    """The one place peers are compared: a warm-up each, then `rounds` rounds of one run per peer in turn.

    Per peer: the median of every numeric metric over the rounds, plus "runs" (all of them, for the JSON).
    """
    for peer in peers:
        (warmup or measure)(peer)
    runs: dict[str, list[Metrics]] = {peer.name: [] for peer in peers}
    for _ in range(rounds):
        for peer in peers:
            runs[peer.name].append(measure(peer))
    result: dict[str, dict[str, Any]] = {}
    for name, measured in runs.items():
        keys = [key for key, value in measured[0].items() if isinstance(value, (int, float))]
        result[name] = {key: statistics.median(run[key] for run in measured) for key in keys}
        result[name]["runs"] = measured
    return result


def column(result: Mapping[str, Mapping[str, Any]], key: str, scale: float = 1.0) -> dict[str, float | None]:
    return {name: (metrics[key] * scale if key in metrics else None) for name, metrics in result.items()}


def available(lab: Lab, report: CaseReport, starters: Mapping[str, Callable[[], Peer]]) -> list[Peer]:
    """The peers that start; one that does not is a note, and the case goes on without it."""
    peers = []
    for name, start in starters.items():
        try:
            peers.append(start())
        except Exception as error:  # noqa: BLE001
            report.notes.append(f"{name} left out: {short(error)}")
    return peers


# --- case: small calls ----------------------------------------------------------------------------------


def synthetic_peers(lab: Lab, report: CaseReport, with_echo: bool) -> list[Peer]:
    backend = lab.backend
    starters: dict[str, Callable[[], Peer]] = {
        "direct": lambda: backend,
        "proxy": lambda: lab.hop("proxy", backend),
        "aio-relay": lambda: lab.hop("aio-relay", backend),
        "go-relay": lambda: lab.hop("go-relay", backend),
        "socat": lambda: lab.hop("socat", backend),
    }
    if with_echo:
        starters["echo-hop"] = lambda: lab.echo_hop
    return available(lab, report, starters)


def case_small(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = synthetic_peers(lab, report, with_echo=True)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for concurrency in SMALL_CONCURRENCY:
        def run(peer: Peer, seconds: float = scale.seconds, concurrency: int = concurrency) -> Metrics:
            return lab.client(peer, VERSION, VERSION_REQUEST, concurrency=concurrency, seconds=seconds)
        results[concurrency] = alternate(peers, run, scale.rounds,
                                         warmup=lambda peer: run(peer, scale.warmup_seconds))
    report.raw["results"] = {f"c{c}": result for c, result in results.items()}
    serial, busy = results[1], results[CPU_TARGET_CONCURRENCY]
    report.row("Version p50, c=1", "us", column(serial, "p50_us"))
    report.row("Version p99, c=1", "us", column(serial, "p99_us"))
    for concurrency, result in results.items():
        row = report.row(f"Version calls/s, c={concurrency}", "calls/s", column(result, "calls_per_s"))
        if concurrency == max(SMALL_CONCURRENCY):
            throughput_target(report, row, results)
    report.row("Version p50, c=16", "us", column(busy, "p50_us"))
    report.row("CPU per call in the hop, c=1", "us", column(serial, "cpu_us"))
    row = report.row(f"CPU per call in the hop, c={CPU_TARGET_CONCURRENCY}", "us", column(busy, "cpu_us"),
                     note="direct: the instant Go backend's own CPU; echo-hop: the Python server answering itself")
    ratio = row.ratio("proxy", "aio-relay")
    if ratio is not None:
        report.target(row, f"proxy CPU/call <= {HOT_PATH_CPU_LIMIT}x the minimal aio relay's",
                      ratio <= HOT_PATH_CPU_LIMIT, f"{ratio:.2f}x")
    report.row("RSS after the small calls", "MB", {peer.name: memory_mb(peer.pid) for peer in peers})
    headroom = row_ratio(busy, "direct", "proxy", "calls_per_s")
    if headroom is not None:
        report.notes.append(f"direct (client + Go backend alone) does {headroom:.0f}x the proxy's calls/s at "
                            f"c={CPU_TARGET_CONCURRENCY}: neither the client nor the backend limits the hops")


def row_ratio(result: Mapping[str, Mapping[str, Any]], peer: str, anchor: str, key: str) -> float | None:
    if peer not in result or anchor not in result or not result[anchor][key]:
        return None
    return float(result[peer][key] / result[anchor][key])


def throughput_target(report: CaseReport, row: Any, results: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> None:
    """At the highest concurrency the proxy keeps at least its 16-way calls/s, with no failed call."""
    top = max(SMALL_CONCURRENCY)
    if "proxy" not in results[top]:
        return
    errors = sum(int(run["errors"]) for result in results.values() for run in result["proxy"]["runs"])
    wide, busy = results[top]["proxy"]["calls_per_s"], results[CPU_TARGET_CONCURRENCY]["proxy"]["calls_per_s"]
    report.target(row, f"proxy calls/s at c={top} >= at c={CPU_TARGET_CONCURRENCY}, no errors",
                  wide >= busy and errors == 0, f"{wide / busy:.2f}x, {errors} errors")


# --- case: large messages -------------------------------------------------------------------------------


def case_large(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = synthetic_peers(lab, report, with_echo=False)
    for mb in LARGE_SIZES_MB:  # the backend builds each canned answer on first use: not measured
        lab.client(lab.backend, LIST_CONTAINERS, sized_request(mb * MB), count=1)
    decode_all = available(lab, report, {"decode-all": lambda: lab.decode_all_proxy})
    for mb in LARGE_SIZES_MB:
        def run(peer: Peer, calls: int = scale.large_calls[mb], request: bytes = sized_request(mb * MB)) -> Metrics:
            return lab.client(peer, LIST_CONTAINERS, request, count=calls)
        compared = peers + decode_all if mb == DECODE_ALL_SIZE_MB else peers
        result = alternate(compared, run, scale.rounds, warmup=lambda peer: run(peer, 1))
        report.raw[f"{mb}MB"] = result
        row = report.row(f"ListContainers {mb} MB p50", "ms", column(result, "p50_us", 1e-3))
        if mb == 16 and row.values.get("go-relay"):
            ratio = row.ratio("proxy", "go-relay")
            report.target(row, "16 MB p50 <= the Go relay's", ratio is not None and ratio <= 1.0,
                          f"{ratio:.2f}x" if ratio else "no proxy figure")
        wrong = {name: f"{sum(int(run['errors']) for run in metrics['runs'])} errors, "
                       f"{int(metrics['response_bytes'])} bytes"
                 for name, metrics in result.items()
                 if metrics["errors"] or metrics["response_bytes"] < mb * MB}
        if wrong:
            report.notes.append(f"{mb} MB: wrong answers from {wrong}")
        if mb == 16:
            report.row("CPU per 16 MB call in the hop", "ms", column(result, "cpu_us", 1e-3),
                       note="direct: the Go backend's own")
    memory_rows(lab, peers, report)


def sized_request(size: int) -> bytes:
    """A ListContainers request asking the Go backend for an answer of about `size` bytes."""
    return cri.ListContainersRequest(filter=cri.ContainerFilter(id=f"size={size}")).SerializeToString()


def memory_rows(lab: Lab, peers: list[Peer], report: CaseReport) -> None:
    """RSS of each hop: idle at start, right after the large messages, and settled (a pause, then small calls)."""
    hops = [peer for peer in peers if peer.name != "direct"]
    report.row("RSS idle (at start)", "MB", {peer.name: peer.idle_rss_mb for peer in hops})
    report.row("RSS right after the large messages", "MB", {peer.name: memory_mb(peer.pid) for peer in hops})
    report.row("peak RSS (VmHWM)", "MB", {peer.name: memory_mb(peer.pid, "VmHWM") for peer in hops})
    time.sleep(SETTLE_SECONDS)
    for peer in hops:
        lab.client(peer, VERSION, VERSION_REQUEST, count=SETTLE_CALLS)
    settled = {peer.name: memory_mb(peer.pid) for peer in hops}
    row = report.row(f"RSS settled ({SETTLE_SECONDS:g} s, then {SETTLE_CALLS} small calls)", "MB", settled)
    proxy = next((peer for peer in hops if peer.name == "proxy"), None)
    if proxy is not None:
        ratio = settled["proxy"] / proxy.idle_rss_mb
        report.target(row, f"proxy settled RSS <= {RSS_SETTLED_LIMIT:g}x idle", ratio <= RSS_SETTLED_LIMIT,
                      f"{ratio:.2f}x idle ({proxy.idle_rss_mb:.0f} MB)")


# --- case: a kubelet's steady state on real containerd ---------------------------------------------------


@dataclass(frozen=True)
class NodePods:
    """The pods of the steady node: per pod its sandbox and its one running container."""

    pods: list[tuple[str, str]]

    @classmethod
    def create(cls, client: CriClient, count: int, log_root: Path) -> NodePods:
        def one(index: int) -> tuple[str, str]:
            pod_config = client.pod_config(f"steady-{index}", log_root / f"p{index}")
            pod_id = client.run_pod(pod_config)
            config = client.container_config("app", command=["sleep", "86400"])
            container_id = client.create_container(pod_id, config, pod_config)
            client.start_container(container_id)
            return pod_id, container_id

        with ThreadPoolExecutor(4) as pool:
            return cls(list(pool.map(one, range(count))))

    def remove(self, client: CriClient) -> None:
        def one(pod: tuple[str, str]) -> None:
            client.stop_pod(pod[0])
            client.remove_pod(pod[0])

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, self.pods))


def kubelet_schedule(pods: NodePods, second: int) -> list[tuple[str, bytes]]:
    """The calls a kubelet makes in one second of a steady node (method path, encoded request)."""
    calls = [(RUNTIME + "ListPodSandbox", cri.ListPodSandboxRequest().SerializeToString()),
             (RUNTIME + "ListContainers", cri.ListContainersRequest().SerializeToString())]  # PLEG relist
    if second % STATUS_PERIOD_S == 0:
        calls += [(RUNTIME + "Status", cri.StatusRequest().SerializeToString()), (VERSION, VERSION_REQUEST)]
    if second % STATS_PERIOD_S == 0:
        calls += [(RUNTIME + "ListContainerStats", cri.ListContainerStatsRequest().SerializeToString()),
                  (IMAGES + "ImageFsInfo", cri.ImageFsInfoRequest().SerializeToString())]
    count = len(pods.pods)  # each pod's status sync once a POD_SYNC_PERIOD_S, spread evenly
    first, last = second * count // POD_SYNC_PERIOD_S, (second + 1) * count // POD_SYNC_PERIOD_S
    for index in range(first, last):
        pod_id, container_id = pods.pods[index % count]
        by_pod = cri.ContainerFilter(pod_sandbox_id=pod_id)
        calls += [(RUNTIME + "PodSandboxStatus",
                   cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id).SerializeToString()),
                  (RUNTIME + "ListContainers", cri.ListContainersRequest(filter=by_pod).SerializeToString()),
                  (RUNTIME + "ContainerStatus",
                   cri.ContainerStatusRequest(container_id=container_id).SerializeToString())]
    return calls


def steady_state(peer: Peer, pods: NodePods, seconds: float) -> Metrics:
    """Play the kubelet's schedule through `peer` for `seconds`: the hop's CPU % of one core.

    CPU from the threads' schedstat (ns): a 20 s window of ~1 % is too little for 10 ms ticks.
    """
    with open_channel(peer.socket) as channel:
        callables: dict[str, Any] = {}
        before, started = threads_cpu_seconds(peer.pid), time.monotonic()
        calls = 0
        for second in range(int(seconds)):
            for method, request in kubelet_schedule(pods, second):
                call = callables.get(method) or callables.setdefault(method, channel.unary_unary(method))
                call(request, timeout=30)
                calls += 1
            time.sleep(max(0.0, started + second + 1 - time.monotonic()))
        elapsed = time.monotonic() - started
        used = threads_cpu_seconds(peer.pid) - before
    return {"cpu_percent": used / elapsed * 100, "calls_per_s": calls / elapsed,
            "cpu_us_per_call": used * 1e6 / calls}


def containerd_peers(lab: Lab, report: CaseReport, with_plugin: bool) -> list[Peer]:
    containerd = lab.containerd
    starters: dict[str, Callable[[], Peer]] = {
        "direct": lambda: containerd,
        "proxy": lambda: lab.hop("proxy", containerd, "containerd"),
        "aio-relay": lambda: lab.hop("aio-relay", containerd, "containerd"),
        "go-relay": lambda: lab.hop("go-relay", containerd, "containerd"),
    }
    if with_plugin:
        starters["plugin"] = lambda: lab.plugin_proxy
    return available(lab, report, starters)


def case_kubelet(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = containerd_peers(lab, report, with_plugin=False)
    with open_channel(lab.containerd.socket) as channel:
        client = CriClient(channel)
        started = time.perf_counter()
        pods = NodePods.create(client, scale.pods, lab.base / "pod-logs")
        report.notes.append(f"{scale.pods} pods with one running container each, created in "
                            f"{time.perf_counter() - started:.1f} s")
        try:
            result = alternate(peers, lambda peer: steady_state(peer, pods, scale.kubelet_seconds), 1,
                               warmup=lambda peer: steady_state(peer, pods, 2))
        finally:
            started = time.perf_counter()
            pods.remove(client)
            report.notes.append(f"removed them in {time.perf_counter() - started:.1f} s")
    idle = idle_cpu_percent(peers, scale.idle_seconds)
    report.raw.update(result=result, idle_cpu_percent=idle)
    report.row(f"kubelet steady state, {scale.pods} pods", "calls/s", column(result, "calls_per_s"))
    report.row("CPU of one core, kubelet steady state", "%", column(result, "cpu_percent"),
               note="direct: containerd's own CPU, for scale")
    report.row("CPU of one core, idle (no calls)", "%", idle)


def idle_cpu_percent(peers: list[Peer], seconds: float) -> dict[str, float | None]:
    """Each process's CPU % of one core over one window in which nobody calls (all measured at once)."""
    before, started = {peer.name: threads_cpu_seconds(peer.pid) for peer in peers}, time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {peer.name: (threads_cpu_seconds(peer.pid) - before[peer.name]) / elapsed * 100 for peer in peers}


# --- case: pod startup with a plugin on all hooks ---------------------------------------------------------

STARTUP_STEPS = ("RunPodSandbox", "CreateContainer", "StartContainer")
LIFECYCLE_STEPS = (*STARTUP_STEPS, "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox")


def pod_lifecycle(client: CriClient, log_root: Path) -> Metrics:
    """One host-network pod with one container, from RunPodSandbox to RemovePodSandbox: ms per step."""
    pod_config = client.pod_config("bench", log_root / uuid.uuid4().hex[:12])
    container_config = client.container_config("app")
    times: Metrics = {}

    def timed(step: str, action: Callable[[], T]) -> T:
        before = time.perf_counter()
        result = action()
        times[f"{step}_ms"] = (time.perf_counter() - before) * 1e3
        return result

    pod_id = timed("RunPodSandbox", lambda: client.run_pod(pod_config))
    container_id = timed("CreateContainer", lambda: client.create_container(pod_id, container_config, pod_config))
    timed("StartContainer", lambda: client.start_container(container_id))
    timed("StopContainer", lambda: client.stop_container(container_id, grace=0))
    timed("RemoveContainer", lambda: client.remove_container(container_id))
    timed("StopPodSandbox", lambda: client.stop_pod(pod_id))
    timed("RemovePodSandbox", lambda: client.remove_pod(pod_id))
    times["startup_ms"] = sum(times[f"{step}_ms"] for step in STARTUP_STEPS)
    times["total_ms"] = sum(times[f"{step}_ms"] for step in LIFECYCLE_STEPS)
    return times


@contextmanager
def cri_clients(peers: list[Peer]) -> Iterator[dict[str, CriClient]]:
    with ExitStack() as stack:
        yield {peer.name: CriClient(stack.enter_context(open_channel(peer.socket))) for peer in peers}


def case_startup(lab: Lab, scale: Scale, report: CaseReport) -> None:
    peers = [peer for peer in containerd_peers(lab, report, with_plugin=True) if peer.name != "aio-relay"]
    log_root = lab.base / "pod-logs"
    with cri_clients(peers) as clients:
        result = alternate(peers, lambda peer: pod_lifecycle(clients[peer.name], log_root), scale.lifecycles)
    counts = lab.plugin_counts()
    report.raw.update(result=result, plugin_calls=counts)
    row = report.row("pod startup (Run, Create, Start), median", "ms", column(result, "startup_ms"),
                     note="plugin: the proxy with a no-op plugin on all seven hooks")
    ratio = row.ratio("plugin", "direct")
    if ratio is not None:
        report.target(row, f"startup with a plugin on all hooks <= {PLUGIN_STARTUP_LIMIT}x direct",
                      ratio <= PLUGIN_STARTUP_LIMIT, f"{ratio:.2f}x")
    report.row("pod lifecycle (7 calls), median", "ms", column(result, "total_ms"))
    steps = "; ".join(f"{step} " + "/".join(f"{result[peer.name][step + '_ms']:.0f}" for peer in peers)
                      for step in LIFECYCLE_STEPS)
    report.notes.append(f"median ms per step, {'/'.join(peer.name for peer in peers)}: {steps}")
    report.notes.append(f"no-op plugin calls (expected {scale.lifecycles + 1} per lifecycle hook; "
                        f"PreUpdateContainerResources is in no lifecycle): {json.dumps(counts, sort_keys=True)}")


# --- case: Docker mode against a real dockerd ------------------------------------------------------------

DOCKER_READS = ("list", "inspect")
DOCKER_CONCURRENCY = (1, 16)
EXEC_CONCURRENCY = 4
# Exec round trip p50 through the proxy over the Go reverse proxy's: against direct every hop, socat
# included, measured up to 1.2x on a loaded machine, so the anchor that pays the same hop is the yardstick.
EXEC_GO_PROXY_LIMIT = 1.1


def docker_peers(lab: Lab, report: CaseReport) -> list[Peer]:
    dockerd = lab.dockerd
    return available(lab, report, {
        "direct": lambda: dockerd,
        "proxy": lambda: lab.hop("proxy", dockerd, "dockerd"),
        "go-proxy": lambda: lab.hop("go-proxy", dockerd, "dockerd"),
        "socat": lambda: lab.hop("socat", dockerd, "dockerd"),
    })


Results = dict[str, dict[str, Any]]  # per peer: medians and runs (alternate's result)


def case_docker(lab: Lab, scale: Scale, report: CaseReport) -> None:
    started = time.perf_counter()
    node = lab.docker_node(scale.docker_containers)
    sandboxes, exec_target = node.write_ids(lab.base)
    report.notes.append(f"{len(node.sandbox_ids)} pod-sandbox containers (pause image, Kubernetes labels), "
                        f"{RUNNING_SANDBOXES} of them running, + 1 busybox exec target: made in "
                        f"{time.perf_counter() - started:.1f} s")
    peers = docker_peers(lab, report)
    reads = {op: {concurrency: measure_docker_reads(lab, scale, peers, op, sandboxes, concurrency)
                  for concurrency in DOCKER_CONCURRENCY} for op in DOCKER_READS}
    execs = {concurrency: measure_execs(lab, scale, peers, exec_target, concurrency)
             for concurrency in (1, EXEC_CONCURRENCY)}
    report.raw.update(reads={f"{op}_c{c}": result for op, by_c in reads.items() for c, result in by_c.items()},
                      execs={f"c{c}": result for c, result in execs.items()})
    for op in DOCKER_READS:
        docker_read_rows(report, op, reads[op])
    exec_rows(report, execs)
    busiest = {f"{op} c={max(DOCKER_CONCURRENCY)}": reads[op][max(DOCKER_CONCURRENCY)] for op in DOCKER_READS}
    busiest[f"exec c={EXEC_CONCURRENCY}"] = execs[EXEC_CONCURRENCY]
    client_rows(report, busiest)
    docker_answer_notes(report, {f"{op} c={c}": result for op, by_c in reads.items() for c, result in by_c.items()}
                        | {f"exec c={c}": result for c, result in execs.items()})
    report.notes.append(f"answers: list {reads['list'][1]['direct']['response_bytes'] / 1024:.0f} KiB, inspect "
                        f"{reads['inspect'][1]['direct']['response_bytes'] / 1024:.1f} KiB, exec output stream "
                        f"{int(execs[1]['direct']['response_bytes'])} bytes")


def measure_docker_reads(lab: Lab, scale: Scale, peers: list[Peer], op: str, ids: Path, concurrency: int) -> Results:
    def read(peer: Peer, seconds: float = scale.docker_seconds) -> Metrics:
        return lab.docker_client(peer, op, ids, concurrency=concurrency, seconds=seconds)
    return alternate(peers, read, scale.rounds, warmup=lambda peer: read(peer, scale.warmup_seconds))


def measure_execs(lab: Lab, scale: Scale, peers: list[Peer], target: Path, concurrency: int) -> Results:
    calls = scale.exec_calls if concurrency == 1 else 2 * scale.exec_calls

    def execute(peer: Peer, calls: int = calls) -> Metrics:
        return lab.docker_client(peer, "exec", target, concurrency=concurrency, count=calls)
    return alternate(peers, execute, scale.rounds, warmup=lambda peer: execute(peer, 2))


def docker_read_rows(report: CaseReport, op: str, result: Mapping[int, Results]) -> None:
    serial, busy = result[1], result[max(DOCKER_CONCURRENCY)]
    report.row(f"{op} p50, c=1", "us", column(serial, "p50_us"))
    report.row(f"{op} p99, c=1", "us", column(serial, "p99_us"))
    for concurrency, by_peer in result.items():
        report.row(f"{op} calls/s, c={concurrency}", "calls/s", column(by_peer, "calls_per_s"))
    report.row(f"{op}: CPU per call in the hop, c=1", "us", column(serial, "cpu_us"))
    report.row(f"{op}: CPU per call in the hop, c={max(DOCKER_CONCURRENCY)}", "us", column(busy, "cpu_us"),
               note="direct: dockerd's own threads, for scale" if op == DOCKER_READS[0] else "")


def exec_rows(report: CaseReport, result: Mapping[int, Results]) -> None:
    serial, busy = result[1], result[EXEC_CONCURRENCY]
    row = report.row("exec round trip p50, c=1", "ms", column(serial, "p50_us", 1e-3),
                     note="exec create + start (101, raw stream to EOF) + inspect until exited: `echo x`")
    ratio = row.ratio("proxy", "go-proxy")
    if ratio is not None:
        report.target(row, f"exec p50 through the proxy <= {EXEC_GO_PROXY_LIMIT}x the Go reverse proxy's",
                      ratio <= EXEC_GO_PROXY_LIMIT, f"{ratio:.2f}x")
    report.row("exec round trip p99, c=1", "ms", column(serial, "p99_us", 1e-3))
    report.row("exec round trips/s, c=1", "calls/s", column(serial, "calls_per_s"))
    report.row(f"exec round trips/s, c={EXEC_CONCURRENCY}", "calls/s", column(busy, "calls_per_s"))
    report.row("exec: CPU per round trip in the hop, c=1", "us", column(serial, "cpu_us"))
    report.row(f"exec: CPU per round trip in the hop, c={EXEC_CONCURRENCY}", "us", column(busy, "cpu_us"),
               note="socat's CPU comes in 10 ms ticks (its per-connection children), the others' in ns")


def client_rows(report: CaseReport, busiest: Mapping[str, Results]) -> None:
    """The load side's own CPU per call beside the hops': the client is not what limits a figure."""
    for index, (label, result) in enumerate(busiest.items()):
        report.row(f"client CPU per call, {label}", "us", column(result, "client_cpu_us"),
                   note="" if index else "benchgo dockerclient's own CPU, driving each peer")
    shares = [f"{label} {result['proxy']['client_cpu_us'] / result['proxy']['cpu_us']:.2f}"
              for label, result in busiest.items() if result.get("proxy", {}).get("cpu_us")]
    if shares:
        report.notes.append("the client's own CPU per call over the proxy's, driving it: " + ", ".join(shares))


def docker_answer_notes(report: CaseReport, results: Mapping[str, Results]) -> None:
    """Failed calls, and exec round trips that took more than one inspect, per measurement."""
    for label, by_peer in results.items():
        polls = {name: sum(int(run.get("extra_requests", 0)) for run in metrics["runs"])
                 for name, metrics in by_peer.items()}
        if any(polls.values()):
            report.notes.append(f"{label}: extra exec inspects (dockerd still said running): {polls}")
        failed = {name: sum(int(run["errors"]) for run in metrics["runs"]) for name, metrics in by_peer.items()}
        firsts = {name: next((run["first_error"] for run in by_peer[name]["runs"] if run.get("first_error")), "")
                  for name, count in failed.items() if count}
        if firsts:
            report.notes.append(f"{label}: failed calls {failed}; e.g. {firsts}")


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    run: Callable[[Lab, Scale, CaseReport], None]


CASES = {case.name: case for case in (
    Case("small", "1. small calls (Version), instant Go backend", case_small),
    Case("large", "2. large responses (ListContainers), instant Go backend", case_large),
    Case("kubelet", "3. a kubelet's steady state, real containerd", case_kubelet),
    Case("startup", "4. pod startup and lifecycle, real containerd", case_startup),
    Case("docker", "5. Docker mode: list, inspect, exec, real dockerd", case_docker),
)}
DEFAULT_CASES = ("small", "large", "kubelet", "startup")  # docker takes ~2 more minutes: ask for it


# --- running and reporting -------------------------------------------------------------------------------


def short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[:limit] + "..."


def run_case(case: Case, lab: Lab, scale: Scale) -> CaseReport:
    report = CaseReport(case.name, case.title)
    print(f"bench: {case.title} ...", flush=True)
    started = time.perf_counter()
    try:
        case.run(lab, scale, report)
    except Exception as error:  # noqa: BLE001 - the run goes on with the next case
        report.error = short(error, 2000)
        traceback.print_exc()
    report.seconds = time.perf_counter() - started
    status = f"FAILED: {report.error[:300]}" if report.error else "done"
    print(f"bench: {case.name} {status} in {report.seconds:.1f} s", flush=True)
    return report


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def tool_version(argv: list[str]) -> str:
    try:
        finished = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (finished.stdout or finished.stderr).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unavailable"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(argv: list[str], quick: bool) -> dict[str, Any]:
    status = git("status", "--porcelain").splitlines()
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "git_dirty": bool(status),
        "git_status": status[:50],
        "command": shlex.join(["python3", *argv]),
        "quick": quick,
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": protobuf.__version__,
        "go": tool_version(["go", "version"]),
        "kernel": platform.release(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def header_lines(meta: dict[str, Any]) -> list[str]:
    dirty = " (dirty)" if meta["git_dirty"] else ""
    return [f"runtimeproxy benchmark  {meta['date']}  commit {meta['git_commit']}{dirty}",
            meta["command"],
            f"{meta['nproc']} cpus ({meta['cpu_model']}), Python {meta['python']}, grpcio {meta['grpcio']}, "
            f"{meta['go']}, kernel {meta['kernel']}, load {meta['loadavg_start']} -> {meta.get('loadavg_end')}"]


def write_json(path: Path, meta: dict[str, Any], scale: Scale, reports: list[CaseReport]) -> None:
    document = {
        "meta": meta,
        "scale": asdict(scale),
        "cases": [asdict(report) for report in reports],
        "targets": [asdict(check) for report in reports for check in report.checks],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs: the whole thing in about 1.5 minutes")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the results (%(default)s)")
    parser.add_argument("--markdown", action="store_true", help="also print the rows as one markdown table")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help=f"comma-separated subset of {', '.join(CASES)}, or all (default: %(default)s)")
    args = parser.parse_args(argv)
    args.case_names = [name.strip() for name in args.cases.split(",") if name.strip()]
    if args.case_names == ["all"]:
        args.case_names = list(CASES)
    unknown = [name for name in args.case_names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    return args


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds like Ctrl-C: everything is cleaned up


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    scale = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored (`cmd &`)
    # Every Python peer (the proxy included) imports this checkout, not an installed copy.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    meta = machine_info([sys.argv[0], *argv], args.quick)
    reports: list[CaseReport] = []
    interrupted = False
    started = time.perf_counter()
    with ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="rpb-", dir="/tmp"))  # short: unix socket paths are limited
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        lab = Lab(base, stack)
        try:
            for name in args.case_names:
                reports.append(run_case(CASES[name], lab, scale))
        except KeyboardInterrupt:
            interrupted = True
            print("bench: interrupted; cleaning up", file=sys.stderr, flush=True)
        print("bench: stopping processes and removing temporary files", flush=True)
    meta.update(loadavg_end=[round(x, 2) for x in os.getloadavg()],
                total_seconds=round(time.perf_counter() - started, 1), interrupted=interrupted)
    print()
    print(render(reports, header_lines(meta)))
    if args.markdown:
        print()
        print(render_markdown(reports))
    write_json(args.json, meta, scale, reports)
    print(f"\nresults written to {args.json}  (total {meta['total_seconds']} s)")
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
