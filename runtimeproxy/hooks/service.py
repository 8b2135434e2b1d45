"""The hook machinery wired together: plugin registry, dispatcher, store, hooked calls."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from runtimeproxy.backend import Backend
from runtimeproxy.forwarding import UnaryHook
from runtimeproxy.hooks.dispatcher import Dispatcher
from runtimeproxy.hooks.points import RuntimeHooks
from runtimeproxy.hooks.recovery import BackendRecords, SkipRule
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.options import ProxyOptions
from runtimeproxy.plugins import PluginRegistry

log = logging.getLogger(__name__)


class HookService:
    def __init__(self, options: ProxyOptions, backend: Backend) -> None:
        skip = SkipRule(options.skip_label_key, options.skip_label_value)
        self.registry = PluginRegistry(
            options.hook_config_dir, trusted_uids=options.hook_config_trusted_uids
        )
        self.store = Store()
        self.toggles = Toggles(options.state_dir)
        self.dispatcher = Dispatcher(self.registry, self.toggles)
        self.records = BackendRecords(backend.runtime, skip)
        self.hooks = RuntimeHooks(self.dispatcher, self.store, self.records, skip)
        self._backend = backend
        self._tasks: list[asyncio.Task[None]] = []

    def interceptors(self) -> dict[str, UnaryHook]:
        return self.hooks.interceptors()

    async def start(self) -> None:
        self.toggles.load()  # before the first call: a disabled plugin stays disabled
        await self.registry.reload()  # plugins present at start are in force for the first call
        self._tasks = [
            asyncio.create_task(self.registry.run(), name="plugin-configs"),
            asyncio.create_task(self._rebuild_store(), name="store-rebuild"),
        ]

    async def _rebuild_store(self) -> None:
        """After a (re)start, record what the backend already runs, once it is reachable."""
        await self._backend.runtime.channel.channel_ready()
        try:
            await self.records.rebuild(self.store)
        except Exception as error:  # lazy fills on a miss still cover what this missed
            log.warning("could not rebuild the store from the backend: %s", error)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.registry.close()
