"""The Docker Engine API routes that hooks will intercept; everything else is pure relay.

cri-dockerd prefixes paths with the API version (`/v1.41/containers/create`); older clients do not.

Routes are matched on the path as dockerd routes it, or a request spelled otherwise would reach dockerd's
handler without its hooks (a Fail-policy refusal bypassed, a PostStop hook skipped): Go's net/http takes the
request-target in origin form or absolute form (`http://docker/v1.41/containers/create`, any scheme, even
`http:/v1.41/...`) and percent-decodes the path (`/containers/%63reate` is `create`); gorilla/mux then
matches the decoded path, answering a path that is not clean (`//`, `.` or `..` elements) with a 301 to the
cleaned one, never routing it; the version prefix is `/v{version:[0-9.]+}` and `{name:.*}` takes slashes.
`routed_path` does the same. Plain targets (origin form, no `%`, no `//` or `/.`) take a fast path.
"""

from __future__ import annotations

import enum
import re
import urllib.parse
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


_VERSION = r"(?:/v[0-9.]+)?"  # moby's versionMatcher: /v{version:[0-9.]+}
_NAME = r"(.+)"  # moby's {name:.*} (empty only in an unclean path, which dockerd never routes)
_PATTERNS: tuple[tuple[bytes, re.Pattern[str], HookedRoute], ...] = (
    (b"POST", re.compile(rf"{_VERSION}/containers/create"), HookedRoute.CREATE),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_NAME}/start"), HookedRoute.START),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_NAME}/update"), HookedRoute.UPDATE),
    (b"POST", re.compile(rf"{_VERSION}/containers/{_NAME}/stop"), HookedRoute.STOP),
    (b"DELETE", re.compile(rf"{_VERSION}/containers/([^/]+)"), HookedRoute.REMOVE),  # moby's {name}
)
_HOOKED_METHODS = frozenset(method for method, _, _ in _PATTERNS)
# Routes that take over the connection: answered `101` (Upgrade asked) or `200` + raw stream (not asked).
_HIJACK_PATH = re.compile(rf"{_VERSION}/(?:exec/.+/start|containers/.+/attach)")
# Go's url.getScheme: a letter, then letters, digits, "+", "-" or "."; the request-target is then absolute-form.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split(target: bytes) -> tuple[str, str]:
    path, _, query = target.decode("latin-1").partition("?")
    return path, query


def routed_path(target: bytes) -> tuple[str, str] | None:
    """The path dockerd's router matches (decoded) and the raw query; None where it routes nothing: a target
    Go refuses (400: a bad escape, no path) or a path mux answers with a redirect to its clean form (301)."""
    if target[:1] == b"/" and b"%" not in target and b"//" not in target and b"/." not in target:
        return _split(target)  # origin form, nothing to decode, clean: what every usual client sends
    text = target.decode("latin-1")
    scheme = _SCHEME.match(text)
    rest, _, query = text[scheme.end() if scheme else 0:].partition("?")
    if not rest.startswith("/"):
        return None  # Go: "invalid URI for request" (400), or an opaque URI without a path (301 to /)
    if scheme and rest.startswith("//"):  # the authority goes; Host is not a route
        slash = rest.find("/", 2)
        if slash < 0:
            return None
        rest = rest[slash:]
    if _BAD_ESCAPE.search(rest):
        return None  # Go: "invalid URL escape" (400)
    path = urllib.parse.unquote_to_bytes(rest).decode("latin-1")
    return (path, query) if _is_clean(path) else None


def _is_clean(path: str) -> bool:
    """gorilla/mux's cleanPath leaves it unchanged: absolute, no empty (but a trailing), "." or ".." element."""
    if not path.startswith("/"):
        return False
    elements = path[1:].split("/")
    last = len(elements) - 1
    return all(element not in (".", "..") and (element or index == last) for index, element in enumerate(elements))


def hooked_route(method: bytes, target: bytes) -> RouteMatch | None:
    """The hooked route a request is for (as dockerd routes it), or None when it is pure relay."""
    if method not in _HOOKED_METHODS:
        return None  # most requests (GETs): nothing to parse
    routed = routed_path(target)
    if routed is None or "/containers/" not in routed[0]:
        return None
    path, query = routed
    for wanted_method, pattern, route in _PATTERNS:
        if method == wanted_method and (match := pattern.fullmatch(path)):
            container_id = match.group(1) if match.groups() else None
            return RouteMatch(route, container_id, query)
    return None


def is_hijack_route(method: bytes, target: bytes) -> bool:
    """exec start and attach: the answer may turn the connection into a raw byte stream."""
    if method != b"POST":
        return False
    routed = routed_path(target)
    return routed is not None and _HIJACK_PATH.fullmatch(routed[0]) is not None


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
