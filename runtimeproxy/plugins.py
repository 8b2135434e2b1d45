"""Hook plugin registration: one `*.json` file per plugin in a watched config directory.

The directory is polled (no inotify dependency) so that adding, changing, renaming or
deleting a file takes effect within a poll interval. A broken file never takes a plugin
down: the last good version of that file stays in force until it is fixed or deleted.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import orjson

from runtimeproxy.backend import channel_options
from runtimeproxy.endpoints import EndpointError, grpc_target, parse_unix_endpoint

log = logging.getLogger(__name__)

# koordinator's runtime hook points, in the order a pod's lifecycle reaches them.
HOOK_NAMES: tuple[str, ...] = (
    "PreRunPodSandbox",
    "PreCreateContainer",
    "PreStartContainer",
    "PostStartContainer",
    "PreUpdateContainerResources",
    "PostStopContainer",
    "PostStopPodSandbox",
)
_HOOKS_BY_FOLDED_NAME = {hook.casefold(): hook for hook in HOOK_NAMES}

DEFAULT_TIMEOUT_SECONDS = 5.0
DEFAULT_POLL_INTERVAL = 0.5
# Hook requests carry one pod or container: far below this, but never worth failing on.
DEFAULT_PLUGIN_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

CONFIG_SUFFIX = ".json"
_ENDPOINT_KEY = "remote-endpoint"
_POLICY_KEY = "failure-policy"
_HOOKS_KEY = "runtime-hooks"
_TIMEOUT_KEY = "timeout-seconds"
_KNOWN_KEYS = frozenset({_ENDPOINT_KEY, _POLICY_KEY, _HOOKS_KEY, _TIMEOUT_KEY})
_UTF8_BOM = b"\xef\xbb\xbf"
# A file modified this recently may be rewritten within the same timestamp tick without
# its (inode, size, mtime) changing, so it is re-read on the next poll until it settles.
_RACY_WINDOW_NS = 2_000_000_000


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

    @property
    def ordered_hooks(self) -> tuple[str, ...]:
        return tuple(hook for hook in HOOK_NAMES if hook in self.hooks)

    def describe(self) -> str:
        return (
            f"endpoint {grpc_target(self.endpoint)}, policy {self.failure_policy.value}, "
            f"hooks {','.join(self.ordered_hooks)}, timeout {self.timeout_seconds:g}s"
        )


def parse_plugin_config(name: str, data: bytes) -> PluginConfig:
    """Parse one config file's bytes; warns (one line) about keys it does not know."""
    document = _load_object(name, data)
    config = PluginConfig(
        name=name,
        endpoint=_parse_endpoint(name, document),
        failure_policy=_parse_policy(name, document),
        hooks=_parse_hooks(name, document),
        timeout_seconds=_parse_timeout(name, document),
    )
    # Only once the file is usable, so that a broken file still costs one log line.
    unknown = sorted(document.keys() - _KNOWN_KEYS)
    if unknown:
        log.warning("plugin config %s: ignoring unknown keys: %s", name, ", ".join(unknown))
    return config


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
        hook = _HOOKS_BY_FOLDED_NAME.get(item.casefold())
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


@dataclass(frozen=True)
class Plugin:
    """A registered plugin: its config and the channel to its endpoint (shared per endpoint)."""

    config: PluginConfig
    channel: grpc.aio.Channel

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def endpoint(self) -> Path:
        return self.config.endpoint

    @property
    def failure_policy(self) -> FailurePolicy:
        return self.config.failure_policy

    @property
    def timeout_seconds(self) -> float:
        return self.config.timeout_seconds


# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns); None: re-read on the next poll.
_Signature = tuple[int, int, int, int, int] | None


@dataclass(frozen=True)
class _ConfigFile:
    signature: _Signature
    data: bytes | None  # the content last read; None if it could not be read
    config: PluginConfig | None  # the last good version, in force
    problem: str | None  # why the content last read is not in force


