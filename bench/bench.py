#!/usr/bin/env python3
"""runtimeproxy benchmark: the same calls direct to the backend and through the proxy.

    python3 bench/bench.py [--quick] [--json PATH] [--cases unary,large,...]

Everything runs in one go on this machine, as one process tree:

* the synthetic backend (`python -m runtimeproxy.lab.synthetic`: instant canned
  answers) in its own process;
* the proxies (`python -m runtimeproxy`, via ProxyProcess, --log-level=warning), each
  in its own process: one plain proxy in front of the synthetic backend, one with
  --benchmark-decode-all (the rejected design that decodes and re-encodes every
  message), a fresh one for the resource figures, and for real containerd one plain
  proxy and one with the no-op plugin (bench/noop_plugin.py, its own process)
  registered for all seven hooks (that proxy logs at info, to show the registration);
* a private containerd (ContainerdInstance, offline lab images) for the real cases;
* the clients, here in the bench process: raw-bytes grpc.aio multicallables with
  pre-encoded requests (no serializers), so the client costs as little as possible.
  Direct and proxied runs use the same client code, each channel is warmed up first,
  and runs alternate direct/proxy (ABAB...): see compare(), the one place that does it.

Cases (--cases picks some; all by default):
  unary      Version and Status: p50/p99 latency at concurrency 1; calls/s at 1 and 16
  large      ListContainers of 1, 4, 16, 48 MB: p50 and MB/s; decode-all proxy at 4, 16 MB;
             CPU time and page faults per 16 MB call of each process (from /proc)
  stream     GetContainerEvents delivering N events: events/s
  lifecycle  real containerd pod lifecycle (7 calls): direct, proxy, proxy + no-op plugin
  list       ListContainers on real containerd holding a few hundred containers
  resources  proxy CPU time per forwarded call, RSS idle and after 2 x 10,000 calls
  memory     proxy RSS idle, right after a burst of large messages, a few seconds after
             going idle; and after requests over the default 16 MiB request limit

Each figure is the median over the rounds; MB means 2**20 bytes; ratio is proxy/direct
(so < 1 for a throughput means the proxy is slower). Targets are printed as met or
MISSED; nothing is asserted. Results also go to JSON (default
bench/results/latest.json) with machine info, date, git commit and the command line.
Every process and temporary directory is removed at the end, also on failure or
Ctrl-C; a failing case prints its error and the run goes on with the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))  # runnable from a checkout

import grpc  # noqa: E402
from google import protobuf  # noqa: E402

from runtimeproxy.lab.containerd import ContainerdInstance, check_prerequisites  # noqa: E402
from runtimeproxy.lab.cri import CriClient, open_channel  # noqa: E402
from runtimeproxy.lab.example_plugin import registration  # noqa: E402
from runtimeproxy.lab.images import build_and_import  # noqa: E402
from runtimeproxy.lab.process import ProxyProcess  # noqa: E402
from runtimeproxy.lab.synthetic import EVENT_COUNT_KEY, RESPONSE_BYTES_KEY  # noqa: E402
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri  # noqa: E402
from runtimeproxy.hooks.plugins import HOOK_NAMES  # noqa: E402

T = TypeVar("T")
C = TypeVar("C")
Metrics = dict[str, float]

MB = 1 << 20
DEFAULT_JSON = BENCH_DIR / "results" / "latest.json"
IMAGE_CACHE = Path.home() / ".cache" / "runtimeproxy" / "images"
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]

RUNTIME = "/runtime.v1.RuntimeService/"
VERSION, STATUS = RUNTIME + "Version", RUNTIME + "Status"
LIST_CONTAINERS, CONTAINER_EVENTS = RUNTIME + "ListContainers", RUNTIME + "GetContainerEvents"
VERSION_REQUEST = cri.VersionRequest(version="v1").SerializeToString()
STATUS_REQUEST = cri.StatusRequest().SerializeToString()
LIST_REQUEST = cri.ListContainersRequest().SerializeToString()
EVENTS_REQUEST = cri.GetEventsRequest().SerializeToString()

LARGE_SIZES_MB = (1, 4, 16, 48)
DECODE_ALL_SIZES_MB = (4, 16)
CONCURRENCY = 16
NO_GROWTH_MB = 2.0  # RSS change over 10,000 calls that still counts as "no growth" (allocator noise)


@dataclass(frozen=True)
class Scale:
    rounds: int  # measured runs per target (alternating), after one warm-up each
    unary_calls: int  # sequential calls per run, latency at concurrency 1
    unary_warmup: int
    concurrent_seconds: float  # per run, throughput at concurrency 16
    large_calls: int  # calls per run up to 16 MB (48 MB: a third)
    events: int  # GetContainerEvents per run
    lifecycles: int  # pod lifecycles per target
    containers: int  # containers created for the real ListContainers case
    list_calls: int  # ListContainers per run on real containerd
    resource_calls: int = 10_000  # Version calls per batch for the resource figures


QUICK = Scale(rounds=2, unary_calls=500, unary_warmup=200, concurrent_seconds=0.5, large_calls=3,
              events=5_000, lifecycles=5, containers=100, list_calls=50)
FULL = Scale(rounds=4, unary_calls=3_000, unary_warmup=500, concurrent_seconds=2.0, large_calls=8,
             events=20_000, lifecycles=20, containers=300, list_calls=200)


# --- results ------------------------------------------------------------------------------------------


@dataclass
class Row:
    metric: str
    unit: str
    direct: float | None
    proxy: float | None
    note: str = ""  # when a column holds something else than plain direct / plain proxy
    target: str = ""  # "met: ..." or "MISSED: ..."

    @property
    def ratio(self) -> float | None:
        if self.direct and self.proxy is not None:
            return self.proxy / self.direct
        return None


@dataclass
class Check:
    case: str
    metric: str
    target: str
    met: bool
    measured: str


@dataclass
class CaseReport:
    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def row(self, metric: str, unit: str, direct: float | None, proxy: float | None, note: str = "") -> Row:
        row = Row(metric, unit, direct, proxy, note)
        self.rows.append(row)
        return row

    def target(self, row: Row, target: str, met: bool, measured: str) -> None:
        row.target = f"{'met' if met else 'MISSED'}: {measured} ({target})"
        self.checks.append(Check(self.name, row.metric, target, met, measured))


# --- measuring ------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class Comparison:
    medians: dict[str, Metrics]  # per target: the median over the rounds of each metric
    runs: dict[str, list[Metrics]]  # per target: every round, for the JSON

    def __getitem__(self, target: str) -> Metrics:
        return self.medians[target]


async def compare(
    clients: Mapping[str, C],
    measure: Callable[[C], Awaitable[Metrics]],
    rounds: int,
    warmup: Callable[[C], Awaitable[object]] | None = None,
) -> Comparison:
    """The one place where direct and proxied runs are measured.

    Warms every client up (with `warmup`, else one unrecorded `measure`), then runs `rounds`
    rounds that each measure every client once, in turn (ABAB...), so that drifting load on a
    noisy machine hits direct and proxied alike. Clients are channels or CriClients.
    """
    for client in clients.values():
        await (warmup or measure)(client)
    runs: dict[str, list[Metrics]] = {name: [] for name in clients}
    for _ in range(rounds):
        for name, client in clients.items():
            runs[name].append(await measure(client))
    medians = {name: {key: statistics.median(run[key] for run in results) for key in results[0]}
               for name, results in runs.items()}
    return Comparison(medians, runs)


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, except that Ctrl-C and SIGTERM interrupt it (KeyboardInterrupt) without delay.

    asyncio.run alone notices SIGINT only once its loop wakes up, which, while it awaits a
    thread (the containerd cases), is when that thread is done: the signal got lost. (A running
    thread still finishes what it is doing; asyncio.run waits for it.)
    """
    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        interrupted: list[int] = []

        def interrupt(signum: int) -> None:
            interrupted.append(signum)
            task.cancel()

        for signum in previous:
            loop.add_signal_handler(signum, interrupt, signum)
        try:
            return await coroutine
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt(f"signal {interrupted[0]}") from None
            raise
        finally:
            for signum, handler in previous.items():
                loop.remove_signal_handler(signum)
                signal.signal(signum, handler)

    return asyncio.run(main())


