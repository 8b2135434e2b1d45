"""Who may register a plugin: the owner rule for plugin config files, their directory and sockets.

A plugin sees every container's environment and may rewrite its resources and env, so the
files that register one and the socket it listens on must belong to someone as trusted as
the proxy itself. The rule is the one sshd applies to its keys: owned by root, by the
proxy's own user or by a uid the operator allowed explicitly, and (for files and
directories) not writable by group or others.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

_GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


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
