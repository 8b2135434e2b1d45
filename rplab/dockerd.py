"""Start and stop a real, private dockerd (Debian's docker.io) for the lab and the e2e tests.

Every path lives under one base directory: data root, exec root (dockerd's own containerd, namespace
`moby`, keeps its state there), pid file, daemon.json, socket, log. No bridge, iptables or masquerade:
containers run with host or no networking, and nothing changes the host's network.

Root here lacks CAP_SYS_RESOURCE, so a negative `OomScoreAdj` (cri-dockerd gives sandboxes -998) makes runc
fail; dockerd cannot cap it, so its default runtime is a small wrapper that rewrites a negative
`oomScoreAdj` in the bundle's config.json to 0 and then runs runc.

`DockerModeProxy` runs the proxy process in Docker mode, `CriDockerd` the kubelet-side CRI server in front
of it. The third-party clients the Docker-mode tests drive (`cri-dockerd`, `crictl`) are found by `lab.tools`.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rplab.containerd import UNIX_PATH_MAX, _mount_points, _unmount
from rplab.process import ADMIN_SOCKET_WAIT_SECONDS, ProxyProcess, ProxyProcessError
from rplab.runtimes import Runtime, selected

RUNC_WRAPPER_NAME = "rp-runc"
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 20.0
CRI_DOCKERD_START_ATTEMPTS = 3
START_RACE_MESSAGE = "RegisterService after Server.Serve"
OOM_SCORE_ADJUST_REFUSED_FROM = 25  # dockerd 25 and later refuse --oom-score-adjust

RUNC_WRAPPER = """#!/bin/sh
# runtimeproxy lab: root here cannot lower oom_score_adj, so a negative oomScoreAdj becomes 0.
bundle=
prev=
for arg in "$@"; do
  case "$prev" in --bundle|-b) bundle=$arg ;; esac
  case "$arg" in --bundle=*) bundle=${arg#--bundle=} ;; esac
  prev=$arg
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  sed -i 's/"oomScoreAdj":[ ]*-[0-9]*/"oomScoreAdj":0/' "$bundle/config.json"
fi
exec %(runc)s "$@"
"""

# dockerd writes its containerd's config and starts the `containerd` it finds on PATH: this one, first on PATH.
# containerd 2.x turns its own NRI on by default, on the host-wide /var/run/nri/nri.sock: off here.
CONTAINERD_WRAPPER = """#!/bin/sh
# runtimeproxy lab: dockerd's containerd without containerd's own NRI.
prev=
for arg in "$@"; do
  if [ "$prev" = --config ] && ! grep -q 'io.containerd.nri.v1.nri' "$arg"; then
    printf '\\n[plugins."io.containerd.nri.v1.nri"]\\n  disable = true\\n' >> "$arg"
  fi
  prev=$arg
done
exec %(containerd)s "$@"
"""


class DockerdError(RuntimeError):
    """The lab dockerd failed to start or answer."""


def check_docker_prerequisites() -> str | None:
    """None when this machine can run a lab dockerd, else a human-readable reason."""
    problems = [] if os.geteuid() == 0 else ["must run as root (dockerd needs it)"]
    for binary in ("dockerd", "docker", "runc"):
        if shutil.which(binary) is None:
            problems.append(f"{binary} not found (apt-get install -y docker.io)")
    return "; ".join(problems) or None


class _Daemon:
    """A lab daemon in its own session, logging to `log_path`, stopped with SIGTERM (then SIGKILL)."""

    log_name = "daemon.log"

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir).absolute()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.base_dir / self.log_name

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          start_new_session=True, env=env)
        return self._proc

    def _terminate(self, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no {self.log_name})"


class DockerdInstance(_Daemon):
    """A private dockerd rooted at `base_dir`; `socket` is its Docker Engine API endpoint. `runtime`: which
    dockerd (rplab.runtimes); by default the one $RUNTIMEPROXY_DOCKERD names."""

    log_name = "dockerd.log"

    def __init__(self, base_dir: Path, runtime: Runtime | None = None,
                 daemon_config: Mapping[str, object] | None = None) -> None:
        """`daemon_config`: dockerd's daemon.json (e.g. `{"features": {"cdi": true}, "cdi-spec-dirs": [...]}`)."""
        super().__init__(base_dir)
        self.runtime = runtime or selected("dockerd")
        self.daemon_config = dict(daemon_config or {})
        containerd_socket = self.exec_root / "containerd" / "containerd.sock.ttrpc"
        if len(str(containerd_socket)) > UNIX_PATH_MAX:
            raise DockerdError(f"base dir too long for dockerd's sockets: {self.base_dir}")

    @property
    def socket(self) -> Path:
        return self.base_dir / "docker.sock"

    @property
    def exec_root(self) -> Path:
        return self.base_dir / "x"

    @property
    def cli(self) -> Path:
        """The docker CLI of this dockerd's package set (not /usr/local/bin's, which no package owns)."""
        return self.runtime.binary("docker")

    @property
    def wrapper_dir(self) -> Path:
        return self.base_dir / "bin"

    def argv(self) -> list[str]:
        b = self.base_dir
        oom = ["--oom-score-adjust=0"] if self.runtime.major < OOM_SCORE_ADJUST_REFUSED_FROM else []
        return [
            str(self.runtime.binary("dockerd")), "--data-root", str(b / "data"), "--exec-root", str(self.exec_root),
            "--pidfile", str(b / "dockerd.pid"), "--config-file", str(b / "daemon.json"),
            "-H", f"unix://{self.socket}", "--exec-opt", "native.cgroupdriver=cgroupfs",
            "--storage-driver", "overlay2", "--bridge=none", "--iptables=false", "--ip-forward=false",
            "--ip-masq=false", *oom, "--group", "root",
            "--add-runtime", f"{RUNC_WRAPPER_NAME}={b / RUNC_WRAPPER_NAME}",
            "--default-runtime", RUNC_WRAPPER_NAME,
        ]

    def _write_files(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "daemon.json").write_text(json.dumps(self.daemon_config) + "\n")
        runc = shutil.which("runc") or "/usr/sbin/runc"
        wrapper = self.base_dir / RUNC_WRAPPER_NAME
        wrapper.write_text(RUNC_WRAPPER % {"runc": runc})
        wrapper.chmod(0o755)
        if not self.runtime.system:
            self.wrapper_dir.mkdir(exist_ok=True)
            containerd = self.wrapper_dir / "containerd"
            containerd.write_text(CONTAINERD_WRAPPER % {"containerd": self.runtime.binary("containerd")})
            containerd.chmod(0o755)

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        self._write_files()
        self.socket.unlink(missing_ok=True)
        proc = self._spawn(self.argv(), self.runtime.environment(first=(self.wrapper_dir,)))
        deadline = time.monotonic() + timeout
        while self.docker("version", check=False, timeout=5).returncode != 0:
            if proc.poll() is not None:
                raise DockerdError(f"dockerd exited with {proc.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise DockerdError(f"dockerd not ready after {timeout:.0f}s\n{self.log_tail()}")
            time.sleep(0.2)

    def docker(self, *args: str, check: bool = True, timeout: float = 60,
               input_bytes: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run the docker CLI against this dockerd directly."""
        cmd = [str(self.cli), "-H", f"unix://{self.socket}", *args]
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input_bytes, check=False)
        if check and proc.returncode != 0:
            raise DockerdError(f"{' '.join(cmd)} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc

    def load_images(self, archives: Mapping[str, Path]) -> None:
        for archive in archives.values():
            self.docker("load", "-i", str(archive), timeout=120)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Remove every container, stop dockerd (it stops its containerd), unmount leftovers."""
        if self._proc is not None and self._proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.decode().split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=60)
        self._terminate(timeout)
        prefix = str(self.base_dir) + "/"
        for point in sorted({m for m in _mount_points() if m.startswith(prefix)}, key=len, reverse=True):
            try:
                _unmount(point)
            except OSError:
                pass



class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket (dockerd's, or the proxy's in Docker mode); `timeout` bounds connect and reads."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self._path))


def docker_api_ping(socket_path: Path, timeout: float = 2.0) -> bool:
    """True when an HTTP `GET /_ping` on `socket_path` answers 200 (dockerd, or the proxy in front)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout)
            probe.connect(str(socket_path))
            probe.sendall(b"GET /_ping HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n")
            return probe.recv(64).startswith(b"HTTP/1.1 200 ")
    except OSError:
        return False


class DockerModeProxy(ProxyProcess):
    """The proxy process in `--backend-runtime-mode=Docker`, ready once `/_ping` answers through it."""

    def __init__(self, listen_path: Path, docker_socket: Path, extra_args: list[str] | None = None,
                 cwd: Path | None = None) -> None:
        """`cwd`: run from that checkout (`python -m runtimeproxy` imports the tree it starts in)."""
        super().__init__(listen_path, docker_socket,
                         extra_args=["--backend-runtime-mode=Docker", *(extra_args or [])], cwd=cwd)

    def wait_until_listening(self, timeout: float, wait_serving: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not (docker_api_ping(self.listen_path) if wait_serving else self.listen_path.exists()):
            if self._proc is not None and self._proc.poll() is not None:
                raise ProxyProcessError(f"proxy exited with {self._proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ProxyProcessError(f"proxy not ready after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        self._wait_for_admin_socket(min(ADMIN_SOCKET_WAIT_SECONDS, deadline - time.monotonic()))


class CriDockerd(_Daemon):
    """cri-dockerd serving CRI on `base_dir/cri.sock` in front of `docker_socket`; host-network pods only
    (no network plugin), every path private to `base_dir`."""

    log_name = "cri-dockerd.log"

    def __init__(self, binary: Path, base_dir: Path, docker_socket: Path, pause_image: str) -> None:
        super().__init__(base_dir)
        self.binary = binary
        self.docker_socket = docker_socket
        self.pause_image = pause_image

    @property
    def socket(self) -> Path:
        return self.base_dir / "cri.sock"

    def start(self, ready: Callable[[], bool], timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Start it and poll `ready` (e.g. a crictl version) until it answers.

        cri-dockerd 0.3.1 sometimes dies at start-up on a race of its own ("grpc: Server.RegisterService
        after Server.Serve"): then it is started again, a bounded number of times.
        """
        for _ in range(CRI_DOCKERD_START_ATTEMPTS - 1):
            try:
                return self._start_once(ready, timeout)
            except DockerdError as error:
                if START_RACE_MESSAGE not in str(error):
                    raise
        self._start_once(ready, timeout)

    def _start_once(self, ready: Callable[[], bool], timeout: float) -> None:
        (self.base_dir / "root").mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        argv = [str(self.binary), "--container-runtime-endpoint", f"unix://{self.socket}",
                "--docker-endpoint", f"unix://{self.docker_socket}",
                "--pod-infra-container-image", self.pause_image, "--network-plugin=",
                "--cri-dockerd-root-directory", str(self.base_dir / "root"),
                "--streaming-bind-addr", "127.0.0.1:0"]
        proc = self._spawn(argv)
        deadline = time.monotonic() + timeout
        while not (self.socket.exists() and ready()):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DockerdError(f"cri-dockerd did not come up:\n{self.log_tail(5)}")
            time.sleep(0.1)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        self._terminate(timeout)