@asynccontextmanager
async def aio_channels(sockets: Mapping[str, Path]) -> AsyncIterator[dict[str, grpc.aio.Channel]]:
    channels = {name: grpc.aio.insecure_channel(f"unix://{path}", options=UNLIMITED) for name, path in sockets.items()}
    try:
        for channel in channels.values():
            await asyncio.wait_for(channel.channel_ready(), 15)
        yield channels
    finally:
        for channel in channels.values():
            await channel.close()


@contextmanager
def cri_clients(sockets: Mapping[str, Path]) -> Iterator[dict[str, CriClient]]:
    with ExitStack() as stack:
        yield {name: CriClient(stack.enter_context(open_channel(path))) for name, path in sockets.items()}


async def sequential_calls(channel: grpc.aio.Channel, path: str, request: bytes, calls: int) -> Metrics:
    """`calls` unary calls one after another: latency percentiles and calls/s at concurrency 1."""
    call = channel.unary_unary(path)
    latencies: list[float] = []
    response = b""
    started = time.perf_counter()
    for _ in range(calls):
        before = time.perf_counter()
        response = await call(request)
        latencies.append(time.perf_counter() - before)
    elapsed = time.perf_counter() - started
    return {"p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
            "calls_per_s": calls / elapsed, "response_bytes": len(response)}


