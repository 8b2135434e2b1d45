"""What changed between two versions of a hook message, field by field.

`field_changes(before, after)` lists every leaf that differs, named the way validation names response
fields (`container_resources.cpu_shares`, `container_envs["PATH"]`): map entries one by one (a key
missing on one side is `UNSET`), nested messages recursively, repeated fields as one value. The proxy
logs it per plugin answer (hooks.dispatcher), `runtimeproxyctl try-plugin` prints it, and a per-pod
decision trace can record it. Also: which environment variables an answer drops (the merge replaces the
environment with a non-empty `container_envs`, so an answer that lists only its own variable removes the
others). `with_changes(message, changes)` applies such a list to another version (the chain's fold again
without a refused answer, hooks.chain).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message


class _Unset:
    """A map key or message absent on one side of a change."""

    def __repr__(self) -> str:
        return "(unset)"


UNSET = _Unset()


@dataclass(frozen=True)
class FieldChange:
    field: str  # "container_envs[\"MY_VAR\"]", "container_resources.memory_limit_in_bytes"
    before: object  # a scalar, a list (repeated fields) or UNSET
    after: object

    def __str__(self) -> str:
        return f"{self.field}: {show(self.before)} -> {show(self.after)}"


def show(value: object) -> str:
    """A value as a log line shows it: strings JSON-quoted, UNSET as (unset)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(show(item) for item in value) + "]"
    if isinstance(value, Message):
        return "{" + str(value).strip().replace("\n", ", ") + "}"
    return repr(value)


def field_changes(before: Message, after: Message, prefix: str = "") -> list[FieldChange]:
    """Every leaf that differs between two messages of the same type, in field-number order."""
    changes: list[FieldChange] = []
    for field in before.DESCRIPTOR.fields:
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old == new and (field.message_type is None or field.is_repeated
                           or before.HasField(field.name) == after.HasField(field.name)):
            continue  # compared in C: most fields of an answer are echoed (a trace walks every answer)
        name = prefix + field.name
        if is_map(field):
            changes += _map_changes(name, old, new)
        elif field.is_repeated:
            changes.append(FieldChange(name, list(old), list(new)))
        elif field.message_type is not None:
            changes += _message_changes(name, before, after, field.name)
        else:
            changes.append(FieldChange(name, old, new))
    return changes


def with_changes(message: Message, changes: list[FieldChange]) -> Message:
    """A copy of `message` with each change's `after` set at its field (UNSET: the map key or message removed)."""
    result = type(message)()
    result.CopyFrom(message)
    for change in changes:
        path, _, key = change.field.partition("[")
        *parents, name = path.split(".")
        target = result
        for parent in parents:
            target = getattr(target, parent)
        if key:
            entries = getattr(target, name)
            if change.after is UNSET:
                entries.pop(json.loads(key[:-1]), None)
            else:
                entries[json.loads(key[:-1])] = change.after
        elif change.after is UNSET:
            target.ClearField(name)
        elif isinstance(change.after, Message):
            getattr(target, name).CopyFrom(change.after)
        elif isinstance(change.after, list):
            del getattr(target, name)[:]
            getattr(target, name).extend(change.after)
        else:
            setattr(target, name, change.after)
    return result


def describe(changes: list[FieldChange]) -> str:
    return "; ".join(str(change) for change in changes) if changes else "nothing"


def dropped_env_names(request_envs: Mapping[str, str], answered_envs: Mapping[str, str]) -> list[str]:
    """The request's variables an answer removes: a non-empty `container_envs` replaces the environment."""
    if not answered_envs:
        return []  # an empty map changes nothing
    return sorted(name for name in request_envs if name not in answered_envs)


def is_map(field: FieldDescriptor | Any) -> bool:  # Any: upb's descriptor class, which has no public name
    entry = field.message_type
    if entry is None:
        return False
    known = _MAP_ENTRIES.get(entry.full_name)
    if known is None:  # GetOptions builds a Python message each time (~0.1 ms): asked once per type
        known = _MAP_ENTRIES[entry.full_name] = entry.GetOptions().map_entry
    return known


_MAP_ENTRIES: dict[str, bool] = {}  # message type -> it is a map's entry


def _map_changes(name: str, old: Mapping[str, object], new: Mapping[str, object]) -> list[FieldChange]:
    changes = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key, UNSET), new.get(key, UNSET)
        if before != after:
            changes.append(FieldChange(f"{name}[{json.dumps(key)}]", before, after))
    return changes


def _message_changes(name: str, before: Message, after: Message, field: str) -> list[FieldChange]:
    had, has = before.HasField(field), after.HasField(field)
    if not had and not has:
        return []
    nested = field_changes(getattr(before, field), getattr(after, field), name + ".")
    if had != has and not nested:  # an empty message appeared or went: say so
        return [FieldChange(name, getattr(before, field) if had else UNSET, getattr(after, field) if has else UNSET)]
    return nested
