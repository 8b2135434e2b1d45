"""What the node's toggles persist: each operator decision (a `Toggle`, a `ShadowSetting`) and the state file
that keeps them across restarts, written atomically (a reader sees the old file or the new one).

The file is JSON, version 3; versions 1 and 2 are still read, and what is written stays readable by the older
proxies that wrote them (they see more off, never less): an NRI plugin's per-event toggles go under their own
keys ("events"/"events_on"). The toggles in force are hooks.toggles'; the words, hooks.toggle_words'.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from runtimeproxy.hooks.kinds import kind_of
from runtimeproxy.hooks.toggle_words import (
    ALL_PLUGINS, clean_author, in_order, plugin_file_name, scope_names, scope_word, scopes_named,
    timestamp, toggle_scopes,
)

STATE_FILE_NAME = "toggles.json"
# 3: an NRI plugin's per-event toggles, under "events"/"events_on" (a version 2 reader takes them for
# whole-plugin toggles: more off, never less); 2 (still read): one entry per toggle (scope), with its
# author; 1 (still read): one entry per plugin.
_STATE_VERSION = 3


@dataclass(frozen=True)
class Toggle:
    """One operator decision, with its own scope, reason, author and time.

    A plugin may have one whole-plugin toggle and one toggle per hook at the same time; each
    keeps what was said when it was set. `enable --hook` on a wholly disabled plugin narrows
    the whole-plugin toggle (`hooks_on`) instead of rewriting it.
    """

    plugin: str  # a config file name, an NRI plugin's toggle name, or ALL_PLUGINS
    hook: str  # WHOLE_PLUGIN: every hook of the plugin; else one of its scope_names (a hook, or an NRI event)
    reason: str
    since_unix_seconds: float
    author: str = ""  # who set it, as runtimeproxyctl reported it; "" in state written before authors were kept
    hooks_on: frozenset[str] = frozenset()  # of a whole-plugin toggle: hooks enabled again since

    @property
    def key(self) -> tuple[str, str]:
        return (self.plugin, self.hook)

    @property
    def hooks_off(self) -> frozenset[str]:
        return frozenset({self.hook}) if self.hook else frozenset(scope_names(self.plugin)) - self.hooks_on

    def covers(self, hook: str) -> bool:
        return hook in self.hooks_off

    def describe(self) -> str:
        what = "every plugin" if self.plugin == ALL_PLUGINS else self.plugin
        if self.hook:
            return f"{what} ({self.hook})"
        scope = scope_word(self.plugin)
        if self.hooks_on:
            return f"{what} (all {scope} but {','.join(in_order(self.plugin, self.hooks_on))})"
        return f"{what} (all {scope})"

    def provenance(self) -> str:
        by = f" by {self.author}" if self.author else ""
        return f"set{by} at {timestamp(self.since_unix_seconds)}: {self.reason}"


@dataclass(frozen=True)
class ShadowSetting:
    """An operator's word on a plugin's trial, overriding its config file's `shadow` key."""

    plugin: str  # a config file name
    shadow: bool  # True: on trial; False: promoted (its file says shadow, the operator says apply it)
    since_unix_seconds: float
    author: str = ""

    def describe(self) -> str:
        what = "in shadow" if self.shadow else "promoted (applied, whatever its file's shadow key says)"
        by = f" by {self.author}" if self.author else ""
        return f"{self.plugin} {what}, set{by} at {timestamp(self.since_unix_seconds)}"


def scope_order(toggle: Toggle, whole: int) -> int:
    """Where a toggle's scope comes in its plugin's lifecycle order (`whole` for the whole-plugin toggle)."""
    order = scope_names(toggle.plugin)
    return order.index(toggle.hook) if toggle.hook in order else whole


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync, rename over it: readers see old or new."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power loss
    finally:
        os.close(directory)


def encode(toggles: dict[tuple[str, str], Toggle], shadows: dict[str, ShadowSetting] | None = None) -> bytes:
    # Version 1 readers (proxies before per-toggle authors) keep the last entry of each plugin:
    # the whole-plugin toggle is written last, so a downgraded proxy keeps more off, never less.
    # An NRI plugin's events go under their own keys, which a version 2 reader ignores: it reads each of
    # them as a whole-plugin toggle (more off, never less) instead of refusing the file for a hook name
    # it does not know.
    def order(toggle: Toggle) -> tuple[str, int]:
        return (toggle.plugin, scope_order(toggle, len(scope_names(toggle.plugin))))

    entries = []
    for t in sorted(toggles.values(), key=order):
        hooks = kind_of(t.plugin).scope_word  # "hooks", an NRI plugin's "events"
        hooks_on = f"{hooks}_on"
        entry: dict[str, object] = {"plugin": t.plugin, "hooks": [], "reason": t.reason,
                                    "since": t.since_unix_seconds, "author": t.author}
        if t.hook:
            entry[hooks] = [t.hook]
        if t.hooks_on:
            entry[hooks_on] = in_order(t.plugin, t.hooks_on)
        entries.append(entry)
    document: dict[str, object] = {"version": _STATE_VERSION, "toggles": entries}
    if shadows:  # older proxies ignore the key (they apply a shadowed plugin: shadow is its file's key too)
        document["shadows"] = [{"plugin": s.plugin, "shadow": s.shadow, "since": s.since_unix_seconds,
                                "author": s.author} for _, s in sorted(shadows.items())]
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def decode(data: bytes) -> dict[tuple[str, str], Toggle]:
    """Every version: version 1 (one entry per plugin, a list of hooks, no author) is what older
    proxies wrote; each of its hooks becomes a toggle of its own with the entry's reason and time.
    An NRI plugin's entry names its events under "events"/"events_on" (version 3; before, it had none)."""
    document = orjson.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("toggles"), list):
        raise ValueError("expected an object with a list of toggles")
    toggles: dict[tuple[str, str], Toggle] = {}
    for item in document["toggles"]:
        plugin = str(item["plugin"])
        if plugin != ALL_PLUGINS:
            plugin = plugin_file_name(plugin)
        reason, since = str(item.get("reason", "")), float(item.get("since", 0))
        author = clean_author(str(item.get("author", "")))
        hooks = kind_of(plugin).scope_word
        on = f"{hooks}_on"
        hooks_on = scopes_named(plugin, list(item.get(on, [])))
        for scope in toggle_scopes(plugin, scopes_named(plugin, list(item.get(hooks, [])))):
            toggle = Toggle(plugin, scope, reason, since, author, hooks_on if not scope else frozenset())
            toggles[toggle.key] = toggle
    return toggles


def decode_shadows(data: bytes) -> dict[str, ShadowSetting]:
    document = orjson.loads(data)
    shadows = {}
    for item in document.get("shadows", []) if isinstance(document, dict) else []:
        name = plugin_file_name(str(item["plugin"]))
        shadows[name] = ShadowSetting(name, bool(item["shadow"]), float(item.get("since", 0)),
                                      clean_author(str(item.get("author", ""))))
    return shadows
