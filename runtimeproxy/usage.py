"""What a command says about a user's mistake: one line that names the fix, never a usage dump or an errno.

`OneLineParser` is argparse's parser whose usage errors are `PROG: error: MESSAGE (see --help)`, exit code 2
(koord-runtime-proxy, runtimeproxyctl, a kit plugin's command line, the lab's tools). `flag_problem` is the line
for a flag whose value the process could not use once parsed (a directory it cannot create, an address it
cannot bind): the flag, its value, the system's reason without its `[Errno N]`, and the fix; `naming_flag`
turns a step's OSError into a `FlagError` with that line (the proxy's "cannot start: ..." line).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from runtimeproxy.endpoints import EndpointError, parse_unix_endpoint

EXIT_USAGE = 2


class FlagError(RuntimeError):
    """A flag's value the process cannot use; the message is flag_problem's line."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage dump: operators read this in a unit's log.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def unix_endpoint(value: str) -> Path:
    """An argument type: a unix socket's path, given as a path or unix:///path."""
    try:
        return parse_unix_endpoint(value)
    except EndpointError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_seconds(value: str) -> float:
    """An argument type: a timeout, a finite number of seconds above 0 (0 or less would time out at once)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not (seconds > 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds above 0, e.g. 2")
    return seconds


def os_reason(error: OSError) -> str:
    """`Read-only file system: '/x'` for `[Errno 30] Read-only file system: '/x'` (asyncio's bind errors too)."""
    if not error.errno or error.errno < 0:  # socket.gaierror's are getaddrinfo's own codes
        return error.strerror or str(error)
    reason = os.strerror(error.errno)
    return f"{reason}: {str(error.filename)!r}" if error.filename else reason


def flag_problem(flag: str, value: object, error: OSError, fix: str) -> str:
    """`--state-dir /x/y: Read-only file system: '/x'; FIX` (the file named once if it is the value)."""
    if error.errno is not None and error.errno > 0 and str(error.filename) == str(value):
        reason = os.strerror(error.errno)
    else:
        reason = os_reason(error)
    return f"{flag} {value}: {reason}; {fix}"


def socket_fix(flag: str) -> str:
    return f"give {flag} a socket path in a directory this user may create and write"


def taken_socket_problem(flag: str, error: Exception) -> str:
    """A socket path another process serves, or that is no socket (listener.SocketInUseError's message)."""
    return f"{flag}: {error}; give {flag} a path no other process serves"


@contextmanager
def naming_flag(flag: str, value: object, fix: str) -> Iterator[None]:
    """Raise a step's OSError as a FlagError naming the flag it came from and the fix."""
    try:
        yield
    except OSError as error:
        raise FlagError(flag_problem(flag, value, error, fix)) from None