async def concurrent_calls(channel: grpc.aio.Channel, path: str, request: bytes, tasks: int, seconds: float) -> Metrics:
    """`tasks` asyncio tasks on one channel, each calling in a loop for `seconds`: calls/s."""
    call = channel.unary_unary(path)
    deadline = time.perf_counter() + seconds
    counts = [0] * tasks

    async def worker(index: int) -> None:
        while time.perf_counter() < deadline:
            await call(request)
            counts[index] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return {"calls_per_s": sum(counts) / (time.perf_counter() - started)}


async def counted_calls(channel: grpc.aio.Channel, path: str, request: bytes, tasks: int, total: int) -> None:
    """Exactly `total` unary calls spread over `tasks` concurrent tasks."""
    call = channel.unary_unary(path)
    share, extra = divmod(total, tasks)

    async def worker(calls: int) -> None:
        for _ in range(calls):
            await call(request)

    await asyncio.gather(*(worker(share + (i < extra)) for i in range(tasks)))


async def large_calls(channel: grpc.aio.Channel, size: int, calls: int) -> Metrics:
    """ListContainers answered with about `size` bytes, `calls` times: p50 and MB/s."""
    call = channel.unary_unary(LIST_CONTAINERS)
    metadata = ((RESPONSE_BYTES_KEY, str(size)),)
    latencies: list[float] = []
    received = 0
    for _ in range(calls):
        before = time.perf_counter()
        received = len(await call(LIST_REQUEST, metadata=metadata))
        latencies.append(time.perf_counter() - before)
    p50 = statistics.median(latencies)
    return {"p50_ms": p50 * 1e3, "mb_per_s": received / MB / p50, "response_bytes": received}


async def stream_events(channel: grpc.aio.Channel, events: int) -> Metrics:
    """One GetContainerEvents call delivering `events` messages: events/s."""
    call = channel.unary_stream(CONTAINER_EVENTS)
    received = 0
    started = time.perf_counter()
    async for _ in call(EVENTS_REQUEST, metadata=((EVENT_COUNT_KEY, str(events)),)):
        received += 1
    elapsed = time.perf_counter() - started
    if received != events:
        raise RuntimeError(f"expected {events} events, got {received}")
    return {"events_per_s": received / elapsed, "seconds": elapsed}


LIFECYCLE_STEPS = ("RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
                   "RemoveContainer", "StopPodSandbox", "RemovePodSandbox")


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

    started = time.perf_counter()
    pod_id = timed("RunPodSandbox", lambda: client.run_pod(pod_config))
    container_id = timed("CreateContainer", lambda: client.create_container(pod_id, container_config, pod_config))
    timed("StartContainer", lambda: client.start_container(container_id))
    timed("StopContainer", lambda: client.stop_container(container_id, grace=0))
    timed("RemoveContainer", lambda: client.remove_container(container_id))
    timed("StopPodSandbox", lambda: client.stop_pod(pod_id))
    timed("RemovePodSandbox", lambda: client.remove_pod(pod_id))
    times["total_ms"] = (time.perf_counter() - started) * 1e3
    return times


@dataclass(frozen=True)
class ProcUsage:
    """CPU seconds and minor page faults of a process so far, from /proc/PID/stat."""

    user: float
    system: float
    minor_faults: int

    @classmethod
    def of(cls, pid: int) -> ProcUsage:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        tick = os.sysconf("SC_CLK_TCK")
        return cls(int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7]))

    @property
    def cpu(self) -> float:
        return self.user + self.system

    def per_call_since(self, before: ProcUsage, calls: int) -> Metrics:
        """ms of CPU (and of it in the kernel) and minor page faults per call, since `before`."""
        return {"cpu_ms": (self.cpu - before.cpu) * 1e3 / calls,
                "system_ms": (self.system - before.system) * 1e3 / calls,
                "minor_faults": (self.minor_faults - before.minor_faults) / calls}


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    return ProcUsage.of(pid).cpu


