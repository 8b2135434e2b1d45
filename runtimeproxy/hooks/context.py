"""The context a hook of an ID-only call needs, for both frontends: store lookups that fall back to the
frontend's backend on a miss (after a restart, or past the store's bound), and the hook request of a
recorded container with its pod's context as it is now. How a record is read back from the backend
(containerd's verbose status, dockerd's inspect) is the frontend's `RecordSource`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from google.protobuf.message import Message

from runtimeproxy.hooks.dispatcher import Dispatcher, HookFailed, HookPoint, failure_fields
from runtimeproxy.hooks.merge import with_pod
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)


class RecordSource(Protocol):
    async def load_pod(self, pod_id: str) -> PodRecord | None:
        """The pod as the backend has it; None when it is unknown or cannot be read (logged)."""

    async def load_container(self, container_id: str) -> ContainerRecord | None:
        """The container as the backend has it; None when it is unknown or cannot be read (logged)."""


class HookContext:
    def __init__(self, store: Store, source: RecordSource) -> None:
        self.store = store
        self.source = source

    async def pod(self, pod_id: str) -> PodRecord | None:
        record = self.store.pod(pod_id)
        if record is None and pod_id:
            record = await self.source.load_pod(pod_id)
            if record is not None:
                self.store.put_pod(pod_id, record)
        return record

    async def container(self, container_id: str) -> tuple[ContainerRecord, PodRecord | None] | None:
        record = self.store.container(container_id)
        if record is None:
            record = await self.source.load_container(container_id) if container_id else None
            if record is None:
                return None
            self.store.put_container(container_id, record)
        return record, await self.pod(record.pod_id)

    async def pod_request(self, pod_id: str) -> hooks.PodSandboxHookRequest | None:
        """The hook request for a known pod with hooks; None otherwise."""
        record = await self.pod(pod_id)
        return None if record is None or record.skip_hooks else record.info

    async def container_request(self, container_id: str) -> hooks.ContainerResourceHookRequest | None:
        """The hook request for a known container of a pod with hooks; None otherwise."""
        found = await self.container(container_id)
        if found is None:
            return None
        record, pod = found
        if pod is not None and pod.skip_hooks:
            return None
        return with_pod(record.info, pod.info if pod else None)


async def run_post_hook(dispatcher: Dispatcher, point: HookPoint,
                        request_factory: Callable[[], Awaitable[Message | None]],
                        time_remaining: float | None) -> None:
    """Post-hooks never change the outcome of the call, whatever the policy; the request is only
    built (maybe a backend read) when the point has plugins."""
    if not dispatcher.has_plugins(point):
        return
    request = await request_factory()
    if request is None:
        return
    try:
        await dispatcher.run(point, request, time_remaining)
    except HookFailed as failure:  # only pre-hooks raise; kept for safety
        log.warning("%s", failure, extra=failure_fields(failure.plugin, failure.point, failure.code))
