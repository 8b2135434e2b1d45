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
from typing import Any

from runtimeproxy.hooks.dispatcher import Dispatcher
from runtimeproxy.hooks.plugins import PluginRegistry
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.options import ProxyOptions

log = logging.getLogger(__name__)


class HookService:
    def __init__(self, options: ProxyOptions) -> None:
        self.skip = SkipRule(options.skip_label_key, options.skip_label_value)
        self.registry = PluginRegistry(
            options.hook_config_dir, trusted_uids=options.hook_config_trusted_uids
        )
        self.store = Store()
        self.toggles = Toggles(options.state_dir)
        self.dispatcher = Dispatcher(self.registry, self.toggles)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.toggles.load()  # before the first call: a disabled plugin stays disabled
        await self.registry.reload()  # plugins present at start are in force for the first call
        self._tasks = [asyncio.create_task(self.registry.run(), name="plugin-configs")]

    def run_in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Work of a frontend that lives as long as the hooks (e.g. rebuilding the store)."""
        self._tasks.append(asyncio.create_task(work, name=name))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.registry.close()