def proc_memory_mb(pid: int, key: str = "VmRSS") -> float:
    """VmRSS (or VmHWM, the peak) of a process in MB, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


# --- processes ------------------------------------------------------------------------------------------


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


class Lab:
    """The processes the cases share, each started on first use and stopped by the ExitStack.

    A resource that failed to start fails again at once for the next case, without a retry.
    """

    def __init__(self, base: Path, stack: ExitStack) -> None:
        self.base = base
        self.stack = stack
        self._started: dict[str, object] = {}
        self._failed: dict[str, BaseException] = {}
        self.synthetic_pid = 0
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
        return self._started[key]  # type: ignore[return-value]

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.base / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        self.stack.callback(quietly, name, lambda: stop_process(proc))
        return proc

    @property
    def synthetic(self) -> Path:
        """Socket of the synthetic backend (its own process)."""
        def start() -> Path:
            socket = self.base / "synthetic.sock"
            argv = [sys.executable, "-m", "runtimeproxy.lab.synthetic", "--socket", str(socket)]
            proc = self._spawn("synthetic", argv)
            wait_until(lambda: answers_version(socket), "synthetic backend", 30, proc)
            self.synthetic_pid = proc.pid
            return socket
        return self._once("synthetic", start)

    def proxy(self, name: str, backend: Path | str, *, extra_args: tuple[str, ...] = (),
              hook_dir: Path | None = None, log_level: str = "warning") -> ProxyProcess:
        """A proxy process called `name`, in front of `backend`."""
        def start() -> ProxyProcess:
            directory = self.base / name
            directory.mkdir()
            proxy = ProxyProcess(directory / "rp.sock", backend, hook_config_dir=hook_dir or directory / "hooks",
                                 extra_args=[f"--log-level={log_level}", *extra_args])
            self.stack.callback(quietly, f"proxy {name}", proxy.stop)
            proxy.start()
            return proxy
        return self._once(f"proxy {name}", start)

    @property
    def containerd(self) -> ContainerdInstance:
        """A private containerd with the lab's images imported."""
        def start() -> ContainerdInstance:
            problem = check_prerequisites()
            if problem:
                raise RuntimeError(f"cannot run containerd here: {problem}")
            instance = ContainerdInstance(self.base / "ctd")
            self.stack.callback(quietly, "containerd", instance.stop)
            instance.start()
            build_and_import(instance.address, IMAGE_CACHE)
            return instance
        return self._once("containerd", start)

    @property
    def containerd_proxy(self) -> ProxyProcess:
        return self.proxy("ctd-proxy", self.containerd.address)

    @property
    def plugin_proxy(self) -> ProxyProcess:
        """A proxy in front of containerd with the no-op plugin registered for all seven hooks."""
        def start() -> ProxyProcess:
            socket = self.base / "noop" / "noop.sock"
            argv = [sys.executable, str(BENCH_DIR / "noop_plugin.py"), "--socket", str(socket),
                    "--counts", str(self.plugin_counts_path)]
            self.plugin_proc = self._spawn("noop-plugin", argv)
            wait_until(lambda: serves(socket), "no-op plugin", 30, self.plugin_proc)
            hook_dir = self.base / "plugin-hooks"
            hook_dir.mkdir()
            (hook_dir / "noop.json").write_bytes(registration(socket, list(HOOK_NAMES)))
            # Logs at info: "plugin noop.json registered" is an info line (there are no per-call ones).
            proxy = self.proxy("plugin-proxy", self.containerd.address, hook_dir=hook_dir, log_level="info")
            wait_until(lambda: "plugin noop.json registered" in proxy.log_tail(200), "plugin registration", 15)
            return proxy
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


# --- the cases --------------------------------------------------------------------------------------------


def case_unary(lab: Lab, scale: Scale, report: CaseReport) -> None:
    sockets = {"direct": lab.synthetic, "proxy": lab.proxy("proxy", lab.synthetic).listen_path}
    run_async(_unary(sockets, scale, report))


async def _unary(sockets: dict[str, Path], scale: Scale, report: CaseReport) -> None:
    async with aio_channels(sockets) as channels:
        for label, path, request in (("Version", VERSION, VERSION_REQUEST), ("Status", STATUS, STATUS_REQUEST)):
            serial = await compare(
                channels, lambda ch: sequential_calls(ch, path, request, scale.unary_calls), scale.rounds,
                warmup=lambda ch: sequential_calls(ch, path, request, scale.unary_warmup))
            parallel = await compare(
                channels, lambda ch: concurrent_calls(ch, path, request, CONCURRENCY, scale.concurrent_seconds),
                scale.rounds, warmup=lambda ch: concurrent_calls(ch, path, request, CONCURRENCY, 0.2))
            report.raw[label] = {"c1": asdict(serial), f"c{CONCURRENCY}": asdict(parallel)}
            direct, proxy = serial["direct"], serial["proxy"]
            row = report.row(f"{label} p50 latency, c=1", "ms", direct["p50_ms"], proxy["p50_ms"])
            added = proxy["p50_ms"] - direct["p50_ms"]
            report.target(row, "added p50 <= 0.5 ms", added <= 0.5, f"+{added:.3f} ms")
            report.row(f"{label} p99 latency, c=1", "ms", direct["p99_ms"], proxy["p99_ms"])
            report.row(f"{label} throughput, c=1", "calls/s", direct["calls_per_s"], proxy["calls_per_s"])
            row = report.row(f"{label} throughput, c={CONCURRENCY}", "calls/s",
                             parallel["direct"]["calls_per_s"], parallel["proxy"]["calls_per_s"])
            report.target(row, f"{CONCURRENCY}-way >= 0.5x direct", row.ratio >= 0.5, f"{row.ratio:.2f}x")


