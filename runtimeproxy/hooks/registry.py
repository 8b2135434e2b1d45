"""Hook plugin registration (the registry): one `*.json` file per plugin in a watched config directory.

The directory is watched with inotify (`dirwatch`: the directory, and the targets of links in it), so
that adding, changing, renaming or deleting a file takes effect as soon as the event loop reads the
event, and an idle proxy does no work for it. Where there can be no watch (no inotify, the watch limit
reached: said in one log line) the directory is polled every poll interval instead; while it is missing
or after it was moved away, it is polled until it can be watched again. Scanning and reading run in a
worker thread, never on the event loop. Each entry is judged on its own: a broken, unreadable,
untrusted (see `trust`), oversized or non-regular entry costs one log line when its state
changes and nothing else; a file that is empty while it is still being written (`cat > x.json` creates it,
then writes) is judged again after a poll interval until it settles, and reported only if it stays empty. Such
an entry never takes a plugin down: the last good version of that file stays in force until it is fixed or
deleted (a dangling link counts as deleted).
Channels to plugin endpoints are opened on demand (see PluginChannel).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from runtimeproxy.endpoints import grpc_target
from runtimeproxy.hooks.dirwatch import DirectoryWatch, WatchUnavailable
from runtimeproxy.hooks.config import PluginConfig, PluginConfigError, is_config_name, parse_plugin_config
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.hooks.plugin import Plugin, PluginChannel, endpoint_problem
from runtimeproxy.hooks.trusted_files import Gone, Signature, Unusable, not_regular, read_trusted, file_signature, stat_entry
from runtimeproxy.trust import TrustedOwners

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 0.5
# Hook requests carry one pod or container: far below this, but never worth failing on.
DEFAULT_PLUGIN_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class _ConfigFile:
    signature: Signature
    data: bytes | None  # the content last read; None if it could not be read
    config: PluginConfig | None  # the last good version, in force
    problem: str | None  # why the content last read is not in force
    # Empty and just modified: being written (`cat > x.json` creates it, then writes). Not reported, and
    # re-read until it settles (signature None): then an empty file is reported like any broken one.
    settling: bool = False
    # Why calls to a new or changed config's endpoint would fail now (read with the file, said once it is in force).
    endpoint_warning: str | None = None



class PluginRegistry:
    """The plugins configured in a directory, kept current by watching it (or polling it).

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
        self._dir_fix = ""  # what makes the directory trusted again, when _dir_problem says it is not
        self._dir_trust_logged = False
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

    def has_settling_files(self) -> bool:
        """Whether a file looked empty while being written: it is scanned again after a poll interval."""
        return any(state.settling for state in self._files.values())

    def config_problems(self) -> dict[str, str]:
        """Why a config file's current content is not in force, by file name (for status)."""
        return {name: state.problem for name, state in self._files.items() if state.problem}

    def directory_problem(self) -> str:
        """Why the directory itself keeps plugins from (re)loading, or "" (for status)."""
        if self._dir_state == "missing":
            return "does not exist; no plugins until it does"
        if self._dir_state not in (None, "present"):
            return f"is {self._dir_state}"
        if not self._dir_problem:
            return ""
        return f"{self._dir_problem}; no file in it is used" + (f" until: {self._dir_fix}" if self._dir_fix else "")

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
        """reload() on every change (inotify), or every poll_interval where there is no watch, until
        cancelled; no error ends the loop."""
        failure: str | None = None
        changes = _Changes(self)
        try:
            while True:
                try:
                    await self.reload()
                    failure = None
                except Exception as error:  # noqa: BLE001 - config must never crash the proxy
                    # One line per distinct failure, not one per poll.
                    if repr(error) != failure:
                        failure = repr(error)
                        log.exception("scanning plugin configs in %s failed; will retry", self.config_dir)
                await changes.next(retry=failure is not None)
        finally:
            changes.close()

    def linked_config_paths(self) -> list[str]:
        """The config entries that are symbolic links (their targets are watched too)."""
        paths = (os.path.join(self._dir_name, name) for name in self._files)
        return [path for path in paths if os.path.islink(path)]

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
        dir_problem, self._dir_fix = self._directory_problem()
        # A change of the directory's trust re-judges every file, unchanged or not.
        trust_changed, self._dir_problem = dir_problem != self._dir_problem, dir_problem
        if trust_changed:
            self._log_directory_trust(dir_problem)
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
        installed = {plugin.config.name: plugin.config for plugin in self._plugins}
        if configs == list(installed.values()):
            return False
        self._apply(configs)
        # Said once in force, not when read: whoever waits for the line may rely on the next call using it. An
        # endpoint nothing serves is registered all the same (a plugin may start after its file is written), but
        # said at once: else the first sign is a pod failing under Fail.
        for config in configs:
            if installed.get(config.name) != config:
                log.info("plugin %s %s: %s", config.name, "changed" if config.name in installed else "registered",
                         config.describe())
                warning = files[config.name].endpoint_warning
                if warning:
                    log.warning("%s", warning)
        return True

    def _list_config_names(self) -> list[str] | None:
        """The config file names in file-name (bytewise) order; None if the directory is unreadable."""
        try:
            with os.scandir(self.config_dir) as entries:
                names = [entry.name for entry in entries if is_config_name(entry.name)]
        except FileNotFoundError:
            self._set_dir_state("missing")
            return []
        except NotADirectoryError:  # the path, or a directory on it, is a file
            self._set_dir_state("not a directory; no plugins until it is one (give --runtime-hook-config-dir a "
                                "directory)")
            return []
        except OSError as error:
            # Keep what is registered: an unreadable directory is not an empty one.
            reason = error.strerror or str(error)
            self._set_dir_state(f"unreadable ({reason}); keeping the registered plugins")
            return None
        self._set_dir_state("present")
        names.sort(key=os.fsencode)
        return names

    def _directory_problem(self) -> tuple[str | None, str]:
        """Why no file of the directory is trusted, or None; and the fix, if one command is it."""
        try:
            status = os.stat(self.config_dir)
        except OSError as error:
            return f"its directory cannot be checked: {error.strerror or error}", ""
        problem = self.owners.file_problem(f"directory {self.config_dir}", status)
        if problem is None:
            return None, ""
        if status.st_uid in self.owners.uids:
            return f"not trusted: {problem}", f"chmod go-w {self.config_dir}"
        return f"not trusted: {problem}", (f"chown root {self.config_dir}, or add uid {status.st_uid} to "
                                           "--runtime-hook-config-trusted-uids")

    def _log_directory_trust(self, problem: str | None) -> None:
        """Once per change, also for an empty directory (its files' own lines say the rest)."""
        if problem is not None and self._dir_state == "present":
            log.warning("plugin configs %s", self.directory_problem())
        elif problem is None and self._dir_state == "present" and self._dir_trust_logged:
            log.info("plugin config directory %s is trusted again; its files are read", self.config_dir)
        self._dir_trust_logged = problem is not None and self._dir_state == "present"

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
            status = stat_entry(path)
            signature = file_signature(status)
            if (previous is not None and signature is not None and previous.signature == signature
                    and not trust_changed):
                return previous
            if not stat.S_ISREG(status.st_mode):  # before open(): a socket cannot even be opened
                raise Unusable(not_regular(status.st_mode), signature)
            signature, data = read_trusted(path, self.owners, dir_problem)
        except Gone as gone:
            return _gone(name, previous) if gone.dangling else None
        except Unusable as unusable:
            # The entry is still there under its name: like a broken edit, the last good version
            # stays (only deleting the file unregisters it), and it is reported once per problem.
            problem = str(PluginConfigError(name, unusable.problem))
            if previous is None or previous.problem != problem:
                _warn_unusable(problem, last_good)
            return _ConfigFile(unusable.signature, None, last_good, problem)
        if previous is not None and previous.data == data and not previous.settling:
            return replace(previous, signature=signature)  # touched, or racy: same content
        return _parse(name, signature, data, previous, self.owners)

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


