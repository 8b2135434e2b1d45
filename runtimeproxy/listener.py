"""The proxy's own unix socket: claiming it safely, restricting it, giving it back.

gRPC unlinks whatever file sits at a unix socket path before binding, which would
silently steal the socket of a proxy that is still running. Claiming is therefore
atomic: an exclusive flock on a lock file beside the socket (`<socket>.lock`), held for
the process's life, is taken before the socket is looked at. Two proxies started at
the same instant cannot both pass; the loser learns the holder's pid from the file.
A socket that accepts connections is refused too (a server that takes no lock).

Every socket the proxy serves is created with its final mode whatever the umask (`bind_unix_socket`, or
`restrictive_umask` around a bind gRPC makes) and listens with the kernel's full backlog (`listen_backlog`:
net.core.somaxconn, as dockerd and gRPC do), so a burst of clients is queued, not refused with EAGAIN.

The proxy usually runs as root, so whatever it creates or truncates beside its socket must be
out of other users' reach: the socket's directory must pass the trust rule of plugin config
directories along its whole chain (`runtimeproxy.trust`: owned by root or the proxy's user, not
writable by group or others, and likewise every directory above it, sticky ones excepted),
and the lock file is opened without following a link and used only if it is a regular file
of the proxy's own user with no other hard link. A planted `rp.sock.lock -> /etc/...` is
refused with one line naming it, never followed or removed: whoever could plant it is the
operator's problem, and the proxy must not guess which of the two files is the real one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtimeproxy.trust import TrustedOwners

SOCKET_MODE = 0o660
SOMAXCONN_PATH = Path("/proc/sys/net/core/somaxconn")
LOCK_FILE_MODE = 0o600
LOCK_SUFFIX = ".lock"
# Directories the proxy creates for its sockets: what the trust rule accepts, whatever the umask.
SOCKET_DIR_MODE = 0o755
# O_NOFOLLOW: a planted link is refused, never followed; O_NONBLOCK and O_NOCTTY: a FIFO or a
# terminal planted there is never waited on or adopted before fstat() refuses it.
_LOCK_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                    | os.O_CLOEXEC)


# For asyncio's unix servers: Python 3.13's remove their socket file when they close (cleanup_socket), which would
# take a socket systemd passed from the next process. The proxy removes its own sockets itself (release_socket).
KEEP_SOCKET_FILE: dict[str, Any] = {"cleanup_socket": False} if sys.version_info >= (3, 13) else {}


class SocketInUseError(RuntimeError):
    """The listen path is served by another live process, or is not a socket."""


class UnsafeSocketPath(RuntimeError):
    """The socket's directory or lock file is one that someone else could have planted or swapped."""


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
            if os.fstat(self._fd).st_ino == os.lstat(self.path).st_ino:
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
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise SocketInUseError(
                f"{socket_path} {in_use} (pid {holder} holds {path}); refusing to take it over"
            ) from None
        try:
            same_file = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            break
        os.close(fd)  # the holder removed it between our open and our lock: lock the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return SocketLock(path, fd)


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file, refusing anything but a regular file of our own with one link."""
    try:
        fd = os.open(path, _LOCK_OPEN_FLAGS, LOCK_FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeSocketPath(
                f"refusing to use {path}: it is a symbolic link (to {_link_target(path)}), and a lock "
                "file is never followed; remove it after finding out who put it there"
            ) from None
        raise
    problem = _lock_file_problem(os.fstat(fd))
    if problem is not None:
        os.close(fd)
        raise UnsafeSocketPath(f"refusing to use {path}: it {problem}; remove it after finding out who put it there")
    return fd


def _lock_file_problem(status: os.stat_result) -> str | None:
    if not stat.S_ISREG(status.st_mode):
        return f"is not a regular file (file type {stat.S_IFMT(status.st_mode):o})"
    if status.st_uid != os.geteuid():
        return f"is owned by uid {status.st_uid}, not by this proxy's user (uid {os.geteuid()})"
    if status.st_nlink != 1:
        return f"has {status.st_nlink} hard links (another name of the same file could be anything)"
    return None


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _make_socket_directory(directory: Path) -> None:
    """Create the missing directories as 0755 (not as the umask says) and check the whole chain."""
    missing, existing = [], directory
    while not os.path.lexists(existing):
        missing.append(existing)
        existing = existing.parent
    for created in reversed(missing):
        try:
            created.mkdir(mode=SOCKET_DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile: judged below like any existing one
    problem = TrustedOwners.with_extra().directory_chain_problem(directory)
    if problem is not None:
        raise UnsafeSocketPath(
            f"refusing to serve a socket in {directory}: {problem}; anyone who can write there could "
            "plant a link as its lock file or swap the socket"
        )


def claim_socket_path(path: Path) -> SocketLock:
    """Make the directory, take the lock and remove a stale socket file; refuse if the socket is live.

    The returned lock must be held (and released at exit) for as long as the socket is served.
    Raises UnsafeSocketPath for a directory or lock file that someone else could have planted.
    """
    _make_socket_directory(path.parent)
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


def listen_backlog() -> int:
    """The kernel's limit on a listening socket's queue (what dockerd and gRPC ask for); asyncio's default is 100."""
    try:
        return max(int(SOMAXCONN_PATH.read_text()), socket.SOMAXCONN)
    except (OSError, ValueError):
        return socket.SOMAXCONN


@contextlib.contextmanager
def restrictive_umask(mode: int = SOCKET_MODE) -> Iterator[None]:
    """Around a bind: the socket file is born with at most `mode`, never as the process's umask says (under
    umask 000 it would be 0777 until the chmod, and a client connected then keeps its connection)."""
    previous = os.umask(0o777 & ~mode)
    try:
        yield
    finally:
        os.umask(previous)


def bind_unix_socket(path: Path, mode: int = SOCKET_MODE) -> tuple[socket.socket, int]:
    """A listening unix socket at `path` (already claimed): mode `mode` from its creation on, the kernel's full
    backlog. Returns it (non-blocking, for asyncio's `sock=`, whose `backlog=` must be listen_backlog() too)
    and its inode, for release_socket."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with restrictive_umask(mode):
            sock.bind(str(path))
        os.chmod(path, mode)  # the umask only takes bits away: group read/write come back here
        sock.listen(listen_backlog())
        sock.setblocking(False)
        return sock, path.stat().st_ino
    except BaseException:
        sock.close()
        raise


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
