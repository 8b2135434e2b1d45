"""Comparing what a CRI runtime answers directly with what it answers through the proxy.

An *outcome* is one call's answer as plain data, so two of them compare with ``==`` and print readably:
``{"ok": <the response as a dict>}``, ``{"stream": [<each streamed message>]}`` or
``{"error": {"code": "NOT_FOUND", "details": "..."}}``. Proto field names are kept; JSON documents a runtime
packs into an ``info`` map (containerd's verbose status) are parsed, so a mask can reach inside them.

Two runs of the same sequence create different objects, so before comparing, ``normalized`` replaces each
side's own tokens (the IDs it was given, the names it chose) by placeholders and masks the paths that differ
by nature (timestamps, pids, counters). A mask replaces a value by ``"<masked>"`` rather than dropping it:
a field present on one side only is still a difference.

Two runs of another kind (what a plugin saw over a pod's life: rplab.nri_differential, rplab.koord_differential)
compare as *views*: ``placeheld`` puts placeholders for the tokens each run chose and masks times and pids,
``leaf_differences`` lists every leaf where two views differ by path, and ``unexplained`` checks those paths against
a test's table of known differences both ways.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

Outcome = dict[str, Any]
MASKED = "<masked>"
ABSENT = "<absent>"  # a leaf one view has and the other has not
INFO_MAP = "info"  # containerd's verbose answers: {"info": "<JSON document>"}


def answer(message: Message) -> Any:
    """A response as plain data: proto field names, enum names, int64 as strings, info JSON parsed."""
    return _parse_info(json_format.MessageToDict(message, preserving_proto_field_name=True))


def _parse_info(value: Any) -> Any:
    if isinstance(value, dict):
        parsed = {}
        for key, item in value.items():
            if key == INFO_MAP and isinstance(item, dict):
                parsed[key] = {name: _json_or_text(text) for name, text in item.items()}
            else:
                parsed[key] = _parse_info(item)
        return parsed
    if isinstance(value, list):
        return [_parse_info(item) for item in value]
    return value


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def failure(error: grpc.RpcError) -> Outcome:
    return {"error": {"code": error.code().name, "details": error.details()}}


def outcome_of(call: Callable[[], Any]) -> Outcome:
    """Run one unary or server-streaming call and capture its answer or its error."""
    try:
        result = call()
        if isinstance(result, Message):
            return {"ok": answer(result)}
        return {"stream": [answer(message) for message in result]}
    except grpc.RpcError as error:
        return failure(error)


def is_success(outcome: Outcome) -> bool:
    return "error" not in outcome


class StreamWatch:
    """A server stream (GetContainerEvents) read in the background while other calls cause what it reports."""

    def __init__(self, call: Callable[..., Any], request: Message, timeout: float = 300) -> None:
        self._stream = call(request, timeout=timeout)
        self._messages: list[Message] = []
        self._error: grpc.RpcError | None = None
        self._thread = threading.Thread(target=self._read, name="stream-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self._stream:
                self._messages.append(message)
        except grpc.RpcError as error:
            self._error = error

    def wait_quiet(self, quiet_seconds: float, timeout: float = 30.0) -> int:
        """Wait until nothing arrived for ``quiet_seconds`` (or ``timeout``); how many messages arrived so far."""
        deadline = time.monotonic() + timeout
        seen = -1
        while seen != len(self._messages) and time.monotonic() < deadline:
            seen = len(self._messages)
            time.sleep(quiet_seconds)
        return len(self._messages)

    def finish(self) -> Outcome:
        """Stop watching: what arrived, or how the stream failed (our own cancel is not a failure)."""
        self._stream.cancel()
        self._thread.join(10)
        if self._error is not None and self._error.code() is not grpc.StatusCode.CANCELLED:
            return failure(self._error)
        return {"stream": [answer(message) for message in self._messages]}


def substituted(value: Any, tokens: Mapping[str, str]) -> Any:
    """``value`` with every occurrence of each token (in strings, at any depth) replaced by its placeholder;
    longer tokens first, so a token containing another is replaced whole."""
    ordered = sorted(tokens.items(), key=lambda item: len(item[0]), reverse=True)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            for token, placeholder in ordered:
                item = item.replace(token, placeholder)
            return item
        if isinstance(item, dict):
            return {walk(key): walk(sub) for key, sub in item.items()}
        if isinstance(item, list):
            return [walk(sub) for sub in item]
        return item

    return walk(value)


def masked(value: Any, paths: Iterable[str]) -> Any:
    """``value`` with each dotted path's value (if present) replaced by ``MASKED``; ``*`` matches every list
    item or every map key at that level. Paths start below the outcome's kind ("status.created_at").
    A path ending in ``?`` is masked present or absent: a counter that is still 0 (so left out of the answer)
    on one side and counted on the other is no difference."""
    for path in paths:
        optional = path.endswith("?")
        value = _mask(value, path.rstrip("?").split("."), optional)
    return value


def _mask(value: Any, parts: list[str], optional: bool = False) -> Any:
    if not parts:
        return MASKED
    head, rest = parts[0], parts[1:]
    if isinstance(value, list) and head == "*":
        return [_mask(item, rest, optional) for item in value]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head] if head in value else []
        result = {key: _mask(item, rest, optional) if key in keys else item for key, item in value.items()}
        if optional and not rest and head != "*" and head not in value:
            result[head] = MASKED
        return result
    return value


def unordered(value: Any, fields: Iterable[str]) -> Any:
    """``value`` with the lists under these top-level fields sorted (runtimes list in map order)."""
    if not isinstance(value, dict):
        return value
    copy = dict(value)
    for name in fields:
        if isinstance(copy.get(name), list):
            copy[name] = sorted(copy[name], key=lambda item: json.dumps(item, sort_keys=True))
    return copy


def normalized(outcome: Outcome, tokens: Mapping[str, str], mask: Iterable[str] = (),
               unordered_fields: Iterable[str] = ()) -> Outcome:
    """One side's outcome ready to compare: tokens replaced, lists sorted, masked paths hidden.
    Masks and sorting apply to answers and to every streamed message, never to errors."""
    outcome = substituted(outcome, tokens)
    if "ok" in outcome:
        return {"ok": masked(unordered(outcome["ok"], unordered_fields), mask)}
    if "stream" in outcome:
        return {"stream": [masked(unordered(item, unordered_fields), mask) for item in outcome["stream"]]}
    return outcome


def differing_paths(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where two plain-data values differ, one line per leaf: ``path: expected != got``."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return [line for key in sorted(set(expected) | set(got), key=str)
                for line in differing_paths(expected.get(key, "<absent>"), got.get(key, "<absent>"), f"{path}.{key}")]
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [line for index, (a, b) in enumerate(zip(expected, got))
                for line in differing_paths(a, b, f"{path}.{index}")]
    return [] if expected == got else [f"{path.lstrip('.') or '<top>'}: {expected!r} != {got!r}"]


# -- views: two runs' plain data, compared leaf by leaf against a table of known differences ------------------------

TIME_FIELDS = frozenset({"created_at", "started_at", "finished_at"})
PID_FIELDS = frozenset({"pid"})
_PROC_PID = re.compile(r"/proc/\d+/")


def placeheld(value: Any, tokens: Mapping[str, str], key: str = "") -> Any:
    """``value`` with each token (an ID or directory a run chose) replaced by its placeholder (the longest first: a
    root may hold an ID), times and pids masked (``<time>``, ``<pid>``, ``/proc/<pid>/``)."""
    if isinstance(value, dict):
        return {k: placeheld(v, tokens, k) for k, v in value.items()}
    if isinstance(value, list):
        return [placeheld(v, tokens) for v in value]
    if key in TIME_FIELDS and value:
        return "<time>"
    if key in PID_FIELDS and value:
        return "<pid>"
    if isinstance(value, str):
        for token in sorted(tokens, key=len, reverse=True):
            value = value.replace(token, tokens[token])
        return _PROC_PID.sub("/proc/<pid>/", value)
    return value


def _segment(key: str) -> str:
    return f"[{key}]" if re.search(r"[.\[\]*/]", key) else f".{key}"


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf by path; an empty message or map has none (as protobuf, absent and empty mean the same).
    A list is one leaf; a map key with a dot, bracket, star or slash is one ``[segment]``."""
    if isinstance(value, dict):
        return {leaf: item for key, sub in value.items()
                for leaf, item in leaves(sub, path + _segment(str(key))).items()}
    return {path.lstrip("."): value}


def leaf_differences(reference: Any, other: Any) -> dict[str, tuple[Any, Any]]:
    """``{path: (reference's value, other's value)}`` for every leaf where two views differ."""
    mine, theirs = leaves(reference), leaves(other)
    return {path: (mine.get(path, ABSENT), theirs.get(path, ABSENT))
            for path in sorted(set(mine) | set(theirs)) if mine.get(path, ABSENT) != theirs.get(path, ABSENT)}


def unexplained(found: Iterable[str], table: Iterable[str]) -> tuple[list[str], list[str]]:
    """Paths no table entry names (a pattern: ``*`` matches any part of a path), and table entries no path matches
    any more (a difference that disappeared: the table must lose it)."""
    paths = list(found)
    patterns = {pattern: re.compile(".*".join(map(re.escape, pattern.split("*")))) for pattern in table}
    new = [path for path in paths if not any(regex.fullmatch(path) for regex in patterns.values())]
    gone = [pattern for pattern, regex in patterns.items() if not any(regex.fullmatch(path) for path in paths)]
    return new, gone
