"""Per-node operator toggles: plugins, or some of their hooks, switched off on this node.

A disabled plugin or hook is not called at all, whatever its failure policy. Toggles are
keyed by the plugin's config file name (`koordlet.json`), persisted in a small JSON state
file written atomically, and outlive a proxy restart and any rewrite of the plugin's
config file; a toggle for a file that does not exist (yet) is kept and applies once it
appears. `disable --all` (plugin `*`) turns every hook on the node off.

Each toggle has a scope (a whole plugin, or one hook of it) and keeps its own reason, author
and time: a per-hook toggle never rewrites the whole-plugin one. Whether a name is a
registered plugin is the admin service's question (it knows the registry); `unknown_plugin`
words the refusal. Plugins of another kind (NRI, hooks.nri_plugins) are toggled under their kind's prefix
(hooks.kinds: `nri:<index-name>`, `nri_toggle_name`), a name no config file can have, whole or per NRI event
(hooks.nri_events.EVENT_NAMES) where a hook plugin's toggle names a hook: `scope_names` says which names a
plugin's toggles take, `scopes_named` refuses the other kind's names in one line.

Shadow settings live here too, persisted in the same file: `runtimeproxyctl shadow PLUGIN` puts a plugin
on trial (called, never applied: hooks.dispatcher), `unshadow` takes it off trial, which for a plugin
whose config file says `"shadow": true` is kept as a promotion that overrides the file.

The module owns the toggles in force (`Toggles`: what `allows` answers on every call, and the changes to it);
what they persist and how is hooks.toggle_state's (`Toggle`, `ShadowSetting`, the state file), the names a
person types and the sentences they read hooks.toggle_words' (both re-exported here for callers). Owns no
transport: the admin service and the dispatcher both call in here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from runtimeproxy.hooks.kinds import kind_of
from runtimeproxy.hooks.toggle_state import (
    STATE_FILE_NAME, ShadowSetting, Toggle, decode, decode_shadows, encode, scope_order, write_atomically,
)
from runtimeproxy.hooks.toggle_words import (
    ALL_PLUGINS, NRI_PREFIX, WHOLE_PLUGIN, ToggleError, UnknownPlugin, check_scopes, clean_author,
    nri_toggle_name, hook_names, in_order, plugin_file_name, scope_names, scope_word, scopes_named,
    toggle_scopes, unknown_plugin,
)
from runtimeproxy.usage import os_reason

__all__ = [  # the words and the persisted decisions, for callers that know the toggles as one thing
    "ALL_PLUGINS", "NRI_PREFIX", "STATE_FILE_NAME", "WHOLE_PLUGIN", "ShadowSetting", "Toggle", "ToggleError",
    "Toggles", "UnknownPlugin", "clean_author", "nri_toggle_name", "hook_names", "plugin_file_name",
    "scope_names", "scopes_named", "unknown_plugin", "write_atomically",
]

log = logging.getLogger(__name__)


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
        check_scopes(name, hooks)
        now, author = time.time(), clean_author(author)
        toggles = dict(self._toggles)
        notes = []
        added = [Toggle(name, scope, reason.strip(), now, author) for scope in toggle_scopes(name, hooks)]
        for toggle in added:
            previous = toggles.get(toggle.key)
            if previous is not None:
                notes.append(f"replaced the toggle of {previous.describe()} {previous.provenance()}")
            toggles[toggle.key] = toggle
        whole = toggles.get((name, WHOLE_PLUGIN))
        if hooks and whole is not None:  # what changed, then what did not (its reason is not replaced)
            set_now = ", ".join(t.describe() for t in added)
            notes.append(f"disabled {set_now} with its own toggle; the toggle of {whole.describe()} stays as it "
                         f"was, {whole.provenance()}")
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
        check_scopes(name, hooks)
        toggles = dict(self._toggles)
        if hooks:
            _enable_hooks(toggles, name, hooks)
        else:
            for key in [key for key in toggles if key[0] == name]:
                del toggles[key]
        what = f"{name} ({','.join(in_order(name, hooks))})" if hooks else f"{name} (all {scope_word(name)})"
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
        same_kind = kind_of(name) is kind_of(ALL_PLUGINS)  # `--all --hook X` names hooks, which NRI events are not
        return [
            f"still off: {toggle.describe()} is disabled ({toggle.provenance()}); `enable --all` clears it"
            for toggle in self.of(ALL_PLUGINS)
            if not hooks or not toggle.hook or (same_kind and hooks & toggle.hooks_off)
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
            log.error("cannot read toggle state %s: %s; starting with no toggles", self.state_path, os_reason(error))
            return
        try:
            toggles = decode(data)
            shadows = decode_shadows(data)
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
        write_atomically(self.state_path, encode(toggles, shadows))


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


def _display_order(toggle: Toggle) -> tuple[str, int]:
    return (toggle.plugin, scope_order(toggle, -1))
