"""inotify on the plugin config directory (and on the targets of symbolic links in it), through the libc.

Linux's inotify through ctypes (inotify_init1, inotify_add_watch, inotify_rm_watch): three calls, no
dependency. A `DirectoryWatch` is a non-blocking file descriptor the event loop reads when it becomes
readable; the caller only learns "something changed" (the registry rescans the whole directory anyway,
so the events themselves are not decoded, and a queue overflow is just one more change). The directory
watch sees entries created, deleted, renamed, written and re-permissioned, and the directory's own
attributes (its trust); a watch per link target sees edits made through a link to a file elsewhere.
`WatchUnavailable` says why there can be no watch (no inotify, the instance or watch limit reached, the
directory missing): the registry then polls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from collections.abc import Iterable

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_IGNORED = 0x8000  # the watch was removed: its file was deleted, or its file system unmounted
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_SELF_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF
DIRECTORY_EVENTS = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
                    | _IN_DELETE | _SELF_GONE | _IN_ONLYDIR)
TARGET_EVENTS = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _SELF_GONE
_READ_BYTES = 64 * 1024
_EVENT = struct.Struct("iIII")


class WatchUnavailable(OSError):
    """No inotify watch can be had here (the reason is the message)."""


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()


def _failure(what: str) -> WatchUnavailable:
    code = ctypes.get_errno()
    if code in (errno.ENOSPC, errno.EMFILE):
        reason = "the inotify watch limit is reached (fs.inotify.max_user_watches / max_user_instances)"
    else:
        reason = os.strerror(code)
    return WatchUnavailable(code, f"{what}: {reason}")


class DirectoryWatch:
    """One inotify instance watching one directory (and link targets): `fileno()` turns readable on a change."""

    def __init__(self, directory: str) -> None:
        """Raises WatchUnavailable."""
        if _libc is None:
            raise WatchUnavailable(errno.ENOSYS, "inotify is not available (no libc with inotify_init1)")
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise _failure("inotify_init1")
        self._fd = fd
        self._targets: dict[str, int] = {}
        self.gone = False  # the directory was deleted or moved: the watch no longer follows its path
        try:
            self._directory = self._add(directory, DIRECTORY_EVENTS)
        except WatchUnavailable:
            os.close(fd)
            raise

    def fileno(self) -> int:
        return self._fd

    def _add(self, path: str, mask: int) -> int:
        assert _libc is not None
        wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            raise _failure(f"watching {path}")
        return int(wd)

    def watch_targets(self, links: Iterable[str]) -> None:
        """Watch what each of `links` points to (inotify follows the link); stop watching targets no longer
        listed. A target that cannot be watched (dangling) is skipped: the directory event of fixing it
        comes anyway. Raises WatchUnavailable when the watch limit is reached."""
        wanted = set(links)
        dropped = {self._targets.pop(path) for path in self._targets.keys() - wanted}
        for path in wanted - self._targets.keys():
            try:
                self._targets[path] = self._add(path, TARGET_EVENTS)
            except WatchUnavailable as error:
                if error.errno in (errno.ENOSPC, errno.EMFILE):
                    raise
        # Links to one file (or to the directory itself) share a descriptor: drop only unshared ones.
        assert _libc is not None
        for wd in dropped - set(self._targets.values()) - {self._directory}:
            _libc.inotify_rm_watch(self._fd, wd)  # the file may be gone, and the watch with it: harmless

    def drain(self) -> bool:
        """Read every pending event; True if any arrived. Sets `gone` when the directory itself went."""
        changed = False
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return changed
            if not data:
                return changed
            changed = True
            self._note_self_events(data)

    def _note_self_events(self, data: bytes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):  # struct inotify_event: int wd; u32 mask, cookie, len; name
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            if wd == self._directory and mask & (_SELF_GONE | _IN_IGNORED):
                self.gone = True
            offset += _EVENT.size + length

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
