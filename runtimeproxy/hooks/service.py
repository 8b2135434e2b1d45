"""The hook core wired together, the same for both frontends: plugin registry, dispatcher,
store, toggles and the skip rule, with the background work they need (config reloads, the store's rebuild).

Transport-free: a frontend (cri/, docker/) turns its wire requests into hook requests, asks
`dispatcher` to run a hook point, writes the merged result back, and keeps `store` current. It gives the
core its backend once, as a `hooks.runtime.Runtime` (`use_runtime`); the service then rebuilds the store
from it after a restart (`start_rebuild`; `rebuilt` is set once that is over), then finishes what the
predecessor's interrupted calls left (hooks.journal, hooks.reconcile; `reconciled` is set after the first pass),
and carries out what plugins of another kind ask through it (`asks`, hooks.runtime.PluginAsks), saying what the
stops they caused are about (hooks.context.subject_of, as for any other event) for that kind to deliver on its own
path.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from runtimeproxy.hooks.context import HookContext, subject_of
from runtimeproxy.hooks.dispatcher import Dispatcher
from runtimeproxy.hooks.nri_plugins import NO_NRI_PLUGINS, NriPlugins, Subject
from runtimeproxy.hooks.journal import CallJournal, InFlight
from runtimeproxy.hooks.missed import MissedPlugins
from runtimeproxy.hooks.rebuild import rebuild_store
from runtimeproxy.hooks.reconcile import Reconciled, Resumer, reconcile_until_found
from runtimeproxy.hooks.registry import PluginRegistry
from runtimeproxy.hooks.runtime import PluginAsks, Runtime
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.stats import CallStats
from runtimeproxy.hooks.store import Store
from runtimeproxy.hooks.syncgate import SyncGate
from runtimeproxy.hooks.toggles import STATE_FILE_NAME, Toggles
from runtimeproxy.hooks.trace import TraceRecorder
from runtimeproxy.listener import SocketInUseError, SocketLock, lock_socket_path
from runtimeproxy.options import ProxyOptions
from runtimeproxy.usage import naming_flag

log = logging.getLogger(__name__)


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
        self.stats = CallStats()  # every kind's plugin calls, one table (status and metrics read it kind by kind)
        self.dispatcher = Dispatcher(self.registry, self.toggles, self.trace, self.stats)
        self.nri: NriPlugins = NO_NRI_PLUGINS  # plugins of another protocol (NRI), set by the process
        # Lifecycle calls against plugin synchronization (containerd/nri's BlockPluginSync): hooks.syncgate.
        self.sync_gate = SyncGate()
        self._tasks: list[asyncio.Task[None]] = []
        self._state_lock: SocketLock | None = None
        self.runtime: Runtime | None = None  # the frontend's backend (use_runtime)
        self.context: HookContext | None = None  # store lookups that fall back to the runtime
        # What plugins of another kind ask of the core: the one door to the store and the runtime for them.
        self.asks = PluginAsks(self.store, subject_of=self._container_subject)
        self.rebuilt = asyncio.Event()  # set once the store's rebuild (after a restart) is over
        self._rebuilding = False
        self.journal = CallJournal(options.state_dir)  # hooked calls in flight, for the next proxy after a crash
        self.interrupted: list[InFlight] = []  # what the predecessor's journal left open (read at start)
        self.resumer: Resumer | None = None  # the core's flows the reconciliation goes through (hooks.lifecycle)
        self.reconciled: Reconciled | None = None  # what the reconciliation did, once it is over
        self.missed = MissedPlugins()  # containers that missed a plugin failing under Ignore

    async def start(self) -> None:
        self._state_lock = claim_state_dir(self.state_dir)
        self.interrupted = self.journal.start()  # the lock is ours: the predecessor is gone
        self.toggles.load()  # before the first call: a disabled plugin stays disabled
        await self.registry.reload()  # plugins present at start are in force for the first call
        self._tasks = [asyncio.create_task(self.registry.run(), name="plugin-configs")]

    def run_in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Work that lives as long as the hooks."""
        self._tasks.append(asyncio.create_task(work, name=name))

    def use_runtime(self, runtime: Runtime, pod_labels: Mapping[str, str] | None = None) -> HookContext:
        """The frontend's backend, given once: the store's fills on a miss and what plugins ask go through it.
        `pod_labels`: the labels that runtime gives every pod itself (the model records them)."""
        self.runtime = self.asks.runtime = runtime
        self.context = HookContext(self.store, runtime, self.skip, pod_labels)
        return self.context

    def start_rebuild(self) -> None:
        """Record what the runtime already runs (after a restart; hooks.rebuild), in the background;
        `rebuilt` is set when it is over, however it ended."""
        assert self.context is not None and self.runtime is not None, "use_runtime first"
        self._rebuilding = True
        self.run_in_background(self._rebuild(self.context, self.runtime), "store-rebuild")

    async def _rebuild(self, context: HookContext, runtime: Runtime) -> None:
        try:
            await rebuild_store(context, runtime)
        finally:
            self.rebuilt.set()
        if self.interrupted and self.resumer is not None:
            try:
                self.reconciled = await reconcile_until_found(
                    self.store, runtime, self.resumer, self.interrupted, lambda: rebuild_store(context, runtime))
            except Exception as error:  # never fatal: the kubelet's own GC is the fallback
                log.warning("could not reconcile the calls the previous proxy left in flight: %s", error)

    async def store_rebuilt(self) -> None:
        """Returns once the store's rebuild (after a restart) is over, if one runs."""
        if self._rebuilding:
            await self.rebuilt.wait()

    async def _container_subject(self, container_id: str) -> Subject | None:
        """A container a plugin's eviction stopped outside any CRI call, as the NRI plugins hear of it (they
        hear StopContainer, as they hear containerd's own stop of an evicted container)."""
        return await subject_of(self.context, container_id=container_id) if self.context is not None else None

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.registry.close()
        self.journal.close()
        if self._state_lock is not None:
            self._state_lock.release()
            self._state_lock = None


# A state directory out of space (disk or quota): the node's condition, not a wrong flag. The proxy is the kubelet's
# only way to its runtime, and the node's pods still need it (status, probes, stops), so it serves without what it
# keeps there rather than not at all. A read-only one is refused as a wrong flag: a disk remounted read-only
# stops the runtime's own root too.
FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})


def claim_state_dir(state_dir: Path | None) -> SocketLock | None:
    """The toggle state is one proxy's alone: a lock beside its file, held for the process's life.

    Two proxies sharing a state directory would load each other's toggles and overwrite each other's writes.
    A directory the proxy cannot write for want of space is said and left: no lock, the
    toggles read from it and not changed (a change that cannot be kept is refused), no journal of calls in flight.
    """
    if state_dir is None:
        return None
    try:
        with naming_flag("--state-dir", state_dir, "give --state-dir a directory this user may create and write "
                         "(the proxy keeps its plugin toggles there)"):
            try:
                state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                return lock_socket_path(state_dir / STATE_FILE_NAME, in_use="belongs to another running proxy")
            except OSError as error:
                if error.errno not in FULL_DISK:
                    raise
                log.error("the state directory %s cannot be written (%s): serving without it; its plugin toggles "
                          "hold but cannot be changed, and a call cut off by a crash is not reconciled after it; "
                          "free the disk, then restart the proxy", state_dir, error.strerror)
                return None
    except SocketInUseError as error:
        raise SocketInUseError(f"{error}; give each proxy its own --state-dir") from None
