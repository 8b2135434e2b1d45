"""NRI's lifecycle events, one row each: the one table every list and rule about them is derived from.

A row says what containerd/nri says of the event (pkg/api/api.proto, pkg/adaptation/adaptation.go and plugin.go):
its name (which is also the plugin's method, and what the node's toggles, the statistics and the trace call it),
its number on the wire (the `Event` enum; a plugin subscribes with bit 1 << (number - 1)), the method's request and
response messages (by name in package nri.pkg.api.v1alpha1: the core never loads NRI's wire, runtimeproxy.nri
resolves them), and three rules:

- `adjusts`: the answer changes the call (CreateContainer: the container to be created; UpdateContainer: its
  resources as they are to be): the core calls `NriPlugins.adjust`, the others `notify`;
- `fails_call`: an error a plugin answers fails the call (containerd: sandbox_run.go, container_start.go,
  sandbox_update_resources.go and the two adjusting events); other events' errors are logged;
- `updates`: the answer may update (and, where its message has the field, evict) other containers;
- `notification`: a plugin older than the event's own method (v0.6-v0.8) takes it as StateChange.

Derived here: `EVENT_NAMES` (lifecycle order, what status and toggles list), `event_named` (a person's spelling),
`FAILING`; in runtimeproxy.nri: the request/response types, the subscription mask, the notifications.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NriEvent:
    name: str  # "CreateContainer": the plugin's method too
    number: int  # NRI's Event enum value
    request: str  # the method's request message, "CreateContainerRequest"
    response: str
    adjusts: bool = False
    fails_call: bool = False
    updates: bool = False
    notification: bool = False

    @property
    def method(self) -> str:
        """The plugin method that delivers it (NRI names each method after its event)."""
        return self.name

    @property
    def bit(self) -> int:
        """The event's bit in ConfigureResponse.events."""
        return 1 << (self.number - 1)


def _row(name: str, number: int, **rules: bool) -> NriEvent:
    return NriEvent(name, number, f"{name}Request", f"{name}Response", **rules)


RUN_POD_SANDBOX = "RunPodSandbox"
STOP_POD_SANDBOX = "StopPodSandbox"
REMOVE_POD_SANDBOX = "RemovePodSandbox"
CREATE_CONTAINER = "CreateContainer"
POST_CREATE_CONTAINER = "PostCreateContainer"
START_CONTAINER = "StartContainer"
POST_START_CONTAINER = "PostStartContainer"
UPDATE_CONTAINER = "UpdateContainer"
POST_UPDATE_CONTAINER = "PostUpdateContainer"
STOP_CONTAINER = "StopContainer"
REMOVE_CONTAINER = "RemoveContainer"
UPDATE_POD_SANDBOX = "UpdatePodSandbox"
POST_UPDATE_POD_SANDBOX = "PostUpdatePodSandbox"
VALIDATE_CONTAINER_ADJUSTMENT = "ValidateContainerAdjustment"

# In the wire's order, which is the order a pod's lifecycle reaches them (NRI's own).
EVENTS: tuple[NriEvent, ...] = (
    _row(RUN_POD_SANDBOX, 1, fails_call=True, notification=True),
    _row(STOP_POD_SANDBOX, 2, notification=True),
    _row(REMOVE_POD_SANDBOX, 3, notification=True),
    _row(CREATE_CONTAINER, 4, adjusts=True, fails_call=True, updates=True),
    _row(POST_CREATE_CONTAINER, 5, notification=True),
    _row(START_CONTAINER, 6, fails_call=True, notification=True),
    _row(POST_START_CONTAINER, 7, notification=True),
    _row(UPDATE_CONTAINER, 8, adjusts=True, fails_call=True, updates=True),
    _row(POST_UPDATE_CONTAINER, 9, notification=True),
    _row(STOP_CONTAINER, 10, updates=True),
    _row(REMOVE_CONTAINER, 11, notification=True),
    _row(UPDATE_POD_SANDBOX, 12, fails_call=True),
    _row(POST_UPDATE_POD_SANDBOX, 13, notification=True),
    # Sent by the host itself after CreateContainer's adjusting plugins (nri.validation), never by a hook point.
    _row(VALIDATE_CONTAINER_ADJUSTMENT, 14, fails_call=True),
)
EVENT: dict[str, NriEvent] = {event.name: event for event in EVENTS}
EVENT_NAMES: tuple[str, ...] = tuple(event.name for event in EVENTS)
FAILING: frozenset[str] = frozenset(event.name for event in EVENTS if event.fails_call)
_EVENTS_BY_FOLDED_NAME = {event.casefold(): event for event in EVENT_NAMES}


def event_named(name: str) -> str | None:
    """The NRI event a person's spelling names ("createcontainer" -> "CreateContainer"), or None."""
    return _EVENTS_BY_FOLDED_NAME.get(name.casefold())
