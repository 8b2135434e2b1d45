"""The hook core wired together, the same for both frontends: plugin registry, dispatcher,
store, toggles and the skip rule, with the background work they need (config reloads).

Transport-free: a frontend (cri/, docker/) turns its wire requests into hook requests, asks
`dispatcher` to run a hook point, writes the merged result back, and keeps `store` current.
How the store is rebuilt after a restart is the frontend's business (it knows the backend).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from runtimeproxy.hooks.dispatcher import Dispatcher
from runtimeproxy.hooks.extra import NO_EXTRA_PLUGINS, ExtraPlugins
from runtimeproxy.hooks.registry import PluginRegistry
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.syncgate import SyncGate
from runtimeproxy.hooks.toggles import STATE_FILE_NAME, Toggles
from runtimeproxy.hooks.trace import TraceRecorder
from runtimeproxy.listener import SocketInUseError, SocketLock, lock_socket_path
from runtimeproxy.options import ProxyOptions

log = logging.getLogger(__name__)
STORE_REBUILD = "store-rebuild"  # the name of the frontend's background work that refills the store


class HookService:
    def __init__(self, options: ProxyOptions) -> None:
        self.skip = SkipRule(options.skip_label_key, options.skip_label_value)
        self.registry = PluginRegistry(
            options.hook_config_dir, trusted_uids=options.hook_config_trusted_uids
        )
        self.store = Store()
        self.state_dir = options.state_dir
        self.toggles = Toggles(options.state_dir)
        self.trace = TraceRecorder(options.hook_trace_entries)
        self.dispatcher = Dispatcher(self.registry, self.toggles, self.trace)
        self.extra: ExtraPlugins = NO_EXTRA_PLUGINS  # plugins of another protocol (NRI), set by the process
        # Lifecycle calls against plugin synchronization (containerd/nri's BlockPluginSync): hooks.syncgate.
        self.sync_gate = SyncGate()
        self._tasks: list[asyncio.Task[None]] = []
        self._state_lock: SocketLock | None = None

    async def start(self) -> None:
        self._state_lock = claim_state_dir(self.state_dir)
        self.toggles.load()  # before the first call: a disabled plugin stays disabled
        await self.registry.reload()  # plugins present at start are in force for the first call
        self._tasks = [asyncio.create_task(self.registry.run(), name="plugin-configs")]

    def run_in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Work of a frontend that lives as long as the hooks (e.g. rebuilding the store)."""
        self._tasks.append(asyncio.create_task(work, name=name))

    async def store_rebuilt(self) -> None:
        """Returns once the frontend's rebuild of the store (after a restart) is over, if one runs."""
        rebuilds = [task for task in self._tasks if task.get_name() == STORE_REBUILD]
        if rebuilds:
            await asyncio.wait(rebuilds)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.registry.close()
        if self._state_lock is not None:
            self._state_lock.release()
            self._state_lock = None


def claim_state_dir(state_dir: Path | None) -> SocketLock | None:
    """The toggle state is one proxy's alone: a lock beside its file, held for the process's life.

    Two proxies sharing a state directory would load each other's toggles and overwrite each other's writes.
    """
    if state_dir is None:
        return None
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return lock_socket_path(state_dir / STATE_FILE_NAME, in_use="belongs to another running proxy")
    except SocketInUseError as error:
        raise SocketInUseError(f"{error}; give each proxy its own --state-dir") from None
