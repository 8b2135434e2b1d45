"""What dockerd tells of Kubernetes' sandboxes and containers, for the hook core's store (hooks.rebuild after
a restart, hooks.context on a miss): a lister and loaders, translation only.

dockerd keeps what it was asked to create, after our hooks changed it: labels (pod labels and
`annotation.*`), `Config.Env` and `HostConfig` (cgroup parent, resources — current ones, since
`/update` changes HostConfig). So cgroup parent, resources and env survive a proxy restart.
"""

from __future__ import annotations

import logging
import urllib.parse

from runtimeproxy.docker.engine import EngineClient, EngineError
from runtimeproxy.docker.messages import (
    CONTAINER_TYPE,
    SANDBOX_ID_LABEL,
    SANDBOX_TYPE,
    TYPE_LABEL,
    Inspected,
    container_from_inspect,
    inspected,
    pod_from_inspect,
)
from runtimeproxy.hooks.rebuild import Listing
from runtimeproxy.hooks.store import ContainerRecord
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

log = logging.getLogger(__name__)


class DockerRecords:
    """Reads sandboxes and containers back from dockerd with list and inspect calls (docker.runtime's loaders)."""

    name = "dockerd"

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine

    async def find(self, container_id: str) -> Inspected | None:
        """The Kubernetes sandbox or container with this ID; None if dockerd does not know it or
        Kubernetes did not create it."""
        try:
            return inspected(await self._engine.inspect(container_id))
        except EngineError as error:
            log.warning("cannot read %s from dockerd: %s", container_id, error)
            return None

    async def image_argv(self, image: str) -> tuple[list[str], list[str]]:
        """The image's Entrypoint and Cmd (for an NRI plugin's view of the argv); empty when unreadable."""
        try:
            config = (await self._engine.get_json(f"/images/{urllib.parse.quote(image, safe='/:@')}/json")
                      ).get("Config") or {}
            return list(config.get("Entrypoint") or []), list(config.get("Cmd") or [])
        except (EngineError, AttributeError, TypeError) as error:
            log.warning("cannot read image %s from dockerd: %s", image, error)
            return [], []

    async def list_objects(self) -> Listing:
        """Every Kubernetes sandbox and container dockerd has (the list's labels say which is which)."""
        listing = Listing()
        for container_id, labels in (await self._engine.list_labelled(TYPE_LABEL)).items():
            kind = labels.get(TYPE_LABEL)
            if kind == SANDBOX_TYPE:
                listing.pod_ids.append(container_id)
            elif kind == CONTAINER_TYPE:
                listing.containers[container_id] = labels.get(SANDBOX_ID_LABEL, "")
        return listing

    async def load_pod(self, pod_id: str) -> hooks.PodSandboxHookRequest | None:
        found = await self.find(pod_id)
        return pod_from_inspect(found) if found is not None and found.kind == SANDBOX_TYPE else None

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        """The container as dockerd has it (its sandbox ID from its labels)."""
        found = await self.find(container_id)
        if found is None or found.kind != CONTAINER_TYPE:
            return None
        return ContainerRecord(found.sandbox_id, container_from_inspect(found))
