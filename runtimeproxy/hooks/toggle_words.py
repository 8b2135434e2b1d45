"""The toggles' words: how a person names a plugin and its scopes, and what the toggles tell a person.

A plugin is named by its config file (`koordlet` and `koordlet.json` alike) or, for a plugin of another kind, by
its kind's prefix and id (`nri:10-name`: hooks.kinds); its scopes are its kind's (a hook plugin's hooks, an NRI
plugin's events), spelled without case. A name of neither kind, or of the other kind, is refused in one line
naming the valid ones, with a did-you-mean; so is a name no plugin has (`unknown_plugin`). What a client says of
its author is made safe for a log line. The decisions themselves are hooks.toggle_state's; the toggles in force,
hooks.toggles'.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Collection

from runtimeproxy.hooks.config import CONFIG_SUFFIX
from runtimeproxy.hooks.kinds import KINDS, NRI, PluginKind, kind_of

ALL_PLUGINS = "*"
NRI_PREFIX = NRI.prefix  # toggles of NRI plugins (hooks.nri_plugins): "nri:10-resource-policy"
WHOLE_PLUGIN = ""  # the scope of a toggle that covers every hook (NRI: every event) of its plugin
_NRI_ID = re.compile(r"^\d{2}-.")  # NRI's plugin ids: a two-digit index, a dash, the name
_MAX_NAMES_SHOWN = 10
_MAX_AUTHOR_CHARS = 64


class ToggleError(ValueError):
    """A toggle request that cannot be applied; the message says why, in one line."""


class UnknownPlugin(ToggleError):
    """A toggle naming no config file the proxy knows (a typo, or a file not there yet)."""


def plugin_file_name(name: str) -> str:
    """`koordlet` and `koordlet.json` name the same plugin; anything path-like is refused. An NRI
    plugin's toggle name (`nri:10-name`) is kept as it is."""
    name = name.strip()
    if not name or "/" in name or name.startswith(".") or name == NRI_PREFIX:
        raise ToggleError(f"{name!r} is not a plugin config file name (e.g. koordlet.json)")
    if name.startswith(NRI_PREFIX):
        return name
    return name if name.endswith(CONFIG_SUFFIX) else name + CONFIG_SUFFIX


def nri_toggle_name(plugin_id: str) -> str:
    """The toggle name of an NRI plugin (hooks.nri_plugins): "10-name" -> "nri:10-name"."""
    return NRI.toggle_name(plugin_id)


def _scope_of_another_kind(kind: PluginKind, name: str) -> tuple[PluginKind | None, str]:
    """The other kind whose scope a person's name spells, and the scope; (None, "") for none."""
    for other in KINDS:
        scope = other.scope_named(name) if other is not kind else None
        if scope is not None:
            return other, scope
    return None, ""


def scope_names(plugin: str) -> tuple[str, ...]:
    """What the toggles of a plugin name, in lifecycle order: its kind's scopes (hooks.kinds), an NRI plugin's
    events, any other plugin's hooks."""
    return kind_of(plugin).scope_names


def hook_names(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Hook names as a person spelled them, for a hook plugin (or `--all`)."""
    return scopes_named(WHOLE_PLUGIN, names)


def scopes_named(plugin: str, names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The hooks (of a hook plugin) or NRI events (of an NRI plugin, `nri:10-name`) a person named, without case;
    a name of neither, or of the other kind, is refused in one line naming the valid ones."""
    named = kind_of(plugin).scope_named
    scopes: set[str] = set()
    for name in names:
        scope = named(name.strip())
        if scope is None:
            raise ToggleError(not_a_scope(plugin, name.strip()))
        scopes.add(scope)
    return frozenset(scopes)


def not_a_scope(plugin: str, name: str) -> str:
    kind = kind_of(plugin)
    valid = kind.scope_names
    other, scope = _scope_of_another_kind(kind, name)
    if other is None:
        message = f"unknown {kind.scope_noun} {name!r} (known: {', '.join(valid)})"
    else:
        who = f"{kind.name} plugin {plugin} is" if plugin else f"{kind.name} plugins are"
        message = (f"{scope} is {other.scope_article} {other.scope_noun} of {other.name} plugins; {who} toggled by "
                   f"{kind.scope_noun}: {', '.join(valid)}")
        stem = plugin.removesuffix(CONFIG_SUFFIX)
        if other.prefix and _NRI_ID.match(stem):
            message += f" (an {other.name} plugin that is not attached is named {other.toggle_name(stem)})"
    folded = {scope.casefold(): scope for scope in valid}
    import difflib  # only for a typo's suggestion: kept off the start path
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1, cutoff=0.6)
    return message + (f"; did you mean {folded[close[0]]}?" if close else "")


def check_scopes(plugin: str, hooks: frozenset[str]) -> None:
    """What the admin service parsed for this plugin (scopes_named); a wrong kind here is a caller's slip."""
    wrong = sorted(hooks - frozenset(scope_names(plugin)))
    if wrong:
        raise ToggleError(not_a_scope(plugin, wrong[0]))


def scope_word(plugin: str) -> str:
    return kind_of(plugin).scope_word


def in_order(plugin: str, scopes: Collection[str]) -> list[str]:
    return [scope for scope in scope_names(plugin) if scope in scopes]


def toggle_scopes(plugin: str, hooks: frozenset[str]) -> list[str]:
    return in_order(plugin, hooks) or [WHOLE_PLUGIN]


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
    import difflib  # only for a typo's suggestion: kept off the start path
    close = difflib.get_close_matches(plugin_file_name(typed).removesuffix(CONFIG_SUFFIX), stems, n=1, cutoff=0.6)
    if close:
        suggestion = close[0] + CONFIG_SUFFIX if typed.endswith(CONFIG_SUFFIX) else close[0]
        message += f"; did you mean {suggestion}?"
    return UnknownPlugin(message)


def clean_author(author: str) -> str:
    """What a client says about who it is, made safe for one log line and a table cell."""
    printable = "".join(c if c.isprintable() else "?" for c in author.strip())
    return printable[:_MAX_AUTHOR_CHARS]


def timestamp(unix_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
