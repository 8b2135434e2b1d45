"""The proxy's own unix socket: claiming it safely, restricting it, giving it back.

gRPC unlinks whatever file sits at a unix socket path before binding, which would
silently steal the socket of a proxy that is still running. Claiming is therefore
atomic: an exclusive flock on a lock file beside the socket (`<socket>.lock`), held for
the process's life, is taken before the socket is looked at. Two proxies started at
the same instant cannot both pass; the loser learns the holder's pid from the file.
A socket that accepts connections is refused too (a server that takes no lock).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from pathlib import Path

SOCKET_MODE = 0o660
LOCK_FILE_MODE = 0o600
LOCK_SUFFIX = ".lock"


class SocketInUseError(RuntimeError):
    """The listen path is served by another live process, or is not a socket."""


def _accepts_connections(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError as error:
        if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        # EAGAIN: the listener's backlog is full — it is alive.
        return error.errno == errno.EAGAIN
    finally:
        probe.close()
    return True


def lock_path_for(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + LOCK_SUFFIX)


class SocketLock:
    """An exclusive flock on the lock file beside the socket; the open fd holds it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the lock file (while still holding it, so no one can lock a stale inode) and unlock."""
        if self._fd is None:
            return
        try:
            if os.fstat(self._fd).st_ino == self.path.stat().st_ino:
                self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


# The holder writes its pid just after taking the lock: a loser that lost by a hair waits this long for it.
HOLDER_PID_WAIT_SECONDS = 1.0


def _holder_pid(fd: int) -> str:
    deadline = time.monotonic() + HOLDER_PID_WAIT_SECONDS
    while True:
        try:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        except OSError:
            return "unknown"
        if text.isdigit():
            return text
        if time.monotonic() > deadline:
            return "unknown"
        time.sleep(0.01)


def lock_socket_path(socket_path: Path, in_use: str = "is served by another running process") -> SocketLock:
    """Take the lock file beside socket_path (a socket, or any file one process owns) for this process's life,
    or raise SocketInUseError: "<socket_path> <in_use> (pid N holds <lock>)"."""
    path = lock_path_for(socket_path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise SocketInUseError(
                f"{socket_path} {in_use} (pid {holder} holds {path}); refusing to take it over"
            ) from None
        try:
            same_file = os.fstat(fd).st_ino == path.stat().st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            break
        os.close(fd)  # the holder removed it between our open and our lock: lock the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return SocketLock(path, fd)


def claim_socket_path(path: Path) -> SocketLock:
    """Make the directory, take the lock and remove a stale socket file; refuse if the socket is live.

    The returned lock must be held (and released at exit) for as long as the socket is served.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_socket_path(path)
    try:
        _remove_stale_socket(path)
    except BaseException:
        lock.release()
        raise
    return lock


def _remove_stale_socket(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketInUseError(f"{path} exists and is not a socket; refusing to replace it")
    if _accepts_connections(path):
        raise SocketInUseError(f"{path} is served by another running process; refusing to take it over")
    path.unlink(missing_ok=True)


def restrict_socket(path: Path) -> int:
    """chmod the bound socket to 0660; returns its inode so we only ever remove our own."""
    os.chmod(path, SOCKET_MODE)
    return path.stat().st_ino


def release_socket(path: Path, inode: int | None) -> None:
    try:
        if inode is None or path.lstat().st_ino == inode:
            path.unlink()
    except FileNotFoundError:
        pass
