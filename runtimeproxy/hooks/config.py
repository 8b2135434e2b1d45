"""A plugin's registration file: its JSON (endpoint, failure policy, hooks, timeout), parsed and judged.

Only the bytes: where they come from and whether their owner is trusted is `trusted_files`' and `registry`'s.
Unknown keys are warnings with a did-you-mean, never errors (koordinator's Go config ignores them too).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from runtimeproxy.endpoints import EndpointError, grpc_target, parse_unix_endpoint
from runtimeproxy.hooks.names import HOOK_NAMES, hook_named

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0
CONFIG_SUFFIX = ".json"
_ENDPOINT_KEY = "remote-endpoint"
_POLICY_KEY = "failure-policy"
_HOOKS_KEY = "runtime-hooks"
_TIMEOUT_KEY = "timeout-seconds"
# This project's own key (koordinator's Go config has none): the plugin is on trial, called but never applied.
SHADOW_KEY = "shadow"
_KNOWN_KEYS = frozenset({_ENDPOINT_KEY, _POLICY_KEY, _HOOKS_KEY, _TIMEOUT_KEY, SHADOW_KEY})
_UTF8_BOM = b"\xef\xbb\xbf"


class FailurePolicy(enum.Enum):
    """What a failed plugin call does to the CRI call: fail it, or carry on without the hook."""

    FAIL = "Fail"
    IGNORE = "Ignore"


_POLICIES_BY_FOLDED_NAME = {policy.value.casefold(): policy for policy in FailurePolicy}


class PluginConfigError(ValueError):
    """A plugin config file that cannot be used; the message names the file and the problem."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


@dataclass(frozen=True)
class PluginConfig:
    name: str  # the config file's name, e.g. koordlet.json
    endpoint: Path
    failure_policy: FailurePolicy
    hooks: frozenset[str]
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    # In shadow (hooks.dispatcher): called on its hooks, its answer validated and traced, never applied.
    shadow: bool = False
    # What the file says that was not used (unknown keys), one line each, for status.
    warnings: tuple[str, ...] = ()

    @property
    def ordered_hooks(self) -> tuple[str, ...]:
        return tuple(hook for hook in HOOK_NAMES if hook in self.hooks)

    def describe(self) -> str:
        return (
            f"endpoint {grpc_target(self.endpoint)}, policy {self.failure_policy.value}, "
            f"hooks {','.join(self.ordered_hooks)}, timeout {self.timeout_seconds:g}s"
            + (", shadow in its file" if self.shadow else "")  # runtimeproxyctl unshadow may override it
        )


def parse_plugin_config(name: str, data: bytes) -> PluginConfig:
    """Parse one config file's bytes; unknown keys are ignored, logged and kept as warnings."""
    document = _load_object(name, data)
    config = PluginConfig(
        name=name,
        endpoint=_parse_endpoint(name, document),
        failure_policy=_parse_policy(name, document),
        hooks=_parse_hooks(name, document),
        timeout_seconds=_parse_timeout(name, document),
        shadow=_parse_shadow(name, document),
        warnings=unknown_key_warnings(document.keys()),
    )
    # Only once the file is usable, so that a broken file still costs one log line.
    if config.warnings:
        log.warning("plugin config %s: %s", name, "; ".join(config.warnings))
    return config


def unknown_key_warnings(keys: Iterable[str]) -> tuple[str, ...]:
    """`unknown key "failurePolicy" (did you mean "failure-policy"?); ignored`, one per unknown key.

    A misspelt key silently leaves its default in force (a `failurePolicy: Fail` plugin runs
    under Ignore), so the nearest known key is named: compared without case and separators,
    so camelCase and snake_case spellings are caught.
    """
    by_folded = {_fold_key(key): key for key in sorted(_KNOWN_KEYS)}
    warnings = []
    for key in sorted(set(keys) - _KNOWN_KEYS):
        import difflib  # only for a typo's suggestion: kept off the start path
        close = difflib.get_close_matches(_fold_key(key), by_folded, n=1, cutoff=0.6)
        hint = f" (did you mean {_quote(by_folded[close[0]])}?)" if close else ""
        warnings.append(f"unknown key {_quote(key)}{hint}; ignored")
    return tuple(warnings)


