"""A private mount and network namespace in which a documented command runs as written: the host paths a page
names (/run, /tmp, /var/lib, /etc/runtime, ports on 127.0.0.1) are the namespace's own, on tmpfs, so nothing it
does reaches the host, and everything it made goes when the namespace's last process exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.kits.machine import require_command, skip_or_fail

# The checkout's virtualenv first on PATH: `python3`, `koord-runtime-proxy`, `runtimeproxyctl` as on a node.
VENV_PATH = f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# What the commands need from the host's /tmp when the checkout lives there (a CI clone may): the checkout and the
# virtualenv whose python runs them.
KEPT_IN_TMP = (Path(__file__).resolve().parents[2], Path(sys.prefix).resolve())


def private_tmp() -> list[str]:
    """/tmp as a tmpfs of the namespace's own, with the checkout and the virtualenv bound back where they were."""
    kept = sorted({path for path in KEPT_IN_TMP if path.is_relative_to("/tmp")})
    lines = ["mkdir -p /run/host-tmp", "mount --bind /tmp /run/host-tmp"] if kept else []
    lines.append("mount -t tmpfs -o mode=1777 tmpfs /tmp")
    for path in kept:
        inside = Path("/run/host-tmp") / path.relative_to("/tmp")
        lines += [f"mkdir -p {path}", f"mount --bind {inside} {path}"]
    return lines


def private_setup(containerd_socket: str | Path | None = None) -> str:
    """The shell lines that make the namespace's paths private; containerd_socket (a lab's) is bound at containerd's
    default socket, /run/containerd/containerd.sock, before /tmp is hidden."""
    lines = ["mount -t tmpfs -o mode=0755 tmpfs /run"]
    if containerd_socket is not None:
        lines += ["mkdir -p /run/containerd", ": > /run/containerd/containerd.sock",
                  f"mount --bind {containerd_socket} /run/containerd/containerd.sock"]
    lines += ["mkdir -p /run/etc-upper /run/etc-work",
              "mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/etc-upper,workdir=/run/etc-work /etc",
              "mount -t tmpfs -o mode=0755 tmpfs /var/lib",
              *private_tmp(),
              "ip link set lo up"]
    return "\n".join(lines)


class Namespace:
    """A namespace held by a sleeping process; commands enter it with nsenter."""

    def __init__(self, holder: subprocess.Popen[str]) -> None:
        self.holder = holder
        self.started: list[subprocess.Popen[str]] = []

    def _argv(self, command: str, cwd: Path) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", f"--wd={cwd}", "sh", "-ec", command]

    def run(self, command: str, cwd: Path, environment: Mapping[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._argv(command, cwd), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PATH": VENV_PATH, **(environment or {})})

    def start(self, command: str, cwd: Path, log: Path) -> subprocess.Popen[str]:
        """A long-running command (a server), in a session of its own; stopped when the namespace goes."""
        with log.open("w") as out:
            process = subprocess.Popen(self._argv(command, cwd), stdout=out, stderr=subprocess.STDOUT, text=True,
                                       env={**os.environ, "PATH": VENV_PATH}, start_new_session=True)
        self.started.append(process)
        return process

    def stop(self, process: subprocess.Popen[str], timeout: float = 15) -> int:
        """SIGTERM to what the command started (the shell running a block waits for it and exits with its code),
        or to the command itself where its shell exec'd it; its exit code."""
        if process.poll() is None:
            for pid in _group_members(process.pid) or [process.pid]:
                os.kill(pid, signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait(timeout)


def _group_members(group: int) -> list[int]:
    """The processes of a process group but its leader."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != group:
            try:
                if os.getpgid(int(entry.name)) == group:
                    members.append(int(entry.name))
            except ProcessLookupError:
                pass
    return members


@contextmanager
def private_namespace(setup: str) -> Iterator[Namespace]:
    if os.geteuid() != 0:
        skip_or_fail("a private mount namespace needs root (the documented commands run as root)")
    require_command("unshare", "util-linux")
    require_command("nsenter", "util-linux")
    require_command("ip", "iproute2")
    holder = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private", "sh", "-ec",
                               f"{setup}\necho ready\nexec sleep infinity"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "ready":
        holder.kill()
        raise AssertionError(f"the private namespace did not come up: {holder.communicate()[1]}")
    namespace = Namespace(holder)
    try:
        yield namespace
    finally:
        for process in namespace.started:
            namespace.stop(process)
        holder.kill()
        holder.wait()
