"""What the NRI plugins' answers ask of other containers, collected and carried out through the core.

An answer to CreateContainer or UpdateContainer (and StopContainer's updates, a Synchronize's, a plugin's own
UpdateContainers) may ask to update or evict containers the event is not about. `Asked` collects one plugin's
requests; `Results` carries them out once every plugin answered, as containerd/nri's result.go: evictions first,
then updates, failures logged and never failing the call. Nothing here writes the store or calls the runtime: the
core does both (hooks.runtime.PluginAsks). A plugin in shadow has nothing carried out; its evictions are counted.
What the carry-out causes is returned, not delivered: the containers it stopped, whose StopContainer the host
sends on its own locked path (inside the event, or after a plugin's own UpdateContainers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runtimeproxy.hooks.merge import changed_resources
from runtimeproxy.hooks.runtime import NoRuntime, PluginAsks
from runtimeproxy.hooks.stats import OK, KindStats
from runtimeproxy.nri.adjust import AdjustmentError, Adjustments
from runtimeproxy.nri.explain import shown_id, shown_reason, some_ids
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

log = logging.getLogger(__name__)


@dataclass
class Asked:
    """What one plugin's answer asks of other containers, carried out once every plugin answered."""

    plugin_id: str
    updates: list[nri.ContainerUpdate]
    evictions: list[nri.ContainerEviction]


class Results:
    """Carries out what the plugins asked of other containers (the host's statistics count the evictions)."""

    def __init__(self, asks: PluginAsks, stats: KindStats) -> None:
        self.asks = asks
        self.stats = stats

    async def carry_out(self, asked: Asked, current: str) -> list[str]:
        """Evictions first, then updates (containerd's order after CreateContainer and UpdateContainer);
        failures are logged, never fail the call (as containerd). Returns the containers stopped."""
        stopped = await self.evict_all(asked.plugin_id, asked.evictions, current)
        await self.update_others(asked.plugin_id, asked.updates, current)
        return stopped

    def count_shadowed(self, plugin_id: str, evictions: list[nri.ContainerEviction]) -> None:
        if not evictions:
            return
        self.stats.evicted(plugin_id, "shadow", len(evictions))
        log.warning("NRI plugin %s (in shadow) asked to evict %d containers (%s; the first because: %s): not carried "
                    "out", plugin_id, len(evictions), some_ids([e.container_id for e in evictions]),
                    shown_reason(evictions[0]))

    async def evict_all(self, plugin_id: str, evictions: list[nri.ContainerEviction], current: str) -> list[str]:
        """Containers the proxy does not know are no error (containerd) and take one log line, however many.
        Returns the containers stopped: containerd evicts with its own StopContainer, which NRI plugins hear (a
        resource policy frees what the container held), and so do they here, from the host (the proxy's stop
        bypasses the hook points)."""
        stopped: list[str] = []
        unknown: list[str] = []
        for eviction in evictions:
            outcome = await self._evict(plugin_id, eviction, current)
            if outcome is None:
                unknown.append(eviction.container_id)
            elif outcome:
                stopped.append(eviction.container_id)
        if unknown:
            log.warning("NRI plugin %s asked to evict %d containers the proxy does not know (%s): nothing done",
                        plugin_id, len(unknown), some_ids(unknown))
        return stopped

    async def _evict(self, plugin_id: str, eviction: nri.ContainerEviction, current: str) -> bool | None:
        """Stops the container at once, as containerd's EvictContainer does (CRI StopContainer, timeout 0):
        the kubelet then sees it exited and acts by the pod's restart policy. True: stopped; False: the stop
        failed; None: the proxy does not know it."""
        container_id, shown, reason = eviction.container_id, shown_id(eviction.container_id), shown_reason(eviction)
        if self.asks.container(container_id) is None:
            self.stats.evicted(plugin_id, "unknown")
            return None
        try:
            await self.asks.evict(container_id)
        except NoRuntime as error:
            log.warning("NRI plugin %s asked to evict container %s (%s): %s", plugin_id, shown, reason, error)
            self.stats.evicted(plugin_id, "failed")
            return False
        except (OSError, RuntimeError) as error:
            log.warning("NRI plugin %s: eviction of container %s (%s) failed: %s", plugin_id, shown, reason,
                        error)
            self.stats.evicted(plugin_id, "failed")
            return False
        log.warning("NRI plugin %s evicted container %s (asked during %s): %s; stopped with timeout 0",
                    plugin_id, shown, current or "an UpdateContainers of its own", reason,
                    extra={"plugin": plugin_id})
        self.stats.evicted(plugin_id, OK)
        return True

    async def update_others(self, plugin_id: str, updates: list[nri.ContainerUpdate], current: str) -> None:
        failed = [update.container_id for update in await self.apply_updates(plugin_id, updates)
                  if not update.ignore_failure]
        if failed:
            log.warning("NRI plugin %s: %d updates of other containers (asked during %s) failed (%s)", plugin_id,
                        len(failed), current or "synchronization", some_ids(failed))

    async def apply_updates(self, plugin_id: str, updates: list[nri.ContainerUpdate]) -> list[nri.ContainerUpdate]:
        """The updates carried out (by the core: hooks.runtime.PluginAsks); returns those that failed. What cannot be
        done at all (no runtime, containers the proxy does not know) takes one log line, however many a plugin
        named: not one per ID on the loop."""
        if not updates:
            return []
        if self.asks.runtime is None:
            log.warning("NRI plugin %s: cannot update %d containers (%s): this frontend takes no updates", plugin_id,
                        len(updates), some_ids([update.container_id for update in updates]))
            return list(updates)
        failed: list[nri.ContainerUpdate] = []
        unknown: list[str] = []
        for update in updates:
            record = self.asks.container(update.container_id)
            if record is None:
                unknown.append(update.container_id)
                failed.append(update)
                continue
            adjustments = Adjustments(record)
            try:
                adjustments.apply_update(plugin_id, update, "an UpdateContainerResources")
                changes = changed_resources(record.resources, adjustments.container.resources, with_hugepages=True)
                await self.asks.update(update.container_id, changes)
            except (AdjustmentError, OSError, RuntimeError) as error:
                log.warning("NRI plugin %s: update of container %s failed: %s", plugin_id,
                            shown_id(update.container_id), error)
                failed.append(update)
        if unknown:
            log.warning("NRI plugin %s: cannot update %d containers the proxy does not know (%s)", plugin_id,
                        len(unknown), some_ids(unknown))
        return failed
