"""The NRI host's lock (containerd/nri's lock.go): one event or one plugin's attach at a time.

Not re-entrant: what an event causes (an eviction's StopContainer) is delivered by the event's holder on its
locked path, never by taking the lock again. A holder asking again is a bug and raises at once instead of
waiting for itself. One object, so that a finer policy (a lock per pod) replaces it in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class EventLock:
    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[object] | None = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        task = asyncio.current_task()
        if task is not None and self._holder is task:
            raise RuntimeError("the NRI host's lock was asked for again by the task holding it")
        async with self._lock:
            self._holder = task
            try:
                yield
            finally:
                self._holder = None

    def locked(self) -> bool:
        return self._lock.locked()
