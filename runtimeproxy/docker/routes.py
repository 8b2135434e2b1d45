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
_HOOKED_METHODS = frozenset(method for method, _, _ in _PATTERNS)
# Routes that take over the connection: answered `101` (Upgrade asked) or `200` + raw stream (not asked).
_HIJACK_PATH = re.compile(rf"{_VERSION}/(?:exec/[^/?]+/start|containers/[^/?]+/attach)")


def _split(target: bytes) -> tuple[str, str]:
    path, _, query = target.decode("latin-1").partition("?")
    return path, query


def hooked_route(method: bytes, target: bytes) -> RouteMatch | None:
    """The hooked route a request is for, or None when it is pure relay."""
    if method not in _HOOKED_METHODS or b"/containers/" not in target:
        return None  # most requests (GETs): no pattern to try
    path, query = _split(target)
    for wanted_method, pattern, route in _PATTERNS:
        if method == wanted_method and (match := pattern.fullmatch(path)):
            container_id = match.group(1) if match.groups() else None
            return RouteMatch(route, container_id, query)
    return None


def is_hijack_route(method: bytes, target: bytes) -> bool:
    """exec start and attach: the answer may turn the connection into a raw byte stream."""
    return method == b"POST" and _HIJACK_PATH.fullmatch(_split(target)[0]) is not None


# Metric labels of the Engine API routes (a fixed table: IDs and image names never become labels); "*" is the
# route's verb, taken from a closed list.
_ROUTE_LABELS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(rf"{_VERSION}{pattern}"), label) for pattern, label in (
    (r"/_ping", "/_ping"), (r"/version", "/version"), (r"/info", "/info"), (r"/events", "/events"),
    (r"/containers/json", "/containers/json"), (r"/containers/create", "/containers/create"),
    (r"/containers/[^/]+/(json|start|stop|update|attach|exec|logs|stats|wait|kill|restart|top|resize|rename|pause|unpause|archive|changes|export)",
     "/containers/{id}/*"),
    (r"/containers/[^/]+", "/containers/{id}"),
    (r"/exec/[^/]+/(start|json|resize)", "/exec/{id}/*"),
    (r"/images/(json|create|load|get|search|prune)", "/images/*"),
    (r"/images/.+/(json|push|tag|history|get)", "/images/{name}/*"),
    (r"/images/.+", "/images/{name}"),
    (r"/(networks|volumes|system|plugins|build|auth|distribution|swarm|nodes|services|tasks|secrets|configs)(/.*)?",
     "/*/..."),
))
OTHER_ROUTE = "other"


def route_label(method: bytes, target: bytes) -> str:
    """`METHOD /route/{id}/verb`, from a fixed table; "other" for anything it does not name."""
    path = _split(target)[0]
    for pattern, label in _ROUTE_LABELS:
        match = pattern.fullmatch(path)
        if match:
            verb = match.group(1) if match.groups() else ""
            return f"{method.decode('latin-1')} {label.replace('*', verb)}"
    return OTHER_ROUTE
