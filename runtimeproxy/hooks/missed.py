"""Pods and containers created without a plugin's answer: it failed (down, slow, an invalid answer) under
failure policy Ignore, so the call went on without its edits, and nothing re-applies them once it is back.

Noted by the core when the runtime created the object (hooks.lifecycle), forgotten when it is removed; read by
`runtimeproxyctl status` (a count and the newest few) and the metrics. In memory, bounded: past
`MAX_NOTED` the oldest is forgotten (the count of all ever noted goes on). Knows no transport.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

MAX_NOTED = 4096
NEWEST_SHOWN = 5


@dataclass(frozen=True)
class Missed:
    """An object created without the answers of `plugins` at `hook`."""

    object_id: str  # the container's ID (the sandbox's for a pod)
    pod_id: str
    pod: str  # namespace/name
    container: str  # the container's name; "" for a pod
    hook: str
    plugins: tuple[str, ...]
    unix_seconds: float


class MissedPlugins:
    def __init__(self, limit: int = MAX_NOTED) -> None:
        self._noted: collections.OrderedDict[str, Missed] = collections.OrderedDict()
        self._limit = limit
        self.noted_total = 0  # ever noted, for the metrics' counter

    def note(self, object_id: str, pod_id: str, pod: str, container: str, hook: str,
             plugins: tuple[str, ...]) -> None:
        if not object_id or not plugins:
            return
        self._noted[object_id] = Missed(object_id, pod_id, pod, container, hook, plugins, time.time())
        self._noted.move_to_end(object_id)
        self.noted_total += 1
        while len(self._noted) > self._limit:
            self._noted.popitem(last=False)

    def forget_container(self, container_id: str) -> None:
        self._noted.pop(container_id, None)

    def forget_pod(self, pod_id: str) -> None:
        """The pod and every container noted in it."""
        for object_id in [key for key, missed in self._noted.items() if missed.pod_id == pod_id]:
            del self._noted[object_id]

    def __len__(self) -> int:
        return len(self._noted)

    def newest(self, count: int = NEWEST_SHOWN) -> list[Missed]:
        """The `count` most recently noted, newest first."""
        return list(reversed(self._noted.values()))[:count]

    def by_plugin(self) -> collections.Counter[str]:
        """Objects noted now, by plugin that missed them."""
        return collections.Counter(plugin for missed in self._noted.values() for plugin in missed.plugins)