def case_large(lab: Lab, scale: Scale, report: CaseReport) -> None:
    proxy = lab.proxy("proxy", lab.synthetic)
    decode_all = lab.proxy("decode-all", lab.synthetic, extra_args=("--benchmark-decode-all",))
    sockets = {"direct": lab.synthetic, "proxy": proxy.listen_path, "decode-all": decode_all.listen_path}
    pids = {"direct": lab.synthetic_pid, "proxy": proxy.pid, "decode-all": decode_all.pid}
    run_async(_large(sockets, pids, scale, report))
    report.notes.append(f"proxy memory after this case: VmRSS {proc_memory_mb(proxy.pid):.0f} MB, peak VmHWM "
                        f"{proc_memory_mb(proxy.pid, 'VmHWM'):.0f} MB (holds a few copies of the largest message)")


async def _large(sockets: dict[str, Path], pids: dict[str, int], scale: Scale, report: CaseReport) -> None:
    async with aio_channels(sockets) as channels:
        for mb in LARGE_SIZES_MB:  # the backend builds each canned answer on first use: not measured
            await large_calls(channels["direct"], mb * MB, 1)
        for mb in LARGE_SIZES_MB:
            names = ("direct", "proxy", "decode-all") if mb in DECODE_ALL_SIZES_MB else ("direct", "proxy")
            calls = scale.large_calls if mb <= 16 else max(2, scale.large_calls // 3)
            before = {name: ProcUsage.of(pids[name]) for name in names}
            try:
                result = await compare({name: channels[name] for name in names},
                                       lambda ch: large_calls(ch, mb * MB, calls), scale.rounds,
                                       warmup=lambda ch: large_calls(ch, mb * MB, 1))
            except Exception as error:  # one size failing (e.g. 48 MB) must not hide the others
                row = report.row(f"ListContainers {mb} MB", "", None, None, note=f"FAILED: {short(error)}")
                if mb == 48:
                    report.target(row, "48 MB passes", False, "failed")
                continue
            # Each process's usage over the whole comparison, per call it served (the backend serves all).
            served = {name: (1 + scale.rounds * calls) * (len(names) if name == "direct" else 1) for name in names}
            cpu = {name: ProcUsage.of(pids[name]).per_call_since(before[name], served[name]) for name in names}
            report.raw[f"{mb}MB"] = {**asdict(result), "usage_per_call": cpu}
            large_rows(report, mb, result, cpu)


def large_rows(report: CaseReport, mb: int, result: Comparison, usage: dict[str, Metrics]) -> None:
    direct, proxy = result["direct"], result["proxy"]
    row = report.row(f"ListContainers {mb} MB p50", "ms", direct["p50_ms"], proxy["p50_ms"])
    if mb == 4:
        report.target(row, "4 MB <= 1.5x direct", row.ratio <= 1.5, f"{row.ratio:.2f}x")
    if mb == 48:
        passed = proxy["response_bytes"] == direct["response_bytes"]
        report.target(row, "48 MB passes", passed, f"{proxy['response_bytes'] / MB:.1f} MB relayed")
    report.row(f"ListContainers {mb} MB throughput", "MB/s", direct["mb_per_s"], proxy["mb_per_s"])
    if "decode-all" in result.medians:
        decode = result["decode-all"]
        row = report.row(f"ListContainers {mb} MB p50, decode-all proxy", "ms", direct["p50_ms"],
                         decode["p50_ms"], note="proxy column: the --benchmark-decode-all proxy")
        gain = decode["p50_ms"] / proxy["p50_ms"]
        if mb == 16:
            report.target(row, "fast path >= 3x faster than decode-all at 16 MB", gain >= 3,
                          f"fast path {gain:.2f}x faster")
        else:
            row.target = f"fast path {gain:.2f}x faster"
    if mb == 16:
        backend = usage["direct"]["cpu_ms"]
        note = "direct column: the synthetic backend's own CPU per call, for scale"
        report.row(f"CPU per {mb} MB call, proxy process", "ms", backend, usage["proxy"]["cpu_ms"], note=note)
        if "decode-all" in usage:
            decode = usage["decode-all"]["cpu_ms"]
            row = report.row(f"CPU per {mb} MB call, decode-all proxy process", "ms", backend, decode, note=note)
            row.target = f"fast path uses {decode / usage['proxy']['cpu_ms']:.2f}x less CPU"
        processes = {"backend": usage["direct"], **{name: usage[name] for name in usage if name != "direct"}}
        report.notes.append(f"per {mb} MB call: " + "; ".join(
            f"{name} {u['cpu_ms']:.1f} ms CPU ({u['system_ms']:.1f} in the kernel), "
            f"{u['minor_faults']:.0f} minor page faults" for name, u in processes.items()))


def case_stream(lab: Lab, scale: Scale, report: CaseReport) -> None:
    sockets = {"direct": lab.synthetic, "proxy": lab.proxy("proxy", lab.synthetic).listen_path}
    run_async(_stream(sockets, scale, report))


async def _stream(sockets: dict[str, Path], scale: Scale, report: CaseReport) -> None:
    async with aio_channels(sockets) as channels:
        result = await compare(channels, lambda ch: stream_events(ch, scale.events), scale.rounds,
                               warmup=lambda ch: stream_events(ch, min(1000, scale.events)))
    report.raw["events"] = scale.events
    report.raw["result"] = asdict(result)
    report.row(f"GetContainerEvents, {scale.events} events", "events/s",
               result["direct"]["events_per_s"], result["proxy"]["events_per_s"])


def case_lifecycle(lab: Lab, scale: Scale, report: CaseReport) -> None:
    sockets = {"direct": Path(lab.containerd.address), "proxy": lab.containerd_proxy.listen_path,
               "plugin": lab.plugin_proxy.listen_path}
    log_root = lab.base / "pod-logs"
    with cri_clients(sockets) as clients:
        result = run_async(compare(
            clients, lambda client: asyncio.to_thread(pod_lifecycle, client, log_root), scale.lifecycles))
    counts = lab.plugin_counts()
    report.raw.update(result=asdict(result), plugin_calls=counts, plugin_proxy_log_level="info")
    direct, proxy, plugin = result["direct"], result["proxy"], result["plugin"]
    report.row("pod lifecycle (7 calls), median", "ms", direct["total_ms"], proxy["total_ms"])
    row = report.row("pod lifecycle, proxy + no-op plugin", "ms", direct["total_ms"], plugin["total_ms"],
                     note="proxy column: proxy with a no-op plugin on all 7 hooks")
    report.target(row, "no-op plugin lifecycle <= 1.15x direct", row.ratio <= 1.15, f"{row.ratio:.2f}x")
    steps = ", ".join(f"{step} {direct[step + '_ms']:.0f}/{proxy[step + '_ms']:.0f}/{plugin[step + '_ms']:.0f}"
                      for step in LIFECYCLE_STEPS)
    report.notes.append(f"median ms per step, direct/proxy/plugin: {steps}")
    expected = scale.lifecycles + 1  # measured rounds + the warm-up
    report.notes.append(f"no-op plugin calls (expected {expected} per lifecycle hook; "
                        f"PreUpdateContainerResources is not in a lifecycle): {json.dumps(counts, sort_keys=True)}")


def case_list(lab: Lab, scale: Scale, report: CaseReport) -> None:
    containerd = lab.containerd
    sockets = {"direct": Path(containerd.address), "proxy": lab.containerd_proxy.listen_path}
    with open_channel(containerd.address) as channel:
        client = CriClient(channel)
        pod_config = client.pod_config("bench-many", lab.base / "pod-logs" / "many")
        pod_id = client.run_pod(pod_config)
        try:
            started = time.perf_counter()
            create_containers(client, pod_id, pod_config, scale.containers)
            report.notes.append(f"created {scale.containers} containers (not started) in one pod in "
                                f"{time.perf_counter() - started:.1f} s")
            run_async(_list(sockets, scale, report))
        finally:
            started = time.perf_counter()
            client.stop_pod(pod_id)
            client.remove_pod(pod_id)
            report.notes.append(f"removed the pod and its containers in {time.perf_counter() - started:.1f} s")


def create_containers(client: CriClient, pod_id: str, pod_config: Any, count: int) -> None:
    def create(index: int) -> str:
        return client.create_container(pod_id, client.container_config(f"c{index}"), pod_config)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(count)))


