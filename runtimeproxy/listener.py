"""The proxy's own unix socket: claiming it safely, restricting it, giving it back.

gRPC unlinks whatever file sits at a unix socket path before binding, which would
silently steal the socket of a proxy that is still running. So before binding we
look: a socket that accepts a connection belongs to a live server and we refuse.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

SOCKET_MODE = 0o660


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


def claim_socket_path(path: Path) -> None:
    """Make the directory and remove a stale socket file; refuse if the socket is live."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