class _Changes:
    """When the registry should scan next: on an inotify event, or after a poll interval without a watch."""

    def __init__(self, registry: PluginRegistry) -> None:
        self._registry = registry
        self._watch: DirectoryWatch | None = None
        self._changed = asyncio.Event()
        self._fallback_logged = False

    async def next(self, retry: bool) -> None:
        """Wait for the next change (a first watch returns at once: what changed before it is unseen);
        `retry`: the last scan failed, so the next one comes after a poll interval, change or not."""
        if self._watch is None:
            if self._start_watch() and not retry:
                return
        elif self._watch_targets() and not retry:
            settling = self._registry.has_settling_files()
            try:
                await asyncio.wait_for(self._changed.wait(), self._registry.poll_interval if settling else None)
            except asyncio.TimeoutError:
                return  # no change, but a file that looked half-written is judged again
            self._changed.clear()
            if self._watch.gone:  # deleted or moved away: watch the path again, once it is there
                self.close()
            return
        await asyncio.sleep(self._registry.poll_interval)

    def _start_watch(self) -> bool:
        try:
            watch = DirectoryWatch(self._registry._dir_name)
        except WatchUnavailable as error:
            if error.errno not in (errno.ENOENT, errno.ENOTDIR):  # missing: polled until it exists
                self._give_up(error)
            return False
        asyncio.get_running_loop().add_reader(watch.fileno(), self._on_readable)
        self._watch = watch
        return self._watch_targets()

    def _watch_targets(self) -> bool:
        assert self._watch is not None
        try:
            self._watch.watch_targets(self._registry.linked_config_paths())
        except WatchUnavailable as error:
            self._give_up(error)
            return False
        return True

    def _on_readable(self) -> None:
        if self._watch is not None and self._watch.drain():
            self._changed.set()

    def _give_up(self, error: WatchUnavailable) -> None:
        """Poll instead (said once; the watch is tried again at every poll, in case the limit went up)."""
        self.close()
        if not self._fallback_logged:
            self._fallback_logged = True
            log.warning("cannot watch plugin config directory %s (%s); polling it every %gs instead",
                        self._registry.config_dir, error.strerror, self._registry.poll_interval)

    def close(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            asyncio.get_running_loop().remove_reader(watch.fileno())
            watch.close()


def _parse(name: str, signature: Signature, data: bytes, previous: _ConfigFile | None,
           owners: TrustedOwners) -> _ConfigFile:
    last_good = previous.config if previous is not None else None
    try:
        config = parse_plugin_config(name, data)
    except PluginConfigError as error:
        if signature is None and not data.strip():  # just created or truncated: the writer is not done yet
            return _ConfigFile(signature, data, last_good, str(error), settling=True)
        _warn_unusable(str(error), last_good)
        return _ConfigFile(signature, data, last_good, str(error))
    except Exception as error:  # noqa: BLE001 - a parser bug must not stop the other files
        problem = str(PluginConfigError(name, f"unexpected error: {error!r}"))
        log.exception("invalid plugin config %s", problem)
        return _ConfigFile(signature, data, last_good, problem)
    warning = None
    if last_good is None or config != last_good:  # said once it is in force (PluginRegistry._install)
        problem = endpoint_problem(config.endpoint, owners)
        warning = f"plugin {name}: {problem}" if problem else None
    elif previous is not None and previous.problem is not None:
        log.info("plugin %s is valid again (unchanged): %s", name, config.describe())
    return _ConfigFile(signature, data, config, None, endpoint_warning=warning)


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