async def _list(sockets: dict[str, Path], scale: Scale, report: CaseReport) -> None:
    async with aio_channels(sockets) as channels:
        answer = await channels["proxy"].unary_unary(LIST_CONTAINERS)(LIST_REQUEST)
        listed = cri.ListContainersResponse.FromString(answer)
        result = await compare(
            channels, lambda ch: sequential_calls(ch, LIST_CONTAINERS, LIST_REQUEST, scale.list_calls), scale.rounds,
            warmup=lambda ch: sequential_calls(ch, LIST_CONTAINERS, LIST_REQUEST, 5))
    report.raw["result"] = asdict(result)
    direct, proxy = result["direct"], result["proxy"]
    size = f"{len(listed.containers)} containers, {direct['response_bytes'] / 1024:.0f} KB"
    report.row(f"ListContainers p50 ({size})", "ms", direct["p50_ms"], proxy["p50_ms"])
    report.row("ListContainers p99", "ms", direct["p99_ms"], proxy["p99_ms"])


def case_resources(lab: Lab, scale: Scale, report: CaseReport) -> None:
    proxy = lab.proxy("resource-proxy", lab.synthetic)  # a fresh proxy, used by nothing else
    time.sleep(1.0)  # settle after start
    idle = proc_memory_mb(proxy.pid)
    batches = run_async(_resources(proxy, lab.synthetic_pid, scale))
    report.raw.update(rss_idle_mb=idle, batches=batches, calls_per_batch=scale.resource_calls,
                      concurrency=CONCURRENCY)
    first, second = batches
    report.row("CPU per forwarded Version call, 1st 10k", "us", first["backend_cpu_us"], first["proxy_cpu_us"],
               note="direct column: the synthetic backend's own CPU per call, for scale")
    report.row("CPU per forwarded Version call, 2nd 10k", "us", second["backend_cpu_us"], second["proxy_cpu_us"],
               note="direct column: the synthetic backend's own CPU per call, for scale")
    row = report.row("proxy RSS idle after start", "MB", None, idle)
    report.target(row, "RSS <= 80 MB", idle <= 80, f"{idle:.1f} MB")
    report.row(f"proxy RSS after {scale.resource_calls} calls", "MB", None, first["rss_mb"])
    row = report.row(f"proxy RSS after {2 * scale.resource_calls} calls", "MB", None, second["rss_mb"])
    peak = max(idle, first["rss_mb"], second["rss_mb"])
    report.target(row, "RSS <= 80 MB", peak <= 80, f"max {peak:.1f} MB")
    growth = second["rss_mb"] - first["rss_mb"]
    row = report.row(f"proxy RSS growth over the last {scale.resource_calls} calls", "MB", None, growth)
    report.target(row, f"no growth (<= {NO_GROWTH_MB:g} MB)", growth <= NO_GROWTH_MB, f"{growth:+.1f} MB")


