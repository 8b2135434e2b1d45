"""The core's NRI event table (hooks.nri_events) on the wire: each row's messages resolved, and what the session
derives from it (the subscription mask, the notifications older plugins take as StateChange).

Nothing is listed here: a row added to the table is sent by the host as its rules say. A row whose messages this
package's proto lacks fails at import, not at the first call.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from runtimeproxy.hooks.nri_events import EVENTS, NriEvent
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri


@dataclass(frozen=True)
class WireEvent:
    """One row of the table with its method's messages."""

    row: NriEvent
    request: type[Message]
    response: type[Message]

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def number(self) -> int:
        return self.row.number

    def carries(self, field: str) -> bool:
        """The request has the field."""
        return field in self.request.DESCRIPTOR.fields_by_name

    def answers(self, field: str) -> bool:
        """The response has the field."""
        return field in self.response.DESCRIPTOR.fields_by_name

    def message(self, **fields: Message) -> Message:
        """The method's request with those of `fields` its message has (a pod event carries no container, an
        UpdateContainer the update's resources): NRI's messages differ only in which of these they carry."""
        request = self.request()
        for name, value in fields.items():
            if self.carries(name):
                getattr(request, name).CopyFrom(value)
        return request


def _wire(row: NriEvent) -> WireEvent:
    if nri.Event.Name(row.number) != _enum_name(row.name):
        raise ValueError(f"NRI event {row.name}: number {row.number} is {nri.Event.Name(row.number)} on the wire")
    return WireEvent(row, getattr(nri, row.request), getattr(nri, row.response))


def _enum_name(name: str) -> str:
    """"CreateContainer" -> "CREATE_CONTAINER" (the Event enum's spelling)."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


WIRE: dict[str, WireEvent] = {row.name: _wire(row) for row in EVENTS}
BY_NUMBER: dict[int, WireEvent] = {event.number: event for event in WIRE.values()}
KNOWN_EVENTS_MASK = sum(row.bit for row in EVENTS)
# What a plugin of v0.6-v0.8 takes as StateChange: the events whose own methods came later.
NOTIFICATIONS: frozenset[int] = frozenset(row.number for row in EVENTS if row.notification)
