"""Answers built from "only what you change": the koordlet-style echo the proxy's merge rules expect.

koordlet answers every hook with the whole request echoed back, edited. The proxy's merge (hooks.merge)
is built for that: a non-empty `container_envs` *replaces* the environment, resources are taken field by
field. A plugin written with this kit returns a response message holding only its changes; `answer()` lays
them over the echoed request, so a returned `container_envs={"MY_VAR": "x"}` adds one variable to the
container's environment, `container_resources=LinuxContainerResources(cpu_shares=512)` changes CPU shares
and nothing else.

What a change can say is limited by proto3: a field at its zero value ("", 0) is indistinguishable from
one not set, so it counts as "no change". To answer exactly (set oom_score_adj to 0, remove a variable),
return `Whole(response)`: it is sent as it is, the plain koordlet protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

Resp = TypeVar("Resp", bound=Message)


@dataclass(frozen=True)
class Whole(Generic[Resp]):
    """An answer to send exactly as it is (the plain koordlet protocol: echo plus edits, done by you)."""

    response: Resp


def echoed(request: Message, response_type: type[Resp]) -> Resp:
    """A ``response_type`` carrying every field of ``request`` that it has under the same name."""
    response = response_type()
    for field in response.DESCRIPTOR.fields:
        if request.DESCRIPTOR.fields_by_name.get(field.name) is None:
            continue
        value = getattr(request, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(response, field.name).update(value)
        elif field.message_type is not None:
            if request.HasField(field.name):
                getattr(response, field.name).CopyFrom(value)
        else:
            setattr(response, field.name, value)
    return response


def overlay(target: Message, changes: Message) -> None:
    """Lay every field `changes` sets over `target`: map entries added or replaced, nested messages
    overlaid in turn, repeated fields and scalars replaced."""
    for field, value in changes.ListFields():
        current = getattr(target, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            current.update(value)
        elif field.is_repeated:
            del current[:]
            current.extend(value)
        elif field.message_type is not None:
            overlay(current, value)
        else:
            setattr(target, field.name, value)


def answer(request: Message, result: Resp | Whole[Resp] | None, response_type: type[Resp]) -> Resp:
    """The answer to send for a hook's `result`: None changes nothing (the echo), `Whole` is sent as is,
    a response message is a set of changes laid over the echo."""
    if isinstance(result, Whole):
        return _checked(result.response, response_type)
    response = echoed(request, response_type)
    if result is not None:
        overlay(response, _checked(result, response_type))
    return response


def _checked(response: object, response_type: type[Resp]) -> Resp:
    if not isinstance(response, response_type):
        raise TypeError(f"a hook must return a {response_type.__name__}, Whole(...) or None, "
                        f"not {type(response).__name__}")
    return response
