"""Per-node operator toggles: plugins, or some of their hooks, switched off on this node.

A disabled plugin or hook is not called at all, whatever its failure policy. Toggles are
keyed by the plugin's config file name (`koordlet.json`), persisted in a small JSON state
file written atomically, and outlive a proxy restart and any rewrite of the plugin's
config file; a toggle for a file that does not exist (yet) is kept and applies once it
appears. `disable --all` (plugin `*`) turns every hook on the node off.

Each toggle has a scope (a whole plugin, or one hook of it) and keeps its own reason, author
and time: a per-hook toggle never rewrites the whole-plugin one. Whether a name is a
registered plugin is the admin service's question (it knows the registry); `unknown_plugin`
words the refusal. Plugins of another protocol (NRI, hooks.extra) are toggled under
`nri:<index-name>` (`extra_toggle_name`), a name no config file can have, whole or per NRI event
(hooks.extra.EVENT_NAMES) where a hook plugin's toggle names a hook: `scope_names` says which names a
plugin's toggles take, `scopes_named` refuses the other kind's names in one line.

Shadow settings live here too, persisted in the same file: `runtimeproxyctl shadow PLUGIN` puts a plugin
on trial (called, never applied: hooks.dispatcher), `unshadow` takes it off trial, which for a plugin
whose config file says `"shadow": true` is kept as a promotion that overrides the file.

Owns no transport: the admin service and the dispatcher both call in here.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import logging
import os
import re
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from runtimeproxy.hooks.config import CONFIG_SUFFIX
from runtimeproxy.hooks.extra import EVENT_NAMES, event_named
from runtimeproxy.hooks.names import HOOK_NAMES, hook_named

log = logging.getLogger(__name__)

STATE_FILE_NAME = "toggles.json"
ALL_PLUGINS = "*"
EXTRA_PREFIX = "nri:"  # toggles of NRI plugins (hooks.extra): "nri:10-resource-policy"
WHOLE_PLUGIN = ""  # the scope of a toggle that covers every hook (NRI: every event) of its plugin
# 3: an NRI plugin's per-event toggles, under "events"/"events_on" (a version 2 reader takes them for
# whole-plugin toggles: more off, never less); 2 (still read): one entry per toggle (scope), with its
# author; 1 (still read): one entry per plugin.
_STATE_VERSION = 3
_HOOK_ORDER = {hook: index for index, hook in enumerate(HOOK_NAMES)}
_EVENT_ORDER = {event: index for index, event in enumerate(EVENT_NAMES)}
_NRI_ID = re.compile(r"^\d{2}-.")  # NRI's plugin ids: a two-digit index, a dash, the name
_MAX_NAMES_SHOWN = 10
_MAX_AUTHOR_CHARS = 64


class ToggleError(ValueError):
    """A toggle request that cannot be applied; the message says why, in one line."""


class UnknownPlugin(ToggleError):
    """A toggle naming no config file the proxy knows (a typo, or a file not there yet)."""


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
        scope = _scope_word(self.plugin)
        if self.hooks_on:
            return f"{what} (all {scope} but {','.join(_in_order(self.plugin, self.hooks_on))})"
        return f"{what} (all {scope})"

    def provenance(self) -> str:
        by = f" by {self.author}" if self.author else ""
        return f"set{by} at {_timestamp(self.since_unix_seconds)}: {self.reason}"


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
        return f"{self.plugin} {what}, set{by} at {_timestamp(self.since_unix_seconds)}"


def plugin_file_name(name: str) -> str:
    """`koordlet` and `koordlet.json` name the same plugin; anything path-like is refused. An NRI
    plugin's toggle name (`nri:10-name`) is kept as it is."""
    name = name.strip()
    if not name or "/" in name or name.startswith(".") or name == EXTRA_PREFIX:
        raise ToggleError(f"{name!r} is not a plugin config file name (e.g. koordlet.json)")
    if name.startswith(EXTRA_PREFIX):
        return name
    return name if name.endswith(CONFIG_SUFFIX) else name + CONFIG_SUFFIX


