"""Per-node operator toggles: plugins, or some of their hooks, switched off on this node.

A disabled plugin or hook is not called at all, whatever its failure policy. Toggles are
keyed by the plugin's config file name (`koordlet.json`), persisted in a small JSON state
file written atomically, and outlive a proxy restart and any rewrite of the plugin's
config file; a toggle for a file that does not exist (yet) is kept and applies once it
appears. `disable --all` (plugin `*`) turns every hook on the node off.

Owns no transport: the admin service and the dispatcher both call in here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from runtimeproxy.hooks.plugins import CONFIG_SUFFIX, HOOK_NAMES

log = logging.getLogger(__name__)

STATE_FILE_NAME = "toggles.json"
ALL_PLUGINS = "*"
_STATE_VERSION = 1
_HOOKS_BY_FOLDED_NAME = {hook.casefold(): hook for hook in HOOK_NAMES}


class ToggleError(ValueError):
    """A toggle request that cannot be applied; the message says why, in one line."""


@dataclass(frozen=True)
class Toggle:
    plugin: str  # a config file name, or ALL_PLUGINS
    hooks: frozenset[str]  # empty: every hook
    reason: str
    since_unix_seconds: float

    def covers(self, hook: str) -> bool:
        return not self.hooks or hook in self.hooks

    def describe(self) -> str:
        what = "every plugin" if self.plugin == ALL_PLUGINS else self.plugin
        hooks = ",".join(h for h in HOOK_NAMES if h in self.hooks) if self.hooks else "all hooks"
        return f"{what} ({hooks})"


def plugin_file_name(name: str) -> str:
    """`koordlet` and `koordlet.json` name the same plugin; anything path-like is refused."""
    name = name.strip()
    if not name or "/" in name or name.startswith("."):
        raise ToggleError(f"{name!r} is not a plugin config file name (e.g. koordlet.json)")
    return name if name.endswith(CONFIG_SUFFIX) else name + CONFIG_SUFFIX


def hook_names(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    hooks: set[str] = set()
    for name in names:
        hook = _HOOKS_BY_FOLDED_NAME.get(name.strip().casefold())
        if hook is None:
            raise ToggleError(f"unknown hook {name!r} (known: {', '.join(HOOK_NAMES)})")
        hooks.add(hook)
    return frozenset(hooks)


class Toggles:
    """The toggles in force; `allows` is what the dispatcher asks on every hook call."""

    def __init__(self, state_dir: Path | None) -> None:
        # None: kept in memory only (tests, or an operator who wants no state on disk).
        self.state_path = state_dir / STATE_FILE_NAME if state_dir is not None else None
        self._toggles: dict[str, Toggle] = {}
        self._off: frozenset[tuple[str, str]] = frozenset()  # (plugin, hook) pairs, precomputed
        self._whole_plugins_off: frozenset[str] = frozenset()

    @property
    def active(self) -> tuple[Toggle, ...]:
        return tuple(self._toggles[name] for name in sorted(self._toggles))

    def allows(self, plugin: str, hook: str) -> bool:
        if not self._toggles:  # the common case: one dict truth test
            return True
        whole = self._whole_plugins_off
        return not (ALL_PLUGINS in whole or plugin in whole or (plugin, hook) in self._off
                    or (ALL_PLUGINS, hook) in self._off)

    def reason_for(self, plugin: str, hook: str | None = None) -> str:
        """Why a plugin (or one hook of it) is off; "" if it is on."""
        for name in (ALL_PLUGINS, plugin):
            toggle = self._toggles.get(name)
            if toggle is not None and (hook is None and not toggle.hooks or hook and toggle.covers(hook)):
                return toggle.reason
        return ""

    # -- changes (each persisted, then logged in one line) ---------------------------------

    def disable(self, plugin: str, hooks: frozenset[str], reason: str, everything: bool = False) -> None:
        if not reason.strip():
            raise ToggleError("disable needs a --reason: it is logged and shown in status")
        name = ALL_PLUGINS if everything else plugin_file_name(plugin)
        previous = self._toggles.get(name)
        if hooks and previous is not None:
            hooks = frozenset() if not previous.hooks else previous.hooks | hooks
        toggle = Toggle(name, hooks, reason.strip(), time.time())
        self._change({**self._toggles, name: toggle})
        log.warning("disabled %s on this node: %s", toggle.describe(), toggle.reason,
                    extra={"plugin": name, "hook": ",".join(sorted(hooks))})

    def enable(self, plugin: str, hooks: frozenset[str], everything: bool = False) -> None:
        if everything:
            self._change({})
            log.warning("enabled every plugin and hook on this node (all toggles cleared)",
                        extra={"plugin": ALL_PLUGINS})
            return
        name = plugin_file_name(plugin)
        toggles = dict(self._toggles)
        previous = toggles.pop(name, None)
        if previous is not None and hooks:
            remaining = (previous.hooks or frozenset(HOOK_NAMES)) - hooks
            if remaining:
                toggles[name] = Toggle(name, remaining, previous.reason, previous.since_unix_seconds)
        self._change(toggles)
        what = f"{name} ({','.join(h for h in HOOK_NAMES if h in hooks)})" if hooks else f"{name} (all hooks)"
        log.warning("enabled %s on this node", what, extra={"plugin": name, "hook": ",".join(sorted(hooks))})

    def _change(self, toggles: dict[str, Toggle]) -> None:
        self._save(toggles)  # first: a change that cannot be persisted is not made
        self._install(toggles)

    def _install(self, toggles: dict[str, Toggle]) -> None:
        self._toggles = toggles
        self._whole_plugins_off = frozenset(name for name, t in toggles.items() if not t.hooks)
        self._off = frozenset((name, hook) for name, t in toggles.items() for hook in t.hooks)

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
        except (ValueError, TypeError, KeyError) as error:
            log.error("toggle state %s is unreadable (%s); starting with no toggles", self.state_path, error)
            return
        self._install(toggles)
        for toggle in toggles.values():
            log.warning("%s is disabled on this node (toggle from %s): %s", toggle.describe(),
                        self.state_path, toggle.reason, extra={"plugin": toggle.plugin})

    def _save(self, toggles: dict[str, Toggle]) -> None:
        if self.state_path is None:
            return
        write_atomically(self.state_path, _encode(toggles))


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



def _encode(toggles: dict[str, Toggle]) -> bytes:
    document = {
        "version": _STATE_VERSION,
        "toggles": [
            {"plugin": t.plugin, "hooks": sorted(t.hooks), "reason": t.reason, "since": t.since_unix_seconds}
            for t in (toggles[name] for name in sorted(toggles))
        ],
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _decode(data: bytes) -> dict[str, Toggle]:
    document = orjson.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("toggles"), list):
        raise ValueError("expected an object with a list of toggles")
    toggles: dict[str, Toggle] = {}
    for item in document["toggles"]:
        plugin = str(item["plugin"])
        if plugin != ALL_PLUGINS:
            plugin = plugin_file_name(plugin)
        toggles[plugin] = Toggle(plugin, hook_names(list(item.get("hooks", []))),
                                 str(item.get("reason", "")), float(item.get("since", 0)))
    return toggles
