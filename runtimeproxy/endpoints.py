"""Parsing of unix-socket endpoints as the kubelet and koord-runtime-proxy spell them."""

from __future__ import annotations

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