def extra_toggle_name(plugin_id: str) -> str:
    """The toggle name of an NRI plugin (hooks.extra): "10-name" -> "nri:10-name"."""
    return EXTRA_PREFIX + plugin_id


def is_extra(plugin: str) -> bool:
    """An NRI plugin's toggle name (`nri:10-name`)."""
    return plugin.startswith(EXTRA_PREFIX)


def scope_names(plugin: str) -> tuple[str, ...]:
    """What the toggles of a plugin name, in lifecycle order: an NRI plugin's events, any other plugin's hooks."""
    return EVENT_NAMES if is_extra(plugin) else HOOK_NAMES


def hook_names(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Hook names as a person spelled them, for a hook plugin (or `--all`)."""
    return scopes_named(WHOLE_PLUGIN, names)


def scopes_named(plugin: str, names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The hooks (of a hook plugin) or NRI events (of an NRI plugin, `nri:10-name`) a person named, without case;
    a name of neither, or of the other kind, is refused in one line naming the valid ones."""
    named = event_named if is_extra(plugin) else hook_named
    scopes: set[str] = set()
    for name in names:
        scope = named(name.strip())
        if scope is None:
            raise ToggleError(_not_a_scope(plugin, name.strip()))
        scopes.add(scope)
    return frozenset(scopes)


def _not_a_scope(plugin: str, name: str) -> str:
    valid = scope_names(plugin)
    if is_extra(plugin) and hook_named(name) is not None:
        message = (f"{hook_named(name)} is a hook of hook plugins; NRI plugin {plugin} is toggled by NRI event: "
                   f"{', '.join(valid)}")
    elif not is_extra(plugin) and event_named(name) is not None:
        what = f"{plugin} is a hook plugin, toggled" if plugin else "hook plugins are toggled"
        message = f"{event_named(name)} is an NRI event; {what} by hook: {', '.join(valid)}"
        stem = plugin.removesuffix(CONFIG_SUFFIX)
        if _NRI_ID.match(stem):
            message += f" (an NRI plugin that is not attached is named {extra_toggle_name(stem)})"
    else:
        kind = "NRI event" if is_extra(plugin) else "hook"
        message = f"unknown {kind} {name!r} (known: {', '.join(valid)})"
    folded = {scope.casefold(): scope for scope in valid}
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1, cutoff=0.6)
    return message + (f"; did you mean {folded[close[0]]}?" if close else "")


def _check_scopes(plugin: str, hooks: frozenset[str]) -> None:
    """What the admin service parsed for this plugin (scopes_named); a wrong kind here is a caller's slip."""
    wrong = sorted(hooks - frozenset(scope_names(plugin)))
    if wrong:
        raise ToggleError(_not_a_scope(plugin, wrong[0]))


def _scope_word(plugin: str) -> str:
    return "events" if is_extra(plugin) else "hooks"


def _in_order(plugin: str, scopes: Collection[str]) -> list[str]:
    return [scope for scope in scope_names(plugin) if scope in scopes]


def unknown_plugin(typed: str, registered: Collection[str], directory_problem: str = "",
                   toggled: Collection[str] = ()) -> UnknownPlugin:
    """The one-line refusal of a name that is no config file, with a did-you-mean among the
    registered files and the names that have toggles."""
    typed = typed.strip()
    names = sorted(registered)
    shown = ", ".join(names[:_MAX_NAMES_SHOWN]) or "none"
    if len(names) > _MAX_NAMES_SHOWN:
        shown += f", and {len(names) - _MAX_NAMES_SHOWN} more"
    if directory_problem:
        shown += f"; the config directory {directory_problem}"
    message = f"no plugin {typed} is registered (registered: {shown})"
    # Compared without the suffix every name shares, which would make any two names look close.
    stems = sorted(name.removesuffix(CONFIG_SUFFIX) for name in set(names) | set(toggled) - {ALL_PLUGINS})
    close = difflib.get_close_matches(plugin_file_name(typed).removesuffix(CONFIG_SUFFIX), stems, n=1, cutoff=0.6)
    if close:
        suggestion = close[0] + CONFIG_SUFFIX if typed.endswith(CONFIG_SUFFIX) else close[0]
        message += f"; did you mean {suggestion}?"
    return UnknownPlugin(message)


