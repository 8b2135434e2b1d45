"""The CRI frontend's `hooks.runtime.Runtime`: everything the hook core asks of containerd (or another CRI runtime).

The loaders and the lister for the store's rebuild and its fills on a miss are cri.recovery's (verbose status
calls); the image's entrypoint and command cri.images'; the proxy's own calls (an NRI plugin's update or
eviction of another container, the removal of a sandbox an NRI plugin failed or of a container an interrupted
call left Created) are here, sent on the runtime
channel with their own timeout. Whether the runtime injects CDI devices is read from its own configuration, as
containerd shows it in a verbose Status (cdi_in_status; 1.6 has no CDI).
"""

from __future__ import annotations

import logging

import grpc
import orjson
from google.protobuf.message import Message

from runtimeproxy.cri.backend import Backend
from runtimeproxy.cri.images import ImageProcess
from runtimeproxy.cri.recovery import BackendReadError, BackendRecords
from runtimeproxy.hooks.edits import ImageFacts
from runtimeproxy.hooks.hook_messages import merge_sparse
from runtimeproxy.hooks.model import Resources
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

log = logging.getLogger(__name__)

OWN_CALL_TIMEOUT_SECONDS = 10.0  # a call the proxy itself sends (an NRI plugin's update or eviction)


class CriRuntime(BackendRecords):
    """The runtime and image channels of a CRI backend, as the hook core asks them."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend.runtime)
        self.backend = backend
        self._images = ImageProcess(backend.image)
        self._cdi: bool | None = None  # the runtime's answer, once it gave one

    async def image_facts(self, image: str) -> ImageFacts:
        return await self._images.facts(image)

    async def cdi_enabled(self) -> bool:
        if self._cdi is None:
            try:
                status = await self._call("Status", cri.StatusRequest(verbose=True), cri.StatusResponse)
            except BackendReadError as error:
                log.warning("cannot tell whether the runtime injects CDI devices: %s", error)
                return False
            self._cdi = cdi_in_status(dict(status.info))
        return self._cdi

    async def update_container_resources(self, container_id: str, resources: Resources) -> None:
        """The proxy's own UpdateContainerResources on the runtime (NRI plugins' updates of other containers: a
        sparse update, zero meaning unchanged)."""
        request = cri.UpdateContainerResourcesRequest(container_id=container_id)
        request.linux.SetInParent()
        merge_sparse(request.linux, resources)
        await self._own_call("UpdateContainerResources", request)

    async def evict_container(self, container_id: str) -> None:
        """An NRI plugin's eviction: StopContainer with timeout 0, as containerd's EvictContainer."""
        await self._own_call("StopContainer", cri.StopContainerRequest(container_id=container_id, timeout=0))

    async def remove_container(self, container_id: str) -> None:
        """RemoveContainer of a container an interrupted call left Created (hooks.reconcile)."""
        await self._own_call("RemoveContainer", cri.RemoveContainerRequest(container_id=container_id))

    async def remove_sandbox(self, pod_id: str) -> None:
        """Undo a RunPodSandbox an NRI plugin failed: StopPodSandbox, then RemovePodSandbox (containerd
        cleans up the sandbox it was creating). Errors are logged: the kubelet gets the plugin's error."""
        for method, request in (("StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod_id)),
                                ("RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod_id))):
            try:
                await self._own_call(method, request)
            except RuntimeError as error:
                log.warning("cannot remove the sandbox %s an NRI plugin failed: %s", pod_id, error)
                return

    async def _own_call(self, method: str, request: Message) -> None:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.backend.runtime.channel.unary_unary(
            f"/runtime.v1.RuntimeService/{method}")
        try:
            await call(request.SerializeToString(), timeout=OWN_CALL_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as error:
            raise RuntimeError(f"{method}: {error.code().name}: {error.details()}") from None


def cdi_in_status(info: dict[str, str]) -> bool:
    """containerd's verbose Status: info["config"] is its CRI configuration as JSON. containerd 1.7 says
    `enableCDI` (its `enable_cdi`, off by default); 2.x has CDI always on and shows only its `cdiSpecDirs`;
    1.6 shows neither."""
    try:
        config = orjson.loads(info.get("config", "{}"))
    except orjson.JSONDecodeError:
        return False
    if not isinstance(config, dict):
        return False
    if "enableCDI" in config:
        return config["enableCDI"] is True
    return bool(config.get("cdiSpecDirs"))
