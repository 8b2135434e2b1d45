"""Reading a small file only if it is trusted: a regular file, owned as runtimeproxy.trust requires, in a
trusted directory, of at most a given size; never blocking on a FIFO, never following a swapped-in entry.

Used for plugin registration files (hooks.registry), off the event loop. Every failure is an `Unusable`
(the entry cannot be used, with the reason) or `Gone` (deleted since it was listed, or a dangling link).
"""

from __future__ import annotations

import errno
import os
import stat
import time

from runtimeproxy.trust import TrustedOwners

# A registration is a few hundred bytes; anything bigger than this is not one.
MAX_CONFIG_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
# A file modified this recently may be rewritten within the same timestamp tick without
# its (inode, size, mtime) changing, so it is re-read on the next poll until it settles.
_RACY_WINDOW_NS = 2_000_000_000

# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns); None: re-read on the next poll.
Signature = tuple[int, int, int, int, int] | None


class Unusable(Exception):
    """A directory entry that cannot be used as a config file (the entry, not its content)."""

    def __init__(self, problem: str, signature: Signature = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.signature = signature


class Gone(Exception):
    """The entry vanished since it was listed, or is a symbolic link whose target is gone."""

    def __init__(self, dangling: bool) -> None:
        super().__init__("dangling" if dangling else "deleted")
        self.dangling = dangling



def file_signature(status: os.stat_result) -> Signature:
    if abs(time.time_ns() - status.st_mtime_ns) < _RACY_WINDOW_NS:
        return None
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def stat_entry(path: str) -> os.stat_result:
    """stat() following links, with every failure turned into Gone or Unusable."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise Gone(dangling=os.path.islink(path)) from None
    except OSError as error:
        raise Unusable(_os_problem(error)) from None


def read_trusted(path: str, owners: TrustedOwners, dir_problem: str | None) -> tuple[Signature, bytes]:
    """The file's bytes, if it is a trusted regular file of at most MAX_CONFIG_BYTES."""
    try:
        # O_NONBLOCK: a FIFO put here (or swapped in since the stat) must never block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Gone(dangling=os.path.islink(path)) from None
    except OSError as error:
        raise Unusable(_os_problem(error)) from None
    try:
        # The signature comes from the opened file, taken before reading: a write racing the
        # read then shows up as a changed signature on the next poll, never as a missed change.
        status = os.fstat(fd)
        signature = file_signature(status)
        problem = _entry_problem(status, owners, dir_problem)
        if problem is not None:
            raise Unusable(problem, signature)
        data = read_at_most(fd, MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise Unusable(_os_problem(error)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise Unusable(too_large(None), signature)
    return signature, data


def _entry_problem(status: os.stat_result, owners: TrustedOwners, dir_problem: str | None) -> str | None:
    if not stat.S_ISREG(status.st_mode):
        return not_regular(status.st_mode)
    if dir_problem is not None:
        return dir_problem
    problem = owners.file_problem("the file", status)
    if problem is not None:
        return f"not trusted: {problem}"
    if status.st_size > MAX_CONFIG_BYTES:
        return too_large(status.st_size)
    return None


def read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def too_large(size: int | None) -> str:
    """size None: known only to exceed the limit (it grew, or stat() did not tell)."""
    shown = f"more than {MAX_CONFIG_BYTES}" if size is None else str(size)
    return f"too large: {shown} bytes (a config file may have at most {MAX_CONFIG_BYTES})"


def not_regular(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    kind = next((kind for test, kind in kinds.items() if test(mode)), f"file type {stat.S_IFMT(mode):o}")
    return f"not a regular file ({kind})"


def _os_problem(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "cannot read the file: a symbolic link loop"
    return f"cannot read the file: {error.strerror or error}"