def clean_author(author: str) -> str:
    """What a client says about who it is, made safe for one log line and a table cell."""
    printable = "".join(c if c.isprintable() else "?" for c in author.strip())
    return printable[:_MAX_AUTHOR_CHARS]


class Toggles:
    """The toggles in force; `allows` is what the dispatcher asks on every hook call."""

    def __init__(self, state_dir: Path | None) -> None:
        # None: kept in memory only (tests, or an operator who wants no state on disk).
        self.state_path = state_dir / STATE_FILE_NAME if state_dir is not None else None
        self._toggles: dict[tuple[str, str], Toggle] = {}
        self._off: frozenset[tuple[str, str]] = frozenset()  # (plugin, hook) pairs, precomputed
        self._whole_plugins_off: frozenset[str] = frozenset()
        self._shadows: dict[str, ShadowSetting] = {}

    @property
    def shadow_settings(self) -> tuple[ShadowSetting, ...]:
        return tuple(self._shadows[name] for name in sorted(self._shadows))

    def shadow_override(self, plugin: str) -> bool | None:
        """True: in shadow by the operator; False: promoted; None: as its config file says."""
        if not self._shadows:  # the common case: one dict truth test
            return None
        setting = self._shadows.get(plugin)
        return setting.shadow if setting is not None else None

    def set_shadow(self, plugin: str, shadow: bool, configured_shadow: bool, author: str = "") -> list[str]:
        """Put a plugin on trial, or take it off (`configured_shadow`: its file says `"shadow": true`, so
        taking it off is kept as a promotion). Persisted first, then logged; returns notes."""
        name = plugin_file_name(plugin)
        shadows = dict(self._shadows)
        previous = shadows.pop(name, None)
        if shadow or configured_shadow:  # unshadowing a plugin the file does not shadow needs no entry
            shadows[name] = ShadowSetting(name, shadow, time.time(), clean_author(author))
        notes = []
        was_shadow = previous.shadow if previous is not None else configured_shadow
        if was_shadow == shadow:
            notes.append(f"{name} was already {'in shadow' if shadow else 'applied (not in shadow)'}")
        self._save(self._toggles, shadows)
        self._shadows = shadows
        by = f" by {clean_author(author)}" if author else ""
        log.warning("%s %s on this node%s", name, "put in shadow (called, never applied)" if shadow
                    else "taken out of shadow: its answers are applied", by, extra={"plugin": name})
        return notes

    @property
    def active(self) -> tuple[Toggle, ...]:
        """Every toggle, by plugin, its whole-plugin toggle first, then hooks in lifecycle order."""
        return tuple(sorted(self._toggles.values(), key=_display_order))

    def of(self, plugin: str) -> tuple[Toggle, ...]:
        return tuple(t for t in self.active if t.plugin == plugin)

    def allows(self, plugin: str, hook: str) -> bool:
        if not self._toggles:  # the common case: one dict truth test
            return True
        whole = self._whole_plugins_off
        return not (ALL_PLUGINS in whole or plugin in whole or (plugin, hook) in self._off
                    or (ALL_PLUGINS, hook) in self._off)

    def reason_for(self, plugin: str, hook: str | None = None) -> str:
        """Why a plugin (or one hook of it) is off, the most specific toggle first; "" if it is on."""
        for name in (plugin, ALL_PLUGINS):
            if hook is None:
                toggle = self._toggles.get((name, WHOLE_PLUGIN))
                if toggle is not None and not toggle.hooks_on:
                    return toggle.reason
                continue
            for scope in (hook, WHOLE_PLUGIN):
                toggle = self._toggles.get((name, scope))
                if toggle is not None and toggle.covers(hook):
                    return toggle.reason
        return ""

    # -- changes (each persisted, then logged in one line); they return notes for the operator --

    def disable(self, plugin: str, hooks: frozenset[str], reason: str, everything: bool = False,
                author: str = "") -> list[str]:
        if not reason.strip():
            raise ToggleError("disable needs a --reason: it is logged and shown in status")
        name = ALL_PLUGINS if everything else plugin_file_name(plugin)
        _check_scopes(name, hooks)
        now, author = time.time(), clean_author(author)
        toggles = dict(self._toggles)
        notes = []
        added = [Toggle(name, scope, reason.strip(), now, author) for scope in _scopes(name, hooks)]
        for toggle in added:
            previous = toggles.get(toggle.key)
            if previous is not None:
                notes.append(f"replaced the toggle of {previous.describe()} {previous.provenance()}")
            toggles[toggle.key] = toggle
        whole = toggles.get((name, WHOLE_PLUGIN))
        if hooks and whole is not None:
            notes.append(f"unchanged: the toggle of {whole.describe()} {whole.provenance()}")
        self._change(toggles)
        for toggle in added:
            log.warning("disabled %s on this node%s: %s", toggle.describe(), f" by {author}" if author else "",
                        toggle.reason, extra={"plugin": name, "hook": toggle.hook})
        return notes

    def enable(self, plugin: str, hooks: frozenset[str], everything: bool = False) -> list[str]:
        if everything:
            cleared = len(self._toggles)
            self._change({})
            log.warning("enabled every plugin and hook on this node (%d toggles cleared)", cleared,
                        extra={"plugin": ALL_PLUGINS})
            return [] if cleared else ["nothing to enable: no toggle was set"]
        name = plugin_file_name(plugin)
        _check_scopes(name, hooks)
        toggles = dict(self._toggles)
        if hooks:
            _enable_hooks(toggles, name, hooks)
        else:
            for key in [key for key in toggles if key[0] == name]:
                del toggles[key]
        what = f"{name} ({','.join(_in_order(name, hooks))})" if hooks else f"{name} (all {_scope_word(name)})"
        notes = []
        if toggles == self._toggles:
            notes.append(f"nothing to enable: no toggle turns {what} off")
        else:
            self._change(toggles)
            log.warning("enabled %s on this node", what, extra={"plugin": name, "hook": ",".join(sorted(hooks))})
        notes += self._still_off_by_all(name, hooks)
        return notes

    def _still_off_by_all(self, name: str, hooks: frozenset[str]) -> list[str]:
        """`enable koordlet` does not undo `disable --all`: say so rather than let it look on. (`--all` names
        hooks; its whole-plugin toggle covers NRI plugins' events too.)"""
        return [
            f"still off: {toggle.describe()} is disabled ({toggle.provenance()}); `enable --all` clears it"
            for toggle in self.of(ALL_PLUGINS)
            if not hooks or not toggle.hook or (not is_extra(name) and hooks & toggle.hooks_off)
        ]

    def _change(self, toggles: dict[tuple[str, str], Toggle]) -> None:
        self._save(toggles, self._shadows)  # first: a change that cannot be persisted is not made
        self._install(toggles)

    def _install(self, toggles: dict[tuple[str, str], Toggle]) -> None:
        self._toggles = toggles
        self._whole_plugins_off = frozenset(t.plugin for t in toggles.values() if not t.hook and not t.hooks_on)
        self._off = frozenset((t.plugin, hook) for t in toggles.values() if t.hook or t.hooks_on
                              for hook in t.hooks_off)

    # -- persistence -----------------------------------------------------------------------

    def load(self) -> None:
        """Read the state file; a missing file is no toggles, a broken one is logged and kept aside."""
        if self.state_path is None:
            return
        try:
            data = self.state_path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as error:
            log.error("cannot read toggle state %s: %s; starting with no toggles", self.state_path, error)
            return
        try:
            toggles = _decode(data)
            shadows = _decode_shadows(data)
        except (ValueError, TypeError, KeyError) as error:
            log.error("toggle state %s is unreadable (%s); starting with no toggles", self.state_path, error)
            return
        self._install(toggles)
        self._shadows = shadows
        for setting in self.shadow_settings:
            log.warning("%s (from %s)", setting.describe(), self.state_path, extra={"plugin": setting.plugin})
        for toggle in self.active:
            log.warning("%s is disabled on this node (toggle from %s, %s)", toggle.describe(),
                        self.state_path, toggle.provenance(), extra={"plugin": toggle.plugin})

    def _save(self, toggles: dict[tuple[str, str], Toggle], shadows: dict[str, ShadowSetting]) -> None:
        if self.state_path is None:
            return
        write_atomically(self.state_path, _encode(toggles, shadows))