class PluginRegistry:
    """The plugins configured in a directory, kept current by polling it.

    refresh() creates and closes aio channels, so it must run on the event loop thread.
    """

    def __init__(
        self,
        config_dir: Path,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_message_bytes: int = DEFAULT_PLUGIN_MAX_MESSAGE_BYTES,
    ) -> None:
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self.config_dir = config_dir
        self.poll_interval = poll_interval
        self.max_message_bytes = max_message_bytes
        self._files: dict[str, _ConfigFile] = {}
        self._channels: dict[Path, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._plugins: tuple[Plugin, ...] = ()
        self._by_hook: dict[str, tuple[Plugin, ...]] = {}
        self._dir_state: str | None = None
        self._closed = False

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """All registered plugins, in file-name order."""
        return self._plugins

    def plugins_for(self, hook: str) -> tuple[Plugin, ...]:
        """The plugins registered for a hook, in the order to call them (precomputed)."""
        return self._by_hook.get(hook, ())

    def config_problems(self) -> dict[str, str]:
        """Why a config file's current content is not in force, by file name (for status)."""
        return {name: state.problem for name, state in self._files.items() if state.problem}

    def refresh(self) -> bool:
        """Scan the directory once, re-reading changed files; True if the plugins changed."""
        if self._closed:
            return False
        entries = self._list_config_files()
        if entries is None:
            return False
        files: dict[str, _ConfigFile] = {}
        for name, path, signature in entries:
            previous = self._files.get(name)
            if previous is not None and signature is not None and previous.signature == signature:
                files[name] = previous
                continue
            loaded = self._load(name, path, signature, previous)
            if loaded is not None:
                files[name] = loaded
        for name in self._files.keys() - files.keys():
            if self._files[name].config is not None:
                log.info("plugin %s removed", name)
        self._files = files
        configs = [state.config for state in files.values() if state.config is not None]
        # Compared with what is installed, so that a failed _apply is retried on the next poll.
        if configs == [plugin.config for plugin in self._plugins]:
            return False
        self._apply(configs)
        return True

    async def run(self) -> None:
        """refresh() every poll_interval until cancelled; no error ends the loop."""
        failure: str | None = None
        while True:
            try:
                self.refresh()
                failure = None
            except Exception as error:  # noqa: BLE001 - config must never crash the proxy
                # One line per distinct failure, not one per poll.
                if repr(error) != failure:
                    failure = repr(error)
                    log.exception("scanning plugin configs in %s failed; will retry", self.config_dir)
            await asyncio.sleep(self.poll_interval)

    async def close(self) -> None:
        """Unregister everything and close all channels."""
        self._closed = True
        self._files = {}
        self._apply([])
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _list_config_files(self) -> list[tuple[str, Path, _Signature]] | None:
        """The config files in file-name (bytewise) order; None if the directory is unreadable."""
        found: list[tuple[str, Path, _Signature]] = []
        try:
            with os.scandir(self.config_dir) as entries:
                for entry in entries:
                    if not _is_config_name(entry.name) or not entry.is_file():
                        continue
                    try:
                        signature = _signature(entry.stat())
                    except FileNotFoundError:
                        continue  # deleted since listed
                    found.append((entry.name, Path(entry.path), signature))
        except (FileNotFoundError, NotADirectoryError):
            self._set_dir_state("missing")
            return []
        except OSError as error:
            # Keep what is registered: an unreadable directory is not an empty one.
            reason = error.strerror or str(error)
            self._set_dir_state(f"unreadable ({reason}); keeping the registered plugins")
            return None
        self._set_dir_state("present")
        found.sort(key=lambda item: os.fsencode(item[0]))
        return found

    def _set_dir_state(self, state: str) -> None:
        previous, self._dir_state = self._dir_state, state
        if state == previous:
            return
        if state == "missing":
            log.warning(
                "plugin config directory %s does not exist; no plugins until it does", self.config_dir
            )
        elif state != "present":
            log.warning("plugin config directory %s is %s", self.config_dir, state)
        elif previous == "missing":
            log.info("plugin config directory %s exists now", self.config_dir)
        elif previous is not None:
            log.info("plugin config directory %s is readable again", self.config_dir)

    def _load(
        self, name: str, path: Path, signature: _Signature, previous: _ConfigFile | None
    ) -> _ConfigFile | None:
        """Read a new or changed file; None if it vanished meanwhile."""
        last_good = previous.config if previous is not None else None
        try:
            signature, data = _read(path)
        except FileNotFoundError:
            return None
        except OSError as error:
            problem = str(PluginConfigError(name, f"cannot read the file: {error.strerror or error}"))
            if previous is None or previous.problem != problem:
                _warn_unusable(problem, last_good)
            return _ConfigFile(signature, None, last_good, problem)
        if previous is not None and previous.data == data:
            return replace(previous, signature=signature)  # touched, or racy: same content
        try:
            config = parse_plugin_config(name, data)
        except PluginConfigError as error:
            _warn_unusable(str(error), last_good)
            return _ConfigFile(signature, data, last_good, str(error))
        except Exception as error:  # noqa: BLE001 - a parser bug must not stop the other files
            problem = str(PluginConfigError(name, f"unexpected error: {error!r}"))
            log.exception("invalid plugin config %s", problem)
            return _ConfigFile(signature, data, last_good, problem)
        if last_good is None:
            log.info("plugin %s registered: %s", name, config.describe())
        elif config != last_good:
            log.info("plugin %s changed: %s", name, config.describe())
        elif previous is not None and previous.problem is not None:
            log.info("plugin %s is valid again (unchanged): %s", name, config.describe())
        return _ConfigFile(signature, data, config, None)

    def _apply(self, configs: list[PluginConfig]) -> None:
        """Install configs (in file-name order): open, reuse or close channels, rebuild indexes."""
        wanted = {config.endpoint for config in configs}
        for endpoint in self._channels.keys() - wanted:
            self._schedule_close(endpoint, self._channels.pop(endpoint))
        for endpoint in wanted - self._channels.keys():
            log.debug("opening a channel to plugin endpoint %s", grpc_target(endpoint))
            self._channels[endpoint] = grpc.aio.insecure_channel(
                grpc_target(endpoint), options=channel_options(self.max_message_bytes)
            )
        plugins = tuple(Plugin(config, self._channels[config.endpoint]) for config in configs)
        self._plugins = plugins
        self._by_hook = {hook: tuple(p for p in plugins if hook in p.config.hooks) for hook in HOOK_NAMES}

    def _schedule_close(self, endpoint: Path, channel: grpc.aio.Channel) -> None:
        # Not awaited here: refresh() stays synchronous; close() awaits what is left.
        task = asyncio.get_running_loop().create_task(_close_channel(endpoint, channel))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


async def _close_channel(endpoint: Path, channel: grpc.aio.Channel) -> None:
    log.debug("closing the channel to plugin endpoint %s: no longer used", grpc_target(endpoint))
    try:
        await channel.close()
    except Exception:  # noqa: BLE001
        log.exception("closing the channel to plugin endpoint %s failed", grpc_target(endpoint))


def _warn_unusable(problem: str, last_good: PluginConfig | None) -> None:
    consequence = "its last good version stays in force" if last_good is not None else "not registered"
    log.warning("invalid plugin config %s; %s", problem, consequence)


def _is_config_name(name: str) -> bool:
    return name.endswith(CONFIG_SUFFIX) and not name.startswith(".")


def _signature(stat: os.stat_result) -> _Signature:
    if abs(time.time_ns() - stat.st_mtime_ns) < _RACY_WINDOW_NS:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _read(path: Path) -> tuple[_Signature, bytes]:
    # The signature comes from the opened file, taken before reading: a write racing the
    # read then shows up as a changed signature on the next poll, never as a missed change.
    with open(path, "rb") as file:
        signature = _signature(os.fstat(file.fileno()))
        return signature, file.read()
