"""Hook plugin registration: one `*.json` file per plugin in a watched config directory.

The directory is polled (no inotify dependency) so that adding, changing, renaming or
deleting a file takes effect within a poll interval. Scanning and reading run in a worker
thread, never on the event loop. Each entry is judged on its own: a broken, unreadable,
untrusted (see `trust`), oversized or non-regular entry costs one log line when its state
changes and nothing else. Such an entry never takes a plugin down: the last good version of
that file stays in force until it is fixed or deleted (a dangling link counts as deleted).
Channels to plugin endpoints are opened on demand (see PluginChannel).
"""

from __future__ import annotations

import asyncio
import difflib
import enum
import errno
import logging
import math
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import orjson

from runtimeproxy.endpoints import EndpointError, grpc_target, parse_unix_endpoint
from runtimeproxy.trust import TrustedOwners

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
# A registration is a few hundred bytes; anything bigger than this is not one.
MAX_CONFIG_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
# Calls still running on a channel dropped as unreachable may finish within this.
_DROP_GRACE_SECONDS = 30.0
# An unused plugin connection is released after this; the next call reconnects.
_IDLE_TIMEOUT_MS = 60_000
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
    # What the file says that was not used (unknown keys), one line each, for status.
    warnings: tuple[str, ...] = ()

    @property
    def ordered_hooks(self) -> tuple[str, ...]:
        return tuple(hook for hook in HOOK_NAMES if hook in self.hooks)

    def describe(self) -> str:
        return (
            f"endpoint {grpc_target(self.endpoint)}, policy {self.failure_policy.value}, "
            f"hooks {','.join(self.ordered_hooks)}, timeout {self.timeout_seconds:g}s"
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


class CallRefused(Exception):
    """A plugin call refused before it is made; it counts as a failed call with this code."""

    code = grpc.StatusCode.UNAVAILABLE


class SocketNotTrusted(CallRefused):
    """The plugin's socket, or a directory or link on its path, could be swapped by an untrusted user."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ChannelClosed(CallRefused):
    """The plugin was unregistered (its channel closed) after the call picked it."""


class PluginChannel:
    """The gRPC channel to one plugin endpoint, opened only when a call needs it.

    An idle registry costs nothing: a channel exists only once a call has used it, and a
    call that finds the plugin unreachable drops it, so a dead plugin is not reconnected in
    the background and a plugin that starts late is connected afresh by the next call.
    Must be used on the event loop thread (aio channels).
    """

    def __init__(self, endpoint: Path, max_message_bytes: int, owners: TrustedOwners) -> None:
        self.endpoint = endpoint
        self._max_message_bytes = max_message_bytes
        self._owners = owners
        self._channel: grpc.aio.Channel | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    @property
    def is_open(self) -> bool:
        """Whether a gRPC channel exists right now (for tests and debugging)."""
        return self._channel is not None

    def open(self) -> grpc.aio.Channel:
        """The channel for one call, once only trusted users can change its socket path; raises CallRefused."""
        if self.closed:
            raise ChannelClosed(f"the channel to {grpc_target(self.endpoint)} is closed: plugin unregistered")
        self._check_socket_path()
        if self._channel is None:
            log.debug("connecting to plugin endpoint %s", grpc_target(self.endpoint))
            self._channel = grpc.aio.insecure_channel(
                grpc_target(self.endpoint), options=plugin_channel_options(self._max_message_bytes)
            )
        return self._channel

    def drop(self, channel: grpc.aio.Channel) -> None:
        """Forget a channel whose plugin was unreachable; calls still on it get a grace period."""
        if channel is not self._channel:
            return  # already dropped by a concurrent call
        self._channel = None
        task = asyncio.get_running_loop().create_task(channel.close(_DROP_GRACE_SECONDS))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self.closed = True
        channel, self._channel = self._channel, None
        try:
            if channel is not None:
                await channel.close()
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
        except Exception:  # noqa: BLE001
            log.exception("closing the channel to plugin endpoint %s failed", grpc_target(self.endpoint))

    def _check_socket_path(self) -> None:
        """Refuse the call unless only trusted users can change what a connect() to the endpoint reaches.

        gRPC connects by path, on its own schedule (the first call, after an idle timeout, after
        the plugin restarted), so checking the socket found now says nothing about the one it will
        connect to. The path walk does (see `trust`): once every directory on the way is one that
        no untrusted user can write, nobody but a trusted user can swap the socket between this check
        and any connect that follows, or create it while it is missing. A channel whose path stops
        being trusted is dropped, so a connection made while it was not is never reused.
        """
        try:
            problem = self._owners.socket_path_problem(self.endpoint)
        except OSError as error:
            self._drop_current()
            raise CallRefused(f"socket {self.endpoint} cannot be reached: {error.strerror or error}") from None
        if problem is not None:
            self._drop_current()
            raise SocketNotTrusted(problem)

    def _drop_current(self) -> None:
        if self._channel is not None:
            self.drop(self._channel)


def plugin_channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # A connection nobody uses is released; the next call reconnects.
        ("grpc.client_idle_timeout_ms", _IDLE_TIMEOUT_MS),
        ("grpc.enable_retries", 0),
    ]


@dataclass(frozen=True)
class Plugin:
    """A registered plugin: its config and the channel to its endpoint (shared per endpoint)."""

    config: PluginConfig
    channel: PluginChannel

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


class _Unusable(Exception):
    """A directory entry that cannot be used as a config file (the entry, not its content)."""

    def __init__(self, problem: str, signature: _Signature = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.signature = signature


class _Gone(Exception):
    """The entry vanished since it was listed, or is a symbolic link whose target is gone."""

    def __init__(self, dangling: bool) -> None:
        super().__init__("dangling" if dangling else "deleted")
        self.dangling = dangling


class PluginRegistry:
    """The plugins configured in a directory, kept current by polling it.

    reload() scans and reads the directory in a worker thread, so file IO never stalls the
    event loop, then installs the result on the loop. refresh() does both in the calling
    thread (tests, tools); it must run on the event loop thread.
    """

    def __init__(
        self,
        config_dir: Path,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_message_bytes: int = DEFAULT_PLUGIN_MAX_MESSAGE_BYTES,
        trusted_uids: Iterable[int] = (),
    ) -> None:
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self.config_dir = config_dir
        self._dir_name = os.fspath(config_dir)
        self.poll_interval = poll_interval
        self.max_message_bytes = max_message_bytes
        self.owners = TrustedOwners.with_extra(trusted_uids)
        self._files: dict[str, _ConfigFile] = {}
        self._channels: dict[Path, PluginChannel] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._plugins: tuple[Plugin, ...] = ()
        self._by_hook: dict[str, tuple[Plugin, ...]] = {}
        self._dir_state: str | None = None
        self._dir_problem: str | None = None
        self._closed = False
        # Scans are numbered as they start; a scan that finishes after a newer one was installed is stale.
        self._scans_started = 0
        self._scan_installed = 0

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """All registered plugins, in file-name order."""
        return self._plugins

    def plugins_for(self, hook: str) -> tuple[Plugin, ...]:
        """The plugins registered for a hook, in the order to call them (precomputed)."""
        return self._by_hook.get(hook, ())

    def config_file_names(self) -> frozenset[str]:
        """Every config file of the last scan, registered or not (a toggle may name any of them)."""
        return frozenset(self._files)

    def config_problems(self) -> dict[str, str]:
        """Why a config file's current content is not in force, by file name (for status)."""
        return {name: state.problem for name, state in self._files.items() if state.problem}

    def directory_problem(self) -> str:
        """Why the directory itself keeps plugins from (re)loading, or "" (for status)."""
        if self._dir_state == "missing":
            return "does not exist; no plugins until it does"
        if self._dir_state not in (None, "present"):
            return f"is {self._dir_state}"
        return f"{self._dir_problem}; no file in it is used" if self._dir_problem else ""

    async def reload(self) -> bool:
        """Scan the directory once off the event loop; True if the plugins changed."""
        if self._closed:
            return False
        serial = self._next_scan()
        files = await asyncio.to_thread(self._scan)
        return self._install(files, serial)

    def refresh(self) -> bool:
        """reload() in the calling thread: blocks on file IO."""
        if self._closed:
            return False
        serial = self._next_scan()
        return self._install(self._scan(), serial)

    def _next_scan(self) -> int:
        self._scans_started += 1
        return self._scans_started

    async def run(self) -> None:
        """reload() every poll_interval until cancelled; no error ends the loop."""
        failure: str | None = None
        while True:
            try:
                await self.reload()
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

    def _scan(self) -> dict[str, _ConfigFile] | None:
        """Judge every entry on its own (blocking file IO); None if the directory is unreadable."""
        names = self._list_config_names()
        if names is None:
            return None
        dir_problem = self._directory_problem()
        # A change of the directory's trust re-judges every file, unchanged or not.
        trust_changed, self._dir_problem = dir_problem != self._dir_problem, dir_problem
        files: dict[str, _ConfigFile] = {}
        for name in names:
            previous = self._files.get(name)
            loaded = self._load(name, previous, dir_problem, trust_changed)
            if loaded is not None:
                files[name] = loaded
        for name in self._files.keys() - files.keys():
            if self._files[name].config is not None:
                log.info("plugin %s removed", name)
        return files

    def _install(self, files: dict[str, _ConfigFile] | None, serial: int) -> bool:
        # A scan that read the directory before the installed one did must not bring older contents back.
        if files is None or self._closed or serial < self._scan_installed:
            return False
        self._scan_installed = serial
        self._files = files
        configs = [state.config for state in files.values() if state.config is not None]
        # Compared with what is installed, so that a failed _apply is retried on the next poll.
        if configs == [plugin.config for plugin in self._plugins]:
            return False
        self._apply(configs)
        return True

    def _list_config_names(self) -> list[str] | None:
        """The config file names in file-name (bytewise) order; None if the directory is unreadable."""
        try:
            with os.scandir(self.config_dir) as entries:
                names = [entry.name for entry in entries if _is_config_name(entry.name)]
        except (FileNotFoundError, NotADirectoryError):
            self._set_dir_state("missing")
            return []
        except OSError as error:
            # Keep what is registered: an unreadable directory is not an empty one.
            reason = error.strerror or str(error)
            self._set_dir_state(f"unreadable ({reason}); keeping the registered plugins")
            return None
        self._set_dir_state("present")
        names.sort(key=os.fsencode)
        return names

    def _directory_problem(self) -> str | None:
        try:
            status = os.stat(self.config_dir)
        except OSError as error:
            return f"its directory cannot be checked: {error.strerror or error}"
        problem = self.owners.file_problem(f"directory {self.config_dir}", status)
        return None if problem is None else f"not trusted: {problem}"

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
        self, name: str, previous: _ConfigFile | None, dir_problem: str | None, trust_changed: bool
    ) -> _ConfigFile | None:
        """Read a new or changed entry; None if it is gone (deleted, or a dangling link)."""
        path = os.path.join(self._dir_name, name)  # str, not Path: this runs for every file every poll
        last_good = previous.config if previous is not None else None
        try:
            status = _stat_entry(path)
            signature = _signature(status)
            if (previous is not None and signature is not None and previous.signature == signature
                    and not trust_changed):
                return previous
            if not stat.S_ISREG(status.st_mode):  # before open(): a socket cannot even be opened
                raise _Unusable(_not_regular(status.st_mode), signature)
            signature, data = _read_trusted(path, self.owners, dir_problem)
        except _Gone as gone:
            return _gone(name, previous) if gone.dangling else None
        except _Unusable as unusable:
            # The entry is still there under its name: like a broken edit, the last good version
            # stays (only deleting the file unregisters it), and it is reported once per problem.
            problem = str(PluginConfigError(name, unusable.problem))
            if previous is None or previous.problem != problem:
                _warn_unusable(problem, last_good)
            return _ConfigFile(unusable.signature, None, last_good, problem)
        if previous is not None and previous.data == data:
            return replace(previous, signature=signature)  # touched, or racy: same content
        return _parse(name, signature, data, previous)

    def _apply(self, configs: list[PluginConfig]) -> None:
        """Install configs (in file-name order): share, keep or close endpoint channels, rebuild indexes."""
        wanted = {config.endpoint for config in configs}
        for endpoint in self._channels.keys() - wanted:
            self._schedule_close(self._channels.pop(endpoint))
        for endpoint in wanted - self._channels.keys():
            self._channels[endpoint] = PluginChannel(endpoint, self.max_message_bytes, self.owners)
        plugins = tuple(Plugin(config, self._channels[config.endpoint]) for config in configs)
        self._plugins = plugins
        self._by_hook = {hook: tuple(p for p in plugins if hook in p.config.hooks) for hook in HOOK_NAMES}

    def _schedule_close(self, channel: PluginChannel) -> None:
        # Not awaited here: refresh() stays synchronous; close() awaits what is left.
        log.debug("closing the channel to plugin endpoint %s: no longer used", grpc_target(channel.endpoint))
        task = asyncio.get_running_loop().create_task(channel.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def _parse(name: str, signature: _Signature, data: bytes, previous: _ConfigFile | None) -> _ConfigFile:
    last_good = previous.config if previous is not None else None
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


def _gone(name: str, previous: _ConfigFile | None) -> _ConfigFile:
    """A dangling symbolic link: its file was deleted, and a deleted file unregisters."""
    problem = str(PluginConfigError(name, "a dangling symbolic link (its target does not exist)"))
    if previous is None or previous.problem != problem:
        if previous is not None and previous.config is not None:
            log.warning("plugin %s removed: %s", name, problem)
        else:
            _warn_unusable(problem, None)
    return _ConfigFile(None, None, None, problem)


def _warn_unusable(problem: str, last_good: PluginConfig | None) -> None:
    consequence = "its last good version stays in force" if last_good is not None else "not registered"
    log.warning("invalid plugin config %s; %s", problem, consequence)


def _is_config_name(name: str) -> bool:
    return name.endswith(CONFIG_SUFFIX) and not name.startswith(".")


def _signature(status: os.stat_result) -> _Signature:
    if abs(time.time_ns() - status.st_mtime_ns) < _RACY_WINDOW_NS:
        return None
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _stat_entry(path: str) -> os.stat_result:
    """stat() following links, with every failure turned into _Gone or _Unusable."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise _Gone(dangling=os.path.islink(path)) from None
    except OSError as error:
        raise _Unusable(_os_problem(error)) from None


def _read_trusted(path: str, owners: TrustedOwners, dir_problem: str | None) -> tuple[_Signature, bytes]:
    """The file's bytes, if it is a trusted regular file of at most MAX_CONFIG_BYTES."""
    try:
        # O_NONBLOCK: a FIFO put here (or swapped in since the stat) must never block the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _Gone(dangling=os.path.islink(path)) from None
    except OSError as error:
        raise _Unusable(_os_problem(error)) from None
    try:
        # The signature comes from the opened file, taken before reading: a write racing the
        # read then shows up as a changed signature on the next poll, never as a missed change.
        status = os.fstat(fd)
        signature = _signature(status)
        problem = _entry_problem(status, owners, dir_problem)
        if problem is not None:
            raise _Unusable(problem, signature)
        data = _read_at_most(fd, MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise _Unusable(_os_problem(error)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise _Unusable(_too_large(None), signature)
    return signature, data


def _entry_problem(status: os.stat_result, owners: TrustedOwners, dir_problem: str | None) -> str | None:
    if not stat.S_ISREG(status.st_mode):
        return _not_regular(status.st_mode)
    if dir_problem is not None:
        return dir_problem
    problem = owners.file_problem("the file", status)
    if problem is not None:
        return f"not trusted: {problem}"
    if status.st_size > MAX_CONFIG_BYTES:
        return _too_large(status.st_size)
    return None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _too_large(size: int | None) -> str:
    """size None: known only to exceed the limit (it grew, or stat() did not tell)."""
    shown = f"more than {MAX_CONFIG_BYTES}" if size is None else str(size)
    return f"too large: {shown} bytes (a config file may have at most {MAX_CONFIG_BYTES})"


def _not_regular(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    kind = next((kind for test, kind in kinds.items() if test(mode)), f"file type {stat.S_IFMT(mode):o}")
    return f"not a regular file ({kind})"


def _os_problem(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "cannot read the file: a symbolic link loop"
    return f"cannot read the file: {error.strerror or error}"
