"""The Docker Engine API routes that hooks will intercept; everything else is pure relay.

cri-dockerd prefixes paths with the API version (`/v1.41/containers/create`); older clients do not.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class HookedRoute(enum.Enum):
    CREATE = "create"  # POST /containers/create: a pod sandbox or a container, told apart by labels
    START = "start"  # POST /containers/{id}/start
    UPDATE = "update"  # POST /containers/{id}/update
    STOP = "stop"  # POST /containers/{id}/stop
    REMOVE = "remove"  # DELETE /containers/{id}


@dataclass(frozen=True)
class RouteMatch:
    route: HookedRoute
    container_id: str | None  # None for CREATE
    query: str  # raw query string, without "?"


_VERSION = r"(?:/v[0-9]+(?:\.[0-9]+)*)?"
_ID = r"([^/?]+)"
_PATTERNS: tuple[tuple[bytes, re.Pattern[str], HookedRoute], ...] = (
    (b"POST", re.compile(rf"{_VERSION}/containers/create"), HookedRoute.CREATE),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_ID}/start"), HookedRoute.START),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_ID}/update"), HookedRoute.UPDATE),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_ID}/stop"), HookedRoute.STOP),
    (b"DELETE", re.compile(rf"{_VERSION}/containers/{_ID}"), HookedRoute.REMOVE),
)
# Routes that take over the connection: answered `101` (Upgrade asked) or `200` + raw stream (not asked).
_HIJACK_PATH = re.compile(rf"{_VERSION}/(?:exec/[^/?]+/start|containers/[^/?]+/attach)")


def _split(target: bytes) -> tuple[str, str]:
    path, _, query = target.decode("latin-1").partition("?")
    return path, query


def hooked_route(method: bytes, target: bytes) -> RouteMatch | None:
    """The hooked route a request is for, or None when it is pure relay."""
    path, query = _split(target)
    for wanted_method, pattern, route in _PATTERNS:
        match = pattern.fullmatch(path)
        if method == wanted_method and match:
            container_id = match.group(1) if match.groups() else None
            return RouteMatch(route, container_id, query)
    return None


def is_hijack_route(method: bytes, target: bytes) -> bool:
    """exec start and attach: the answer may turn the connection into a raw byte stream."""
    return method == b"POST" and _HIJACK_PATH.fullmatch(_split(target)[0]) is not None
