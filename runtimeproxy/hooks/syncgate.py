"""The gate between the runtime's lifecycle calls and a plugin's synchronization, as containerd/nri's
`BlockPluginSync`.

A lifecycle call holds the gate shared (`changing()`) from its first plugin event to its last store write; a
plugin being synchronized holds it alone (`synchronizing()`) from the store snapshot to its insertion among the
plugins. So no call falls between "the runtime changed" and "the plugins were told": a plugin attaching while pods
are created either finds such a container in its Synchronize or gets its events, never neither (and not both).

Calls wait for a synchronization that is running or waiting (a steady stream of calls never starves it); the
uncontended path costs two integer updates, no await.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SyncGate:
    def __init__(self) -> None:
        self._changing = 0  # lifecycle calls inside
        self._syncs = 0  # synchronizations inside or waiting to get in
        self._syncing = asyncio.Lock()  # one synchronization at a time
        self._changes_done: asyncio.Event | None = None  # set when the last call inside leaves
        self._sync_done: asyncio.Event | None = None  # set when no synchronization is inside or waiting

    @asynccontextmanager
    async def changing(self) -> AsyncIterator[None]:
        while self._syncs:
            if self._sync_done is None:
                self._sync_done = asyncio.Event()
            await self._sync_done.wait()
        self._changing += 1
        try:
            yield
        finally:
            self._changing -= 1
            if self._changing == 0 and self._changes_done is not None:
                self._changes_done.set()

    @asynccontextmanager
    async def synchronizing(self) -> AsyncIterator[None]:
        self._syncs += 1
        try:
            async with self._syncing:
                while self._changing:
                    self._changes_done = asyncio.Event()
                    await self._changes_done.wait()
                yield
        finally:
            self._syncs -= 1
            if self._syncs == 0 and self._sync_done is not None:
                self._sync_done.set()
                self._sync_done = None

    @property
    def calls_inside(self) -> int:
        return self._changing
