"""The proxy as a real process, for the lab, e2e tests and benchmarks.

By default it is this interpreter's `python -m runtimeproxy`; `command` names another build of the same
command line (an installed wheel's `koord-runtime-proxy`, the single-file binary, a command in a chroot).
`activation` starts it on listening sockets held by the caller, as a .socket unit does (rplab.activation).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rplab.activation import ActivationSockets
from rplab.cri import open_channel


# How long a start waits for the admin socket after the CRI socket serves.
ADMIN_SOCKET_WAIT_SECONDS = 5.0


class ProxyProcessError(RuntimeError):
    pass


def end_process(process: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float,
                signum: int = signal.SIGTERM) -> bool:
    """`signum`, then up to `timeout` seconds for the process to exit; killed if it did not (False then)."""
    if process.poll() is not None:
        return True
    process.send_signal(signum)
    try:
        process.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
        return False


class ProxyProcess:
    def __init__(
        self,
        listen_path: Path,
        runtime_path: Path | str,
        *,
        hook_config_dir: Path | None = None,
        log_path: Path | None = None,
        extra_args: list[str] | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
        activation: ActivationSockets | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.listen_path = listen_path
        self.runtime_path = str(runtime_path)
        self.hook_config_dir = hook_config_dir or listen_path.parent / "hookserver.d"
        self.log_path = log_path or listen_path.with_suffix(".log")
        self.admin_path = listen_path.parent / "admin.sock"
        self.extra_args = extra_args or []
        self.command = command or [sys.executable, "-m", "runtimeproxy"]
        self.cwd = cwd
        self.activation = activation
        self.environment = environment or {}  # set for the process, over this one's
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def argv(self) -> list[str]:
        return [
            *self.command,
            f"--koord-runtimeproxy-endpoint={self.listen_path}",
            f"--remote-runtime-service-endpoint={self.runtime_path}",
            f"--runtime-hook-config-dir={self.hook_config_dir}",
            # Private operator endpoints: never the node's global admin socket, state or port.
            f"--admin-endpoint={self.admin_path}",
            f"--state-dir={self.listen_path.parent / 'state'}",
            "--metrics-bind-address=",
            *self.extra_args,
        ]

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 30.0, wait_serving: bool = True) -> None:
        """Spawn it and wait until it serves; one that never does is stopped before the error is raised (no test
        may leave a proxy running behind it)."""
        self.spawn()
        try:
            self.wait_until_listening(timeout, wait_serving)
        except BaseException:
            proc, self._proc = self._proc, None
            if proc is not None and proc.poll() is None:
                end_process(proc, 5)
            raise

    def spawn(self) -> None:
        """Start the process without waiting for it to listen."""
        self.hook_config_dir.mkdir(parents=True, exist_ok=True)
        argv, environment, pass_fds = self.argv, {**os.environ, **self.environment}, ()
        if self.activation is not None:
            argv = self.activation.launch_argv(argv)
            environment, pass_fds = self.activation.launch_environment(environment), self.activation.pass_fds
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd, env=environment,
                                          pass_fds=pass_fds)

    def returncode(self) -> int | None:
        """The exit code once the process has exited; None while it runs (or was never started)."""
        return self._proc.poll() if self._proc else None

    def wait_until_listening(self, timeout: float, wait_serving: bool = True) -> None:
        """Until it answers as ready (``ready``)."""
        deadline = time.monotonic() + timeout
        with open_channel(self.listen_path) as channel:
            while True:
                if self._proc is not None and self._proc.poll() is not None:
                    raise ProxyProcessError(f"proxy exited with {self._proc.returncode}:\n{self.log_tail()}")
                try:
                    if self.ready(channel, wait_serving):
                        self._wait_for_admin_socket(min(ADMIN_SOCKET_WAIT_SECONDS, deadline - time.monotonic()))
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise ProxyProcessError(f"proxy not ready after {timeout}s:\n{self.log_tail()}")
                time.sleep(0.05)

    def _wait_for_admin_socket(self, seconds: float) -> None:
        """The admin API comes up just after the CRI socket serves (its imports are off the start's path): wait a
        little for its socket, as a user's runtimeproxyctl right after a start would; a proxy serving CRI without
        it (the socket taken, or turned off) is no error here."""
        admin = [argument.split("=", 1)[1] for argument in self.argv if argument.startswith("--admin-endpoint=")]
        if not admin or not admin[-1]:
            return
        path = Path(admin[-1].removeprefix("unix://"))
        deadline = time.monotonic() + seconds
        while not path.is_socket() and time.monotonic() < deadline:
            time.sleep(0.05)

    def ready(self, channel: grpc.Channel, wait_serving: bool) -> bool:
        """Health answers (SERVING, if asked: the backend is connected too); an RPC error is "not yet"."""
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1).status
        return not wait_serving or status == health_pb2.HealthCheckResponse.SERVING

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code (kills it if it does not exit in time)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return 0
        if not end_process(proc, timeout):
            raise ProxyProcessError(f"proxy ignored SIGTERM for {timeout}s:\n{self.log_tail()}")
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing of the process runs after it (its sockets' files stay behind)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait(10)

    def log_count(self, text: str) -> int:
        """How often `text` stands in the log (kept across restarts of this process)."""
        try:
            return self.log_path.read_text(errors="replace").count(text)
        except FileNotFoundError:
            return 0

    def wait_for_log(self, text: str, times: int = 1, timeout: float = 10.0) -> None:
        """Until the log holds `text` at least `times` times; fails naming it, with the log's tail."""
        deadline = time.monotonic() + timeout
        while self.log_count(text) < times:
            assert time.monotonic() < deadline, f"{text!r} not {times}x in the proxy log:\n{self.log_tail()}"
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> ProxyProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
