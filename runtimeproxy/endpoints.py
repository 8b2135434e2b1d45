"""Parsing of endpoints as the kubelet and koord-runtime-proxy spell them (unix sockets, the metrics' host:port);
whether a unix socket listens.

Imported by the command line before the allocator's re-exec: nothing heavy (no asyncio) here."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

_UNIX_PREFIXES = ("unix://", "unix:")


class EndpointError(ValueError):
    """An endpoint string that is not a unix socket path."""


def parse_unix_endpoint(value: str) -> Path:
    """Turn `/run/x.sock`, `unix:///run/x.sock` or `unix:/run/x.sock` into an absolute path."""
    text = value.strip()
    for prefix in _UNIX_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    else:
        if "://" in text:
            scheme = text.split("://", 1)[0]
            raise EndpointError(f"{value!r}: only unix sockets are supported, not {scheme}://")
    if not text:
        raise EndpointError(f"{value!r}: empty socket path")
    if not text.startswith("/"):
        raise EndpointError(f"{value!r}: the socket path must be absolute")
    return Path(text)


def grpc_target(path: Path) -> str:
    """The gRPC channel target for a unix socket path."""
    return f"unix://{path}"


def listener_problem(path: Path) -> str:
    """Why nothing answers on the unix socket `path`, in words, or "" when something listens there (a bare
    connect, closed at once: no call is made; a full backlog still counts as listening)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"socket {path} does not exist: nothing serves it (not started yet?)"
    except OSError as error:
        return f"socket {path} cannot be reached: {error.strerror or error}"
    if not stat.S_ISSOCK(mode):
        return f"{path} is not a socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        code = probe.connect_ex(os.fspath(path))
    if code in (0, errno.EAGAIN, errno.EINPROGRESS):
        return ""
    if code == errno.ECONNREFUSED:
        return f"nobody listens on socket {path}: a stale socket (stopped?)"
    return f"socket {path} cannot be reached: {os.strerror(code)}"


class BindAddressError(ValueError):
    """A --metrics-bind-address that is not host:port."""


def parse_bind_address(value: str) -> tuple[str, int]:
    """"host:port" (IPv6 in brackets) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BindAddressError(f"{value!r} is not host:port (e.g. 127.0.0.1:9318)")
    return host.strip("[]") or "0.0.0.0", int(port)
