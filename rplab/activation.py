"""Socket activation as systemd does it, for tests, the lab and the bench: listening sockets held by the caller and
passed to each process it starts, across restarts (what a .socket unit does for its service).

`ActivationSockets` binds the sockets (mode from birth, as SocketMode=) and stays their owner; `launch_argv` and
`launch_environment` start a command through this module run as a script, which moves the passed fds to 3, 4, ...,
sets LISTEN_PID to its own pid (kept by exec) and execs the command, as systemd's service manager does.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from runtimeproxy.listener import listen_backlog, restrictive_umask

FDS_VARIABLE = "RPLAB_ACTIVATION_FDS"  # the caller's fd numbers, in LISTEN_FDNAMES order
SD_LISTEN_FDS_START = 3


@dataclass(frozen=True)
class ActivationSocket:
    name: str  # FileDescriptorName=
    path: Path  # ListenStream=
    mode: int = 0o660  # SocketMode=


class ActivationSockets:
    """Listening sockets that outlive the processes they are passed to."""

    def __init__(self, sockets: list[ActivationSocket]) -> None:
        self.sockets = sockets
        self._bound: list[socket.socket] = []
        try:
            for each in sockets:
                self._bound.append(self._bind(each))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _bind(spec: ActivationSocket) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with restrictive_umask(spec.mode):
            sock.bind(str(spec.path))
        os.chmod(spec.path, spec.mode)
        sock.listen(listen_backlog())
        return sock

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(sock.fileno() for sock in self._bound)

    def launch_argv(self, argv: list[str]) -> list[str]:
        return [sys.executable, __file__, "--", *argv]  # by path: from any working directory

    def launch_environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        environment = dict(os.environ if base is None else base)
        environment.update({
            FDS_VARIABLE: ",".join(str(fd) for fd in self.pass_fds),
            "LISTEN_FDS": str(len(self._bound)),
            "LISTEN_FDNAMES": ":".join(spec.name for spec in self.sockets),
        })
        return environment

    def close(self) -> None:
        for sock, spec in zip(self._bound, self.sockets):
            sock.close()
            spec.path.unlink(missing_ok=True)
        self._bound = []


def exec_with_listen_fds(argv: list[str]) -> None:
    """In the started process: the fds of FDS_VARIABLE to 3, 4, ..., LISTEN_PID set, then exec argv."""
    sources = [int(fd) for fd in os.environ.pop(FDS_VARIABLE).split(",") if fd]
    targets = range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + len(sources))
    # Above the targets first: a source may already sit on a target number.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, targets.stop) for fd in sources]
    for fd in sources:
        if fd not in targets:
            os.close(fd)
    for target, fd in zip(targets, high):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.environ["LISTEN_PID"] = str(os.getpid())
    os.execvp(argv[0], argv)


def main(arguments: list[str] | None = None) -> int:
    """`python rplab/activation.py -- COMMAND...` (environment from ActivationSockets.launch_environment)."""
    arguments = sys.argv[1:] if arguments is None else arguments
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    exec_with_listen_fds(arguments)
    return 1  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