def _fold_key(key: str) -> str:
    return key.casefold().replace("-", "").replace("_", "")


def _load_object(name: str, data: bytes) -> dict[str, Any]:
    # Some editors write a BOM; it carries no meaning, so it is not worth an outage.
    data = data.removeprefix(_UTF8_BOM)
    if not data.strip():
        raise PluginConfigError(name, "empty file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PluginConfigError(name, f"not valid UTF-8 (byte {error.start})") from None
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        hint = " (truncated?)" if error.pos >= len(text.rstrip()) else ""
        raise PluginConfigError(
            name, f"invalid JSON: {error.msg} at line {error.lineno} column {error.colno}{hint}"
        ) from None
    if not isinstance(document, dict):
        raise PluginConfigError(name, f"expected a JSON object, got {_json_type(document)}")
    return document


def _parse_endpoint(name: str, document: dict[str, Any]) -> Path:
    value = document.get(_ENDPOINT_KEY)
    if _ENDPOINT_KEY not in document:
        raise PluginConfigError(name, f"{_ENDPOINT_KEY}: missing (the plugin's unix socket)")
    if not isinstance(value, str):
        raise PluginConfigError(
            name, f"{_ENDPOINT_KEY}: expected a string, got {_json_type(value)}"
        )
    try:
        return parse_unix_endpoint(value)
    except EndpointError as error:
        raise PluginConfigError(name, f"{_ENDPOINT_KEY}: {error}") from None


def _parse_policy(name: str, document: dict[str, Any]) -> FailurePolicy:
    value = document.get(_POLICY_KEY)
    # null and "" mean unset, as they do for koordinator's Go config.
    if value is None or value == "":
        return FailurePolicy.IGNORE
    if not isinstance(value, str):
        raise PluginConfigError(name, f"{_POLICY_KEY}: expected a string, got {_json_type(value)}")
    policy = _POLICIES_BY_FOLDED_NAME.get(value.casefold())
    if policy is None:
        known = " or ".join(policy.value for policy in FailurePolicy)
        raise PluginConfigError(name, f"{_POLICY_KEY}: unknown policy {_quote(value)} (known: {known})")
    return policy


def _parse_hooks(name: str, document: dict[str, Any]) -> frozenset[str]:
    known = ", ".join(HOOK_NAMES)
    if _HOOKS_KEY not in document:
        raise PluginConfigError(name, f"{_HOOKS_KEY}: missing (a list of: {known})")
    value = document[_HOOKS_KEY]
    if not isinstance(value, list):
        raise PluginConfigError(
            name, f"{_HOOKS_KEY}: expected a list of hook names, got {_json_type(value)}"
        )
    if not value:
        raise PluginConfigError(name, f"{_HOOKS_KEY}: empty list; name at least one of: {known}")
    hooks: set[str] = set()
    for item in value:
        if not isinstance(item, str):
            raise PluginConfigError(name, f"{_HOOKS_KEY}: expected hook names, got {_json_type(item)}")
        hook = hook_named(item)
        if hook is None:
            raise PluginConfigError(name, f"{_HOOKS_KEY}: unknown hook {_quote(item)} (known: {known})")
        hooks.add(hook)
    return frozenset(hooks)


def _parse_timeout(name: str, document: dict[str, Any]) -> float:
    value = document.get(_TIMEOUT_KEY)
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    # bool is an int in Python, but `true` is not a number of seconds.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PluginConfigError(name, f"{_TIMEOUT_KEY}: expected a number, got {_json_type(value)}")
    if not (value > 0 and math.isfinite(value)):
        raise PluginConfigError(
            name, f"{_TIMEOUT_KEY}: must be a positive number of seconds, got {value}"
        )
    return float(value)



def _parse_shadow(name: str, document: dict[str, Any]) -> bool:
    value = document.get(SHADOW_KEY)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PluginConfigError(name, f"{SHADOW_KEY}: expected true or false, got {_json_type(value)}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _quote(text: str) -> str:
    return orjson.dumps(text).decode()


def is_config_name(name: str) -> bool:
    return name.endswith(CONFIG_SUFFIX) and not name.startswith(".")
