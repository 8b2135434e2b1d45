"""Who may register a plugin, and whose sockets the proxy may talk to or create files beside.

A plugin sees every container's environment and may rewrite its resources and env, so the
files that register one and the socket it listens on must belong to someone as trusted as
the proxy itself. The rule is the one sshd applies to its keys: owned by root, by the
proxy's own user or by a uid the operator allowed explicitly, and (for files and
directories) not writable by group or others.

A socket's owner alone proves nothing about the next connect(): whoever can write the
directory holding it can swap it (or create it while it is missing) between the check and
the connect. So a socket path is trusted only as a whole (`socket_path_problem`, sshd's
StrictModes walk): every directory from / down to the socket and every symbolic link
followed on the way are owned by a trusted uid; no directory passed through is writable by
group or others, except a sticky one (/tmp) on the way, whose entries only their owners may
rename or remove; the socket's own directory is not writable by group or others at all.
Then only trusted users can change what the path reaches, which is what makes a check
followed by a connect by path (gRPC's) safe. Directories holding the proxy's own sockets and
lock files get the same walk (`directory_chain_problem`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

_GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
# As Linux's limit on links followed in one path resolution.
_MAX_SYMLINKS = 40


class _Untrusted(Exception):
    """A path walk met something an untrusted user could change; the message says what."""


def _writable_by_others(status: os.stat_result) -> bool:
    return bool(status.st_mode & _GROUP_OR_OTHER_WRITE)


def _components(path: str) -> list[str]:
    return [name for name in path.split("/") if name not in ("", ".")]


def _mode(status: os.stat_result) -> str:
    return f"{stat.S_IMODE(status.st_mode):04o}"


@dataclass(frozen=True)
class TrustedOwners:
    uids: frozenset[int]

    @classmethod
    def with_extra(cls, extra_uids: Iterable[int] = ()) -> TrustedOwners:
        """root and the proxy's effective user, plus the operator's extra uids."""
        return cls(frozenset({0, os.geteuid(), *extra_uids}))

    def describe(self) -> str:
        return ",".join(str(uid) for uid in sorted(self.uids))

    def owner_problem(self, what: str, status: os.stat_result) -> str | None:
        """Why `what` is not trusted by its owner alone (sockets), or None."""
        if status.st_uid in self.uids:
            return None
        return f"{what} is owned by uid {status.st_uid}, not a trusted owner (trusted uids: {self.describe()})"

    def file_problem(self, what: str, status: os.stat_result) -> str | None:
        """Why a config file or directory is not trusted, or None."""
        problem = self.owner_problem(what, status)
        if problem is None and status.st_mode & _GROUP_OR_OTHER_WRITE:
            problem = f"{what} is writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
        return problem

    def socket_path_problem(self, path: os.PathLike[str] | str) -> str | None:
        """Why a connect() to the unix socket at `path` could reach a socket an untrusted user put
        there, or None; raises OSError when the path cannot be walked (not a directory, a loop).

        A missing socket (or directory on its way) is fine where only trusted users could create it:
        the connect then fails on its own.
        """
        try:
            directory, directory_status, final, final_status = self._walk(os.fspath(path))
            if final_status is not None:
                problem = self.owner_problem(f"socket {final}", final_status)
                if problem is not None:
                    raise _Untrusted(problem)
            if _writable_by_others(directory_status):
                raise _Untrusted(
                    f"directory {directory} holding socket {final} is writable by group or others "
                    f"(mode {_mode(directory_status)}): anyone who can write there could swap the socket"
                )
        except _Untrusted as untrusted:
            return str(untrusted)
        return None

    def directory_chain_problem(self, path: os.PathLike[str] | str) -> str | None:
        """Why files the proxy creates in directory `path` (its sockets, their lock files) could be
        swapped or planted by an untrusted user, or None; raises OSError if `path` cannot be walked
        or is missing."""
        try:
            _, _, final, status = self._walk(os.fspath(path))
            if status is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), final)
            if not stat.S_ISDIR(status.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), final)
            problem = self.file_problem(f"directory {final}", status)
            if problem is not None:
                raise _Untrusted(problem)
        except _Untrusted as untrusted:
            return str(untrusted)
        return None

    def _walk(self, path: str) -> tuple[str, os.stat_result, str, os.stat_result | None]:
        """Resolve `path` as the kernel does, one entry at a time, checking every directory passed
        through and every link followed; raises _Untrusted at the first thing an untrusted user could
        change. Returns the directory holding the final entry (links resolved) with its status, and
        the final entry with its lstat() status (None: missing, where only a trusted user could create it).
        """
        current, current_status = "/", os.lstat("/")
        self._check_passage(current, current_status)
        pending = _components(path)
        links = 0
        while pending:
            name = pending.pop(0)
            if name == "..":  # `current` has no links in it: its parent is the one walked through
                current = os.path.dirname(current)
                current_status = os.lstat(current)
                continue
            entry = os.path.join(current, name)
            try:
                status = os.lstat(entry)
            except FileNotFoundError:
                if _writable_by_others(current_status):
                    raise _Untrusted(
                        f"{entry} does not exist and directory {current} is writable by group or others "
                        f"(mode {_mode(current_status)}): anyone could create it"
                    ) from None
                return current, current_status, os.path.join(entry, *pending), None
            if stat.S_ISLNK(status.st_mode):
                self._check_owner(f"symbolic link {entry}", status)
                links += 1
                if links > _MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(entry)
                if target.startswith("/"):
                    current, current_status = "/", os.lstat("/")
                pending[:0] = _components(target)
                continue
            if not pending:
                return current, current_status, entry, status
            if not stat.S_ISDIR(status.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), entry)
            self._check_passage(entry, status)
            current, current_status = entry, status
        parent = os.path.dirname(current)  # the path ended at / or with "..": `current` is the final entry
        return parent, os.lstat(parent), current, current_status

    def _check_owner(self, what: str, status: os.stat_result) -> None:
        problem = self.owner_problem(what, status)
        if problem is not None:
            raise _Untrusted(problem)

    def _check_passage(self, path: str, status: os.stat_result) -> None:
        """A directory walked through: trusted owner, and no group/other write unless sticky."""
        self._check_owner(f"directory {path}", status)
        if _writable_by_others(status) and not status.st_mode & stat.S_ISVTX:
            raise _Untrusted(f"directory {path} is writable by group or others (mode {_mode(status)})")