def _scopes(plugin: str, hooks: frozenset[str]) -> list[str]:
    return _in_order(plugin, hooks) or [WHOLE_PLUGIN]


def _enable_hooks(toggles: dict[tuple[str, str], Toggle], name: str, hooks: frozenset[str]) -> None:
    """Turn some hooks on: drop their own toggles, narrow the whole-plugin toggle (it keeps its reason)."""
    for hook in hooks:
        toggles.pop((name, hook), None)
    whole = toggles.get((name, WHOLE_PLUGIN))
    if whole is None or not hooks & whole.hooks_off:
        return
    narrowed = replace(whole, hooks_on=whole.hooks_on | hooks)
    if narrowed.hooks_off:
        toggles[whole.key] = narrowed
    else:
        del toggles[whole.key]


def _scope_order(toggle: Toggle, whole: int) -> int:
    """Where a toggle's scope comes in its plugin's lifecycle order (`whole` for the whole-plugin toggle)."""
    order = _EVENT_ORDER if is_extra(toggle.plugin) else _HOOK_ORDER
    return order.get(toggle.hook, whole)


def _display_order(toggle: Toggle) -> tuple[str, int]:
    return (toggle.plugin, _scope_order(toggle, -1))


def _timestamp(unix_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


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



def _encode(toggles: dict[tuple[str, str], Toggle], shadows: dict[str, ShadowSetting] | None = None) -> bytes:
    # Version 1 readers (proxies before per-toggle authors) keep the last entry of each plugin:
    # the whole-plugin toggle is written last, so a downgraded proxy keeps more off, never less.
    # An NRI plugin's events go under their own keys, which a version 2 reader ignores: it reads each of
    # them as a whole-plugin toggle (more off, never less) instead of refusing the file for a hook name
    # it does not know.
    def order(toggle: Toggle) -> tuple[str, int]:
        return (toggle.plugin, _scope_order(toggle, len(EVENT_NAMES)))

    entries = []
    for t in sorted(toggles.values(), key=order):
        hooks, hooks_on = ("events", "events_on") if is_extra(t.plugin) else ("hooks", "hooks_on")
        entry: dict[str, object] = {"plugin": t.plugin, "hooks": [], "reason": t.reason,
                                    "since": t.since_unix_seconds, "author": t.author}
        if t.hook:
            entry[hooks] = [t.hook]
        if t.hooks_on:
            entry[hooks_on] = _in_order(t.plugin, t.hooks_on)
        entries.append(entry)
    document: dict[str, object] = {"version": _STATE_VERSION, "toggles": entries}
    if shadows:  # older proxies ignore the key (they apply a shadowed plugin: shadow is its file's key too)
        document["shadows"] = [{"plugin": s.plugin, "shadow": s.shadow, "since": s.since_unix_seconds,
                                "author": s.author} for _, s in sorted(shadows.items())]
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _decode(data: bytes) -> dict[tuple[str, str], Toggle]:
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
        hooks, on = ("events", "events_on") if is_extra(plugin) else ("hooks", "hooks_on")
        hooks_on = scopes_named(plugin, list(item.get(on, [])))
        for scope in _scopes(plugin, scopes_named(plugin, list(item.get(hooks, [])))):
            toggle = Toggle(plugin, scope, reason, since, author, hooks_on if not scope else frozenset())
            toggles[toggle.key] = toggle
    return toggles


def _decode_shadows(data: bytes) -> dict[str, ShadowSetting]:
    document = orjson.loads(data)
    shadows = {}
    for item in document.get("shadows", []) if isinstance(document, dict) else []:
        name = plugin_file_name(str(item["plugin"]))
        shadows[name] = ShadowSetting(name, bool(item["shadow"]), float(item.get("since", 0)),
                                      clean_author(str(item.get("author", ""))))
    return shadows
