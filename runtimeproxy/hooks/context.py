"""The context a hook of an ID-only call needs, for both frontends: store lookups that fall back to the
frontend's backend on a miss (after a restart, or past the store's bound), and the hook request of a
recorded container with its pod's context as it is now. How an object is read back from the backend
(containerd's verbose status, dockerd's inspect) is the frontend's `hooks.runtime.Runtime`; what is recorded
of it (the skip rule included) is decided here, and so is `tell_nri`: how plugins of another kind (hooks.nri_plugins)
hear of a recorded pod or container, the one flow for the hook points and for the stops plugins cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from runtimeproxy.hooks.nri_plugins import NriPlugins, PodResize, Subject
from runtimeproxy.hooks import hook_messages
from runtimeproxy.hooks.runtime import Runtime
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import ContainerRecord, PodRecord, Store
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


class HookContext:
    def __init__(self, store: Store, source: Runtime, skip: SkipRule,
                 pod_labels: Mapping[str, str] | None = None) -> None:
        """`pod_labels`: the labels the frontend's runtime gives every pod itself (the model's)."""
        self.store = store
        self.source = source
        self.skip = skip
        self.pod_labels = dict(pod_labels or {})

    def admitted(self, pod: PodRecord) -> PodRecord:
        """A pod as a frontend decoded it (from a request, or read back from its runtime), with what the core
        decides of it: whether the skip rule spares it hooks, the labels the runtime gives every pod itself."""
        return replace(pod, skip_hooks=self.skip.applies(pod.labels), runtime_labels=dict(self.pod_labels))

    async def pod(self, pod_id: str) -> PodRecord | None:
        record = self.store.pod(pod_id)
        if record is None and pod_id:
            loaded = await self.source.load_pod(pod_id)
            if loaded is not None:
                record = self.admitted(loaded)
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
        return None if record is None or record.skip_hooks else hook_messages.pod_request(record)

    async def container_request(self, container_id: str) -> hooks.ContainerResourceHookRequest | None:
        """The hook request for a known container of a pod with hooks; None otherwise."""
        found = await self.container(container_id)
        return None if found is None else request_of(*found)


def request_of(record: ContainerRecord, pod: PodRecord | None) -> hooks.ContainerResourceHookRequest | None:
    """A found container's hook request (with its pod's part: the recorded pod's, else the one its create request
    showed); None for a container of a skip-labelled pod."""
    pod = pod_of(record, pod)
    if pod is not None and pod.skip_hooks:
        return None
    return hook_messages.container_request(record, pod)


def pod_of(record: ContainerRecord, pod: PodRecord | None) -> PodRecord | None:
    """A container's pod: the store's record, else the pod as the container's create request showed it."""
    return pod if pod is not None else record.pod_from_create


async def subject_of(context: HookContext, pod_id: str = "", container_id: str = "") -> Subject | None:
    """A recorded pod or container as the NRI plugins hear of it; None: unknown, or of a skip-labelled pod."""
    if container_id:
        found = await context.container(container_id)
        if found is None:
            return None
        record, pod = found
        pod = pod_of(record, pod)
        return None if pod is not None and pod.skip_hooks else Subject(record.pod_id, pod, container_id, record)
    recorded = await context.pod(pod_id)
    if recorded is None or recorded.skip_hooks:
        return None
    return Subject(pod_id, recorded)


async def tell_nri(context: HookContext, plugins: NriPlugins, event: str, pod_id: str = "",
                     container_id: str = "", resize: PodResize | None = None) -> None:
    """An event for the NRI plugins about a recorded pod or container (skip-labelled pods spared); `resize`:
    the pod's resources as they are to be (UpdatePodSandbox)."""
    if not plugins.wants(event):
        return
    subject = await subject_of(context, pod_id, container_id)
    if subject is not None:
        subject.resize = resize
        await plugins.notify(event, subject)
