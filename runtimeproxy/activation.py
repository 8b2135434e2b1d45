"""Socket activation: the listening sockets systemd (or any launcher doing as it does) passed to the process.

sd_listen_fds(3)'s protocol: `LISTEN_FDS=N` sockets from fd 3 on, meant for this process only if `LISTEN_PID` is its
pid, named by `LISTEN_FDNAMES` (colon-separated, a .socket unit's `FileDescriptorName=`). The variables are read
once, at start, and removed from the environment whatever they said, so no child (an NRI plugin, a hook plugin's
launcher) inherits them; the passed fds get FD_CLOEXEC for the same reason.

Each of the proxy's sockets (the CRI or Docker socket, the admin socket) takes the passed socket meant for it: by
name when exactly one passed socket bears its name (`cri`, `docker`, `admin`), else the one bound to its path. What
is taken must be a listening unix stream socket bound to the configured path, in a directory passing the trust rule
(`runtimeproxy.trust`), owned by a trusted user and writable (what connecting takes) by no one else (at most 0660
for the CRI socket, 0600 for the admin one); anything else is refused with one line naming the .socket unit
setting to fix. A socket no role takes is left alone (systemd keeps its own copy). The proxy never removes an
inherited socket's file: it is systemd's, and keeps queueing connections while the proxy restarts.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import stat
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from runtimeproxy.trust import TrustedOwners

log = logging.getLogger(__name__)

SD_LISTEN_FDS_START = 3
LISTEN_ENVIRONMENT = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
# sd_listen_fds_with_names(3)'s name for a socket LISTEN_FDNAMES does not name.
UNNAMED = "unknown"
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


class ActivationError(RuntimeError):
    """A socket systemd passed that the proxy cannot serve safely, or a malformed LISTEN_* variable."""


@dataclass(frozen=True)
class PassedSocket:
    fd: int
    name: str

    def bound_path(self) -> str | None:
        """The path the socket is bound to; None if it is not a unix socket (or not a socket at all)."""
        copy = os.dup(self.fd)  # the passed fd itself stays unowned until a role takes it
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            return None
        try:
            if sock.family != socket.AF_UNIX:
                return None
            name = sock.getsockname()
            return name if isinstance(name, str) and name else None
        finally:
            sock.close()


def _same_path(bound: str, expected: Path) -> bool:
    """/var/run/x and /run/x are the same place (systemd rewrites the former to the latter)."""
    def canonical(path: Path) -> Path:
        return Path(os.path.realpath(path.parent)) / path.name
    return canonical(Path(bound)) == canonical(expected)


class InheritedSockets:
    """The sockets passed to this process, each taken at most once by the role it is meant for."""

    def __init__(self, passed: list[PassedSocket]) -> None:
        self._untaken = list(passed)

    @classmethod
    def none(cls) -> InheritedSockets:
        return cls([])

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> InheritedSockets:
        """sd_listen_fds(unset_environment=1) with names: the variables are gone afterwards in every case."""
        environ = os.environ if environ is None else environ
        values = {key: environ.pop(key, None) for key in LISTEN_ENVIRONMENT}
        if values["LISTEN_FDS"] is None:
            return cls.none()
        if values["LISTEN_PID"] != str(os.getpid()):  # meant for another process (our parent's, say)
            log.debug("LISTEN_FDS is for pid %s, not this process: ignored", values["LISTEN_PID"])
            return cls.none()
        try:
            count = int(values["LISTEN_FDS"] or "")
        except ValueError:
            raise ActivationError(f"LISTEN_FDS={values['LISTEN_FDS']!r} is not a number of sockets") from None
        names = (values["LISTEN_FDNAMES"] or "").split(":") if values["LISTEN_FDNAMES"] else []
        if names and len(names) != count:
            raise ActivationError(f"LISTEN_FDNAMES names {len(names)} sockets but LISTEN_FDS={count}")
        passed = [PassedSocket(SD_LISTEN_FDS_START + index, names[index] if names else UNNAMED)
                  for index in range(count)]
        for each in passed:
            try:
                flags = fcntl.fcntl(each.fd, fcntl.F_GETFD)
            except OSError:
                raise ActivationError(f"LISTEN_FDS={count} but fd {each.fd} is not open") from None
            fcntl.fcntl(each.fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
        return cls(passed)

    def __bool__(self) -> bool:
        return bool(self._untaken)

    def take(self, path: Path, name: str, mode: int) -> socket.socket | None:
        """The passed socket meant for `path` (role `name`), checked; None if none is (the caller binds)."""
        chosen = self._choose(path, name)
        if chosen is None:
            return None
        self._untaken.remove(chosen)
        return adopt_listening_socket(chosen, path, mode)

    def _choose(self, path: Path, name: str) -> PassedSocket | None:
        named = [each for each in self._untaken if each.name == name]
        if len(named) == 1:
            return named[0]
        for each in named or self._untaken:
            bound = each.bound_path()
            if bound is not None and _same_path(bound, path):
                return each
        return None

    def describe_untaken(self) -> str:
        return ", ".join(f"fd {each.fd} ({each.name}: {each.bound_path() or 'not a unix socket'})"
                         for each in self._untaken)


def adopt_listening_socket(passed: PassedSocket, path: Path, mode: int) -> socket.socket:
    """The passed fd as a socket object, once it proved to be a listening unix stream socket at `path` whose
    file and directory only trusted users control; ActivationError naming the fix otherwise."""
    what = f"the socket passed as fd {passed.fd} ({passed.name})"
    unit_fix = f"set ListenStream={path} in the .socket unit"
    try:
        sock = socket.socket(fileno=passed.fd)
    except OSError as error:
        raise ActivationError(f"{what} is not a socket ({error.strerror}); {unit_fix}") from None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        bound = sock.getsockname() if sock.family == socket.AF_UNIX else None
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
            raise ActivationError(f"{what} is not a listening unix stream socket; {unit_fix}")
        if not isinstance(bound, str) or not _same_path(bound, path):
            raise ActivationError(f"{what} is bound to {bound or 'no path'}, not to {path}; {unit_fix}")
        _check_socket_file(path, mode)
    except BaseException:
        sock.detach()  # never close what we refused: systemd's copy is not ours to judge
        raise
    sock.setblocking(False)
    return sock


def _check_socket_file(path: Path, mode: int) -> None:
    owners = TrustedOwners.with_extra()
    problem = owners.directory_chain_problem(path.parent)
    if problem is not None:
        raise ActivationError(f"refusing the socket systemd passed for {path}: {problem}; "
                              "set DirectoryMode=0755 in the .socket unit")
    try:
        status = path.lstat()
    except FileNotFoundError:
        raise ActivationError(f"the socket systemd passed for {path} has no file there any more (removed "
                              "since systemd bound it); restart the .socket unit") from None
    if not stat.S_ISSOCK(status.st_mode):
        raise ActivationError(f"{path} is not the socket systemd passed (file type "
                              f"{stat.S_IFMT(status.st_mode):o}); restart the .socket unit")
    if status.st_uid not in owners.uids:
        raise ActivationError(f"the socket systemd passed for {path} is owned by uid {status.st_uid}, not by "
                              f"uid {owners.describe()}; set SocketUser=root in the .socket unit")
    # Connecting takes write permission on the file: only write bits beyond `mode` widen who may connect.
    extra_writers = stat.S_IMODE(status.st_mode) & ~mode & _WRITE_BITS
    if extra_writers:
        raise ActivationError(f"the socket systemd passed for {path} has mode {stat.S_IMODE(status.st_mode):04o}, "
                              f"more open than {mode:04o}; set SocketMode={mode:04o} in the .socket unit")
