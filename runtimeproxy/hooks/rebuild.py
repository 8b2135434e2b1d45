"""Filling the store from the backend after a (re)start: one routine for both frontends.

The frontend supplies only what its backend can tell (its `hooks.runtime.Runtime`: list what runs, load one
pod or container); this module decides the rest: pods before containers, a bounded number of loads at a time,
the skip rule of each pod, and that a record already in the store is never overwritten (a call that
ran while the rebuild read the backend recorded something at least as new). What the rebuild misses
is filled lazily on a miss (hooks.context).
"""

from __future__ import annotations

import asyncio
import logging
from runtimeproxy.hooks.context import HookContext
from runtimeproxy.hooks.runtime import Listing, Runtime

log = logging.getLogger(__name__)

PARALLEL_LOADS = 8  # backend reads in flight at once: a node's thousand containers without a burst


__all__ = ["Listing", "rebuild", "rebuild_store"]  # Listing: hooks.runtime's, for the frontends


async def rebuild(context: HookContext, state: Runtime) -> None:
    """Record every pod and container the backend has that the store does not know yet."""
    listing = await state.list_objects()
    store = context.store
    limit = asyncio.Semaphore(PARALLEL_LOADS)

    async def load_pod(pod_id: str) -> None:
        async with limit:
            loaded = await state.load_pod(pod_id)
        if loaded is not None and store.pod(pod_id) is None:
            store.put_pod(pod_id, context.admitted(loaded))

    async def load_container(container_id: str, pod_id: str) -> None:
        async with limit:
            record = await state.load_container(container_id, pod_id)
        if record is not None and store.container(container_id) is None:
            store.put_container(container_id, record)

    await asyncio.gather(*(load_pod(pod_id) for pod_id in listing.pod_ids))
    await asyncio.gather(*(load_container(cid, pod_id) for cid, pod_id in listing.containers.items()))
    log.info("store rebuilt from %s: %d pods, %d containers", state.name, store.pod_count, store.container_count)


async def rebuild_store(context: HookContext, state: Runtime) -> None:
    """The background task: a failed rebuild is logged, never fatal (lazy fills cover what it missed)."""
    try:
        await rebuild(context, state)
    except Exception as error:
        log.warning("could not rebuild the store from %s: %s", state.name, error)
