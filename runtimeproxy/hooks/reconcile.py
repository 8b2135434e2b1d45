"""After a crash: finishing what the predecessor's interrupted calls left, by one rule, as far as the runtime shows it.

The journal (hooks.journal) names the CreateContainer and StartContainer calls whose answer never reached the
kubelet. What the kubelet does next decides the rule (k8s.io/kubernetes, pkg/kubelet):
- it starts a container only right after its own CreateContainer answered (kuberuntime_container.go,
  startContainer: CreateContainer, then StartContainer on the ID it got back); a failed create or start ends
  that attempt, and the next sync creates a new container with the next attempt number, since a latest status
  in state Created "always restarts" (container/helpers.go, ShouldContainerBeRestarted);
- its garbage collector counts a Created container as dead but keeps `MaxPerPodContainer` (1 by default) dead
  containers per pod and container name while the pod exists (kuberuntime_gc.go, evictableContainers,
  enforceMaxContainersPerEvictUnit): the superseded Created one stays until the pod is removed.

So, for each interrupted call, the container it names is read again from the runtime (after the store's
rebuild):
- still `Created`: no kubelet will start it, and its GC keeps it as long as the pod lives: it is removed
  (RemoveContainer on the runtime; the store and the NRI plugins forget it, as for the kubelet's removal);
- `Running` (a start that went through): the post-start it missed runs now (PostStartContainer plugins, the
  NRI plugins' PostStartContainer);
- exited (containerd fails a start whose client went away: container_start.go marks it exited, code 128,
  reason StartError): left alone, like any container that exits: the kubelet starts the next attempt and keeps
  this one as the previous instance;
- not there (a create the runtime had not finished, or a runtime that cannot be asked yet): looked for again
  after each of `RECHECK_SECONDS`, then forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from runtimeproxy.hooks.journal import CREATE_CONTAINER, InFlight
from runtimeproxy.hooks.model import ContainerState
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.store import Store

log = logging.getLogger(__name__)

RECHECK_SECONDS = (2.0, 10.0)  # a create the runtime finished late (after the successor started) is found then


class Resumer(Protocol):
    """The core's own flows the reconciliation goes through (hooks.lifecycle.HookPoints), each held as one change
    for the plugins' synchronization, as a kubelet's call is (hooks.syncgate)."""

    def changing(self) -> AbstractAsyncContextManager[None]: ...

    async def post_start_container(self, container_id: str, time_remaining: float | None) -> None: ...

    async def container_removed(self, container_id: str) -> None: ...


@dataclass
class Reconciled:
    """What one reconciliation did, by container ID."""

    removed: list[str] = field(default_factory=list)
    post_started: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # found, neither Created nor running
    not_found: list[InFlight] = field(default_factory=list)


def created_container(store: Store, call: InFlight) -> str:
    """The ID of the container a journaled call names, as the store has it ("" if unknown)."""
    if call.container_id:
        return call.container_id if store.container(call.container_id) is not None else ""
    _, containers = store.snapshot()
    for container_id, record in containers:
        if record.pod_id == call.pod_id and record.name == call.name and record.attempt == call.attempt:
            return container_id
    return ""


async def reconcile(store: Store, runtime: Runtime, points: Resumer, calls: list[InFlight]) -> Reconciled:
    """One pass over the interrupted calls (the store rebuilt from the runtime first)."""
    done = Reconciled()
    for call in calls:
        container_id = created_container(store, call)
        loaded = await runtime.load_container(container_id, call.pod_id) if container_id else None
        if loaded is None:
            done.not_found.append(call)
        elif loaded.state is ContainerState.CREATED:
            async with points.changing():
                await _remove(runtime, points, container_id, call, done)
        elif loaded.state is ContainerState.RUNNING and call.call != CREATE_CONTAINER:
            log.info("container %s was started by a StartContainer interrupted by the proxy's end: its post-start "
                     "hooks run now", container_id)
            async with points.changing():
                await points.post_start_container(container_id, None)
            done.post_started.append(container_id)
        else:
            done.left.append(container_id)
    return done


async def _remove(runtime: Runtime, points: Resumer, container_id: str, call: InFlight, done: Reconciled) -> None:
    try:
        await runtime.remove_container(container_id)
    except (RuntimeError, OSError) as error:
        log.warning("cannot remove container %s that an interrupted %s left Created: %s", container_id, call.call,
                    error)
        done.left.append(container_id)
        return
    log.info("removed container %s: an interrupted %s left it Created, and the kubelet never starts such a "
             "container (it creates the next attempt)", container_id, call.call)
    await points.container_removed(container_id)
    done.removed.append(container_id)


async def reconcile_until_found(store: Store, runtime: Runtime, points: Resumer, calls: list[InFlight],
                                refill: Callable[[], Awaitable[None]],
                                sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> Reconciled:
    """A pass now, then one after each of RECHECK_SECONDS for the calls not found (`refill`: the store's rebuild,
    which records what the runtime finished since)."""
    total = await reconcile(store, runtime, points, calls)
    waited = 0.0
    for delay in RECHECK_SECONDS:
        if not total.not_found:
            break
        await sleep(delay - waited)
        waited = delay
        await refill()
        again = await reconcile(store, runtime, points, total.not_found)
        total.removed += again.removed
        total.post_started += again.post_started
        total.left += again.left
        total.not_found = again.not_found
    if calls:
        log.info("reconciled %d calls interrupted by the proxy's end: %d containers removed, %d post-starts run, "
                 "%d left to the kubelet, %d not found", len(calls), len(total.removed), len(total.post_started),
                 len(total.left), len(total.not_found))
    return total
