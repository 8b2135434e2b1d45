"""The benchmark's peers: the processes the client calls (the backends, the proxy, the relays, the no-op plugin),
each started on first use by one Lab and stopped by its ExitStack; and the wire constants they are checked with."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from bench.docker_node import DockerNode
from bench.gopeers import build_benchgo, run_client, run_docker_client
from bench.procfs import CpuUsage, memory_mb, threads_cpu_seconds
from rplab.containerd import ContainerdInstance, check_prerequisites
from rplab.cri import open_channel
from rplab.docker_images import build_docker_archives
from rplab.dockerd import DockerdInstance, DockerModeProxy, check_docker_prerequisites, docker_api_ping
from rplab.example_plugin import registration
from rplab.images import build_and_import
from rplab.koord_proxy import KoordProxyProcess
from rplab.nri_plugin import install_noop
from rplab.process import ProxyProcess
from rplab.synthetic import list_containers_response
from runtimeproxy.admin.ctl import main as ctl_main
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

T = TypeVar("T")
Metrics = dict[str, float]

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
IMAGE_CACHE = Path.home() / ".cache" / "runtimeproxy" / "images"

RUNTIME, IMAGES = "/runtime.v1.RuntimeService/", "/runtime.v1.ImageService/"
VERSION, LIST_CONTAINERS = RUNTIME + "Version", RUNTIME + "ListContainers"
VERSION_REQUEST = cri.VersionRequest(version="v1").SerializeToString()
VERSION_RESPONSE = cri.VersionResponse(version="0.1.0", runtime_name="benchgo", runtime_version="1.0",
                                       runtime_api_version="v1").SerializeToString()

CHILD_EXIT_SECONDS = 0.2
SOCAT_BUFFER_BYTES = 1 << 20  # socat's default 8 KiB per read/write makes it the slowest hop for MBs
SOCAT_BACKLOG = 128  # socat's default listen backlog of 5 refuses 16 HTTP clients connecting at once



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

    def __init__(self, base: Path, stack: ExitStack, baseline: Path | None = None) -> None:
        """`baseline`: a checkout of another revision, run as the extra peers "baseline" (and
        "baseline-plugin", "baseline-nri") beside this checkout's proxy, so one run compares before and after a change."""
        self.base = base
        self.stack = stack
        self.baseline = baseline
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
                    "socat": self._socat, "go-proxy": self._go_proxy, "baseline": self._baseline,
                    "koord": self._koord, "grpc-only": self._grpc_only}
        return self._once(key, lambda: starters[kind](key.replace(" ", "-"), upstream))

    def _proxy(self, name: str, upstream: Peer, hook_dir: Path | None = None, log_level: str = "warning",
               extra_args: tuple[str, ...] = (), checkout: Path | None = None) -> Peer:
        """The proxy in front of `upstream`: CRI mode, or Docker mode in front of an HTTP peer (dockerd).
        `checkout`: run that checkout's proxy (`python -m runtimeproxy` there imports its own tree first)."""
        directory = self.base / name
        directory.mkdir()
        arguments = [f"--log-level={log_level}", *extra_args]
        proxy: ProxyProcess
        if upstream.http:
            proxy = DockerModeProxy(directory / "rp.sock", upstream.socket, extra_args=arguments, cwd=checkout)
        else:
            hooks = hook_dir or directory / "hooks"
            proxy = ProxyProcess(directory / "rp.sock", upstream.socket, hook_config_dir=hooks, extra_args=arguments,
                                 cwd=checkout)
        self.stack.callback(quietly, f"proxy {name}", proxy.stop)
        proxy.start()
        assert proxy.pid is not None
        self._started[f"process {name}"] = proxy
        return Peer("proxy", proxy.listen_path, proxy.pid, settled_rss(proxy.pid), http=upstream.http)

    def _grpc_only(self, name: str, upstream: Peer) -> Peer:
        """The proxy with --cri-frame-relay=false (CRI mode only): every call through the gRPC server."""
        peer = self._proxy(name, upstream, extra_args=("--cri-frame-relay=false",))
        peer.name = "grpc-only"
        return peer

    def _baseline(self, name: str, upstream: Peer) -> Peer:
        """The baseline checkout's proxy in front of `upstream` (CRI mode, or Docker mode before dockerd)."""
        assert self.baseline is not None
        peer = self._proxy(name, upstream, checkout=self.baseline)
        peer.name = "baseline"
        return peer

    def _koord(self, name: str, upstream: Peer, hook_dir: Path | None = None) -> Peer:
        """koordinator's koord-runtime-proxy in front of `upstream`, in a mount namespace of its own
        (rplab.koord_proxy): the program ours replaces, built from the Go module proxy (first build ~6 min)."""
        directory = self.base / name
        directory.mkdir()
        proxy = KoordProxyProcess(directory / "koord.sock", upstream.socket, hook_config_dir=hook_dir)
        self.stack.callback(quietly, f"koord {name}", proxy.stop)
        proxy.start(timeout=60)
        assert proxy.pid is not None
        self._started[f"process {name}"] = proxy
        return Peer("koord", proxy.listen_path, proxy.pid, settled_rss(proxy.pid))

    @property
    def koord_plugin_proxy(self) -> Peer:
        """koord-runtime-proxy in front of containerd with the same no-op plugin registered for all seven hooks."""
        def start() -> Peer:
            hook_dir = self.noop_registration("koord-plugin")
            peer = self._koord("koord-plugin", self.containerd, hook_dir)
            proxy = self._started["process koord-plugin"]
            # It logs "update config for <path>" when it has read a registration file.
            wait_until(lambda: "update config for" in proxy.log_tail(200), "koord plugin registration", 15)
            peer.name = "koord-plugin"
            return peer
        return self._once("koord plugin proxy", start)

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
        return self._served("aio-relay", socket, [sys.executable, "-m", "bench.aio_relay",
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
    def noop_plugin_socket(self) -> Path:
        """The no-op plugin (the example plugin answering every hook with an empty response: no change, least
        work), started once and shared by every proxy that registers it."""
        def start() -> Path:
            socket = self.base / "noop" / "noop.sock"
            argv = [sys.executable, "-m", "rplab.example_plugin", "--socket", str(socket), "--empty",
                    "--counts", str(self.plugin_counts_path)]
            self.plugin_proc = self._spawn("noop-plugin", argv)
            wait_until(lambda: serves(socket), "no-op plugin", 30, self.plugin_proc)
            return socket
        return self._once("noop plugin", start)

    @property
    def plugin_proxy(self) -> Peer:
        """A proxy in front of containerd with the no-op plugin registered for all seven hooks."""
        return self._once("plugin proxy", lambda: self._plugin_proxy("plugin", None))

    @property
    def untraced_plugin_proxy(self) -> Peer:
        """The plugin proxy with the decision trace off (--hook-trace-entries=0): the trace's cost is the gap."""
        return self._once("untraced plugin proxy",
                          lambda: self._plugin_proxy("plugin-notrace", None, ("--hook-trace-entries=0",)))

    @property
    def baseline_plugin_proxy(self) -> Peer:
        """The baseline checkout's proxy with the same no-op plugin on all seven hooks."""
        return self._once("baseline plugin proxy", lambda: self._plugin_proxy("baseline-plugin", self.baseline))

    def noop_registration(self, name: str) -> Path:
        """A hook directory of its own registering the no-op plugin for all seven hooks."""
        hook_dir = self.base / f"{name}-hooks"
        hook_dir.mkdir()
        (hook_dir / "noop.json").write_bytes(registration(self.noop_plugin_socket, list(HOOK_NAMES)))
        return hook_dir

    def _plugin_proxy(self, name: str, checkout: Path | None, extra_args: tuple[str, ...] = ()) -> Peer:
        hook_dir = self.noop_registration(name)
        # Logs at info: "plugin noop.json registered" is an info line (there are no per-call ones).
        peer = self._proxy(f"{name}-proxy", self.containerd, hook_dir=hook_dir, log_level="info", checkout=checkout,
                           extra_args=extra_args)
        proxy = self._started[f"process {name}-proxy"]
        wait_until(lambda: "plugin noop.json registered" in proxy.log_tail(200), "plugin registration", 15)
        peer.name = name
        return peer

    @property
    def nri_proxy(self) -> Peer:
        """A proxy in front of containerd hosting NRI, with one no-op NRI plugin (rplab.nri_plugin) subscribed to
        every event, launched by the proxy from its plugin directory as NRI runtimes launch plugins."""
        return self._once("nri proxy", lambda: self._nri_hosting_proxy("nri", hook_dir=None))

    @property
    def soak_proxy(self) -> Peer:
        """A proxy in front of containerd with both plugin kinds: the no-op hook plugin on all seven hooks and one
        hosted no-op NRI plugin on every event (the soak's node)."""
        return self._once("soak proxy", lambda: self._nri_hosting_proxy("soak", self.noop_registration("soak")))

    @property
    def baseline_nri_proxy(self) -> Peer:
        """The baseline checkout's proxy hosting NRI with the same no-op NRI plugin."""
        return self._once("baseline nri proxy",
                          lambda: self._nri_hosting_proxy("baseline-nri", hook_dir=None, checkout=self.baseline))

    def _nri_hosting_proxy(self, name: str, hook_dir: Path | None, checkout: Path | None = None) -> Peer:
        directory = self.base / f"{name}-nri"
        plugins = directory / "plugins"
        directory.mkdir(mode=0o755, parents=True)
        directory.chmod(0o755)
        install_noop(plugins)
        peer = self._proxy(f"{name}-proxy", self.containerd, hook_dir=hook_dir, log_level="info", extra_args=(
            f"--nri-socket={directory / 'nri.sock'}", f"--nri-plugin-path={plugins}",
            f"--nri-plugin-config-path={directory / 'conf.d'}"), checkout=checkout)
        proxy = self._started[f"process {name}-proxy"]
        wait_until(lambda: "NRI plugin 10-noop attached" in proxy.log_tail(200), "NRI plugin attach", 15)
        if hook_dir is not None:
            wait_until(lambda: "plugin noop.json registered" in proxy.log_tail(200), "plugin registration", 15)
        peer.name = name
        return peer

    def nri_counts(self, name: str = "nri") -> dict[str, int]:
        """The NRI plugin's calls per event so far, from the `runtimeproxyctl status` of the NRI-hosting proxy
        `name` (nri_proxy's, or soak_proxy's: "soak")."""
        proxy = self._started.get(f"process {name}-proxy")
        if proxy is None:
            return {}
        out = io.StringIO()
        if ctl_main([f"--admin-endpoint={proxy.admin_path}", "status", "-o", "json"], out=out) != 0:
            return {}
        plugins = json.loads(out.getvalue()).get("nri_plugins", [])
        return {entry["hook"]: int(entry["calls"]) for plugin in plugins for entry in plugin.get("event_stats", [])}

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
