"""NRI plugins the proxy launches itself from a plugin directory, as NRI runtimes do (containerd/nri's
pkg/adaptation: newLaunchedPlugin, discoverPlugins, getPluginConfig).

The plugin directory (`/opt/nri/plugins` by default) holds executables named `NN-name` (a two-digit index,
a dash, the name); entries that are directories or not executable are passed over. Each plugin's
configuration is the first of `<config dir>/NN-name.conf` and `<config dir>/name.conf` that exists
(`/etc/nri/conf.d` by default; none: empty). A launched plugin runs with exactly NRI's environment —
`NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX` and `NRI_PLUGIN_SOCKET=3` — and its end of a connected socketpair as
fd 3; it still calls RegisterPlugin, but its name and index are the file's (nri.session, `launched_as`).

Stricter than NRI: a plugin sees and may change every container, so only files no untrusted user could
have put or changed are launched (runtimeproxy.trust's rule for hook plugins): the directory and every
directory and link on the way to the executable owned by a trusted uid and not writable by group or others
(sticky directories excepted on the way), the executable itself too; the same for a config file. An
untrusted or misnamed entry costs a log line and is skipped (NRI refuses the whole directory on a bad name).

The process is spawned with posix_spawn (no fork of a threaded process) in a session and process group of its
own and watched through a pidfd, so it is reaped without a child watcher. `stop()` after the plugin got
Shutdown: SIGTERM, a grace, then SIGKILL. A launched plugin is its process: when it exits, whatever is left of
its process group is killed (a plugin that forks and exits leaves no child holding fd 3), and the host closes
its connection (nri.host), even if a child registered on it. A descendant that starts a session of its own
escapes the group, but not the connection's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from runtimeproxy.trust import TrustedOwners
from runtimeproxy.usage import flag_problem, os_reason

log = logging.getLogger(__name__)

DEFAULT_PLUGIN_PATH = Path("/opt/nri/plugins")
DEFAULT_PLUGIN_CONFIG_PATH = Path("/etc/nri/conf.d")
PLUGIN_NAME_ENV = "NRI_PLUGIN_NAME"
PLUGIN_IDX_ENV = "NRI_PLUGIN_IDX"
PLUGIN_SOCKET_ENV = "NRI_PLUGIN_SOCKET"
PLUGIN_FD = 3  # ExtraFiles[0] of Go's exec.Cmd
STOP_GRACE_SECONDS = 1.0
_FILE_NAME = re.compile(r"(?P<index>[0-9]{2})-(?P<name>.+)")


@dataclass(frozen=True)
class PluginFile:
    """One plugin to launch: its executable, index, name and config text."""

    path: Path
    index: str
    name: str
    config: str

    @property
    def plugin_id(self) -> str:
        return f"{self.index}-{self.name}"


def parse_file_name(file_name: str) -> tuple[str, str] | None:
    """(index, name) of a plugin file `NN-name`, or None."""
    found = _FILE_NAME.fullmatch(file_name)
    return (found["index"], found["name"]) if found else None


def _path_problem(path: Path, owners: TrustedOwners) -> str | None:
    """Why `path` (a file) could have been put or changed by an untrusted user, or None."""
    problem = owners.socket_path_problem(path)  # every directory and link on the way, the entry's owner
    if problem is None:
        problem = owners.file_problem(str(path), os.stat(path))  # the file itself: not group/other writable
    return problem


def plugin_config(config_dir: Path | None, index: str, name: str, owners: TrustedOwners) -> str:
    """The plugin's config text (NRI's lookup order); raises PermissionError for an untrusted file."""
    if config_dir is None:
        return ""
    for candidate in (config_dir / f"{index}-{name}.conf", config_dir / f"{name}.conf"):
        try:
            problem = _path_problem(candidate, owners)
        except FileNotFoundError:
            continue
        if problem is not None:
            raise PermissionError(f"config {candidate} not trusted: {problem}")
        return candidate.read_text(errors="replace")
    return ""


def discover(plugin_dir: Path, config_dir: Path | None, owners: TrustedOwners) -> list[PluginFile]:
    """The plugins to launch, in file-name order (NRI's order by index, then name)."""
    try:
        entries = sorted(os.scandir(plugin_dir), key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except OSError as error:
        log.warning("NRI: launching no plugin: %s", flag_problem(
            "--nri-plugin-path", plugin_dir, error, "give it a directory of NRI plugins (--nri-plugin-path= for none)"))
        return []
    found: list[PluginFile] = []
    for entry in entries:
        path = Path(entry.path)
        try:
            status = os.stat(path)
            if stat.S_ISDIR(status.st_mode) or not status.st_mode & 0o111:
                continue
            parsed = parse_file_name(entry.name)
            if parsed is None:
                log.warning("NRI: not launching %s: the name is not NN-name (a two-digit index)", path)
                continue
            problem = _path_problem(path, owners)
            if problem is not None:
                log.warning("NRI: not launching %s: not trusted: %s", path, problem)
                continue
            found.append(PluginFile(path, *parsed, plugin_config(config_dir, *parsed, owners)))
        except OSError as error:
            log.warning("NRI: not launching %s: %s", path, os_reason(error))
    return found


class LaunchedProcess:
    """A running plugin process: the runtime's end of its connection, and its stop."""

    def __init__(self, plugin: PluginFile, pid: int, connection: socket.socket) -> None:
        self.plugin = plugin
        self.pid = pid
        self.connection = connection
        self._pidfd = os.pidfd_open(pid)
        self._exited = asyncio.get_running_loop().create_future()
        self.returncode: int | None = None
        asyncio.get_running_loop().add_reader(self._pidfd, self._reap)

    @classmethod
    def spawn(cls, plugin: PluginFile) -> LaunchedProcess:
        """Starts the plugin with its end of a socketpair as fd 3 and NRI's environment."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        environment = {PLUGIN_NAME_ENV: plugin.name, PLUGIN_IDX_ENV: plugin.index, PLUGIN_SOCKET_ENV: str(PLUGIN_FD)}
        null = os.open(os.devnull, os.O_RDWR)
        try:
            pid = os.posix_spawn(str(plugin.path), [str(plugin.path)], environment, file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),  # stderr: the proxy's
                (os.POSIX_SPAWN_DUP2, theirs.fileno(), PLUGIN_FD)], setsid=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(null)
        log.info("NRI: launched plugin %s (pid %d)", plugin.path, pid)
        return cls(plugin, pid, ours)

    def _reap(self) -> None:
        with contextlib.suppress(ChildProcessError):
            _, status = os.waitpid(self.pid, os.WNOHANG)
            self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode is None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        with contextlib.suppress(ProcessLookupError):  # what it forked and left: the group's ID outlives the leader
            os.killpg(self.pid, signal.SIGKILL)
        if not self._exited.done():
            self._exited.set_result(self.returncode)
        log.info("NRI: launched plugin %s exited (%s)", self.plugin.plugin_id, self.returncode)

    @property
    def running(self) -> bool:
        return not self._exited.done()

    async def exited(self) -> int:
        """Waits for the process to exit (and its group to be killed); its exit code."""
        return await asyncio.shield(self._exited)

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """After Shutdown: `grace` seconds to exit on its own, then SIGTERM, then SIGKILL; returns once the
        process is reaped."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if not self.running:
                return
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._exited), grace)