async def _resources(proxy: ProxyProcess, backend_pid: int, scale: Scale) -> list[Metrics]:
    batches: list[Metrics] = []
    async with aio_channels({"proxy": proxy.listen_path}) as channels:
        for _ in range(2):
            proxy_cpu, backend_cpu = proc_cpu_seconds(proxy.pid), proc_cpu_seconds(backend_pid)
            started = time.perf_counter()
            await counted_calls(channels["proxy"], VERSION, VERSION_REQUEST, CONCURRENCY, scale.resource_calls)
            elapsed = time.perf_counter() - started
            batches.append({
                "proxy_cpu_us": (proc_cpu_seconds(proxy.pid) - proxy_cpu) / scale.resource_calls * 1e6,
                "backend_cpu_us": (proc_cpu_seconds(backend_pid) - backend_cpu) / scale.resource_calls * 1e6,
                "rss_mb": proc_memory_mb(proxy.pid),
                "calls_per_s": scale.resource_calls / elapsed,
            })
    return batches


MEMORY_BURST_RESPONSES = 6  # concurrent ListContainers of 48 MB ...
MEMORY_BURST_REQUESTS = 6  # ... and concurrent 15 MB requests, in one burst
MEMORY_REJECTED_REQUESTS = 3  # 250 MB requests, over the default request limit
MEMORY_WATCH_SECONDS = 8.0  # how long RSS is watched after the burst


def case_memory(lab: Lab, scale: Scale, report: CaseReport) -> None:
    proxy = lab.proxy("memory-proxy", lab.synthetic)  # a fresh proxy, default limits
    time.sleep(1.0)  # settle after start
    idle = proc_memory_mb(proxy.pid)
    run_async(_memory_burst(proxy.listen_path))
    after_burst = proc_memory_mb(proxy.pid)
    peak = proc_memory_mb(proxy.pid, "VmHWM")
    back_after, watched = _seconds_until_rss_below(proxy.pid, 2 * idle, MEMORY_WATCH_SECONDS)
    settled = proc_memory_mb(proxy.pid)
    rejected = run_async(_rejected_requests(proxy.listen_path))
    after_rejected = proc_memory_mb(proxy.pid)
    report.raw.update(rss_idle_mb=idle, rss_after_burst_mb=after_burst, rss_peak_mb=peak, rss_settled_mb=settled,
                      seconds_to_2x_idle=back_after, rss_watch=watched, rejected=rejected,
                      rss_after_rejected_mb=after_rejected)
    report.row("proxy RSS idle after start", "MB", None, idle)
    report.row("proxy RSS right after a burst of large messages", "MB", None, after_burst)
    report.notes.append(f"the burst: {MEMORY_BURST_RESPONSES} ListContainers answers of 48 MB and "
                        f"{MEMORY_BURST_REQUESTS} requests of 15 MB, all at once; RSS every 0.5 s after it: "
                        + " ".join(f"{mb:.0f}" for mb in watched) + " MB")
    report.row("proxy RSS peak (VmHWM)", "MB", None, peak)
    row = report.row(f"proxy RSS {MEMORY_WATCH_SECONDS:g} s after going idle", "MB", None, settled)
    met = back_after is not None
    report.target(row, f"<= 2x idle within {MEMORY_WATCH_SECONDS:g} s", met,
                  f"after {back_after:.1f} s" if met else "not back")
    row = report.row(f"proxy RSS after {MEMORY_REJECTED_REQUESTS} rejected 250 MB requests", "MB", None,
                     after_rejected)
    report.target(row, "<= 2x idle", after_rejected <= 2 * idle, f"{after_rejected:.0f} MB; {rejected}")


async def _memory_burst(socket: Path) -> None:
    async with aio_channels({"proxy": socket}) as channels:
        call = channels["proxy"].unary_unary(LIST_CONTAINERS)
        answers = [call(LIST_REQUEST, metadata=((RESPONSE_BYTES_KEY, str(48 * MB)),))
                   for _ in range(MEMORY_BURST_RESPONSES)]
        requests = [call(bytes(15 * MB)) for _ in range(MEMORY_BURST_REQUESTS)]
        await asyncio.gather(*answers, *requests)


async def _rejected_requests(socket: Path) -> str:
    """Send requests over the default limit; the codes they got, tallied."""
    codes: dict[str, int] = {}
    async with aio_channels({"proxy": socket}) as channels:
        call = channels["proxy"].unary_unary(LIST_CONTAINERS)
        for _ in range(MEMORY_REJECTED_REQUESTS):
            try:
                await call(bytes(250 * 1000 * 1000), timeout=60)
                code = "OK"
            except grpc.aio.AioRpcError as error:
                code = error.code().name
            codes[code] = codes.get(code, 0) + 1
    return ", ".join(f"{count} {code}" for code, count in codes.items())


def _seconds_until_rss_below(pid: int, limit_mb: float, seconds: float) -> tuple[float | None, list[float]]:
    """Polls RSS for `seconds`; when it first fell below `limit_mb` (None: never) and what it read each 0.5 s."""
    started = time.perf_counter()
    readings: list[float] = []
    below_at: float | None = None
    while (elapsed := time.perf_counter() - started) < seconds:
        readings.append(proc_memory_mb(pid))
        if below_at is None and readings[-1] <= limit_mb:
            below_at = elapsed
        time.sleep(0.5)
    return below_at, readings


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    run: Callable[[Lab, Scale, CaseReport], None]


CASES = {case.name: case for case in (
    Case("unary", "1. small unary, synthetic backend", case_unary),
    Case("large", "2. large unary response (ListContainers), synthetic backend", case_large),
    Case("stream", "3. server streaming (GetContainerEvents), synthetic backend", case_stream),
    Case("lifecycle", "4. pod lifecycle, real containerd", case_lifecycle),
    Case("list", "5. ListContainers, real containerd with many containers", case_list),
    Case("resources", "6. proxy resource use (synthetic backend, 16-way Version calls)", case_resources),
    Case("memory", "7. proxy memory after large messages (synthetic backend)", case_memory),
)}


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


def number(value: float | None) -> str:
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def render(reports: list[CaseReport], meta: dict[str, Any]) -> str:
    dirty = " (dirty)" if meta["git_dirty"] else ""
    lines = [f"runtimeproxy benchmark  {meta['date']}  commit {meta['git_commit']}{dirty}",
             f"{meta['command']}",
             f"{meta['nproc']} cpus ({meta['cpu_model']}), Python {meta['python']}, grpcio {meta['grpcio']}, "
             f"kernel {meta['kernel']}, load {meta['loadavg_start']} -> {meta.get('loadavg_end')}",
             ""]
    header = f"{'metric':<46} {'unit':<8} {'direct':>10} {'proxy':>10} {'ratio':>7}  target"
    for report in reports:
        lines.append(f"== {report.title}  [{report.seconds:.1f} s]")
        if report.rows:
            lines.append(header)
        for row in report.rows:
            ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
            lines.append(f"{row.metric:<46} {row.unit:<8} {number(row.direct):>10} {number(row.proxy):>10} "
                         f"{ratio:>7}  {row.target}".rstrip())
            if row.note:
                lines.append(f"{'':<4}({row.note})")
        lines.extend(f"    note: {note}" for note in report.notes)
        if report.error:
            lines.append(f"    ERROR: {report.error}")
        lines.append("")
    checks = [check for report in reports for check in report.checks]
    if checks:
        lines.append("targets:")
        lines.extend(f"  {'met   ' if c.met else 'MISSED'}  {c.target:<48} {c.measured:<24} [{c.metric}]"
                     for c in checks)
    return "\n".join(lines)


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


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
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": protobuf.__version__,
        "kernel": platform.release(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def write_json(path: Path, meta: dict[str, Any], scale: Scale, reports: list[CaseReport]) -> None:
    document = {
        "meta": meta,
        "scale": asdict(scale),
        "cases": [{**asdict(report), "rows": [{**asdict(row), "ratio": row.ratio} for row in report.rows]}
                  for report in reports],
        "targets": [asdict(check) for report in reports for check in report.checks],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations: the whole run in under a minute")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the results (%(default)s)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: %(default)s")
    args = parser.parse_args(argv)
    args.case_names = [name.strip() for name in args.cases.split(",") if name.strip()]
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
    print(render(reports, meta))
    write_json(args.json, meta, scale, reports)
    print(f"\nresults written to {args.json}  (total {meta['total_seconds']} s)")
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
