"""What dockerd tells of Kubernetes' sandboxes and containers, for the hook core's store (hooks.rebuild after
a restart, hooks.context on a miss): a lister and loaders, translation only.

dockerd keeps what it was asked to create, after our hooks changed it: labels (pod labels and
`annotation.*`), `Config.Env` and `HostConfig` (cgroup parent, resources — current ones, since
`/update` changes HostConfig). So cgroup parent, resources and env survive a proxy restart, and with them the
rest of a container's model (hooks.model): labels, argv, bind mounts, devices, state, pid and times.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
import logging
import re
import urllib.parse

from runtimeproxy.docker.edits import container_edits
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
from runtimeproxy.hooks.edits import ImageFacts, ImageIdentity
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, PodRecord
from runtimeproxy.hooks.rebuild import Listing

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

    async def image_facts(self, image: str) -> ImageFacts:
        """The image's Entrypoint and Cmd (for an NRI plugin's view of the argv) and identity (NRI's
        Container.image: the first repo tag, else repo digest; the first repo digest's digest; the image ID);
        empty when unreadable."""
        try:
            inspected = await self._engine.get_json(f"/images/{urllib.parse.quote(image, safe='/:@')}/json")
            config = inspected.get("Config") or {}
            tags, digests = list(inspected.get("RepoTags") or []), list(inspected.get("RepoDigests") or [])
            identity = ImageIdentity(tags[0] if tags else (digests[0] if digests else ""),
                                     digests[0].rpartition("@")[2] if digests else "", str(inspected.get("Id", "")))
            return ImageFacts(tuple(config.get("Entrypoint") or ()), tuple(config.get("Cmd") or ()),
                              identity if identity.config_digest else None)
        except (EngineError, AttributeError, TypeError) as error:
            log.warning("cannot read image %s from dockerd: %s", image, error)
            return ImageFacts()

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

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        found = await self.find(pod_id)
        return pod_from_inspect(found) if found is not None and found.kind == SANDBOX_TYPE else None

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        """The container as dockerd has it (its sandbox ID from its labels)."""
        found = await self.find(container_id)
        if found is None or found.kind != CONTAINER_TYPE:
            return None
        return container_record(found)


_STATES = {"created": ContainerState.CREATED, "running": ContainerState.RUNNING, "paused": ContainerState.RUNNING,
           "restarting": ContainerState.RUNNING, "exited": ContainerState.STOPPED, "dead": ContainerState.STOPPED}
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


def container_record(found: Inspected) -> ContainerRecord:
    """The model of a container from its inspect: labels, argv (Path + Args), bind mounts and devices
    (HostConfig), state, pid and times (State, Created)."""
    state = found.state
    pid = state.get("Pid")
    return replace(
        container_from_inspect(found), edits=container_edits({"HostConfig": found.host_config}, found.argv),
        state=_STATES.get(str(state.get("Status", "")), ContainerState.UNKNOWN),
        pid=pid if isinstance(pid, int) and pid > 0 else 0, created_ns=unix_ns(found.created),
        started_ns=unix_ns(str(state.get("StartedAt") or "")), finished_ns=unix_ns(str(state.get("FinishedAt") or "")))


def unix_ns(text: str) -> int:
    """dockerd's RFC 3339 time (up to nanoseconds) in nanoseconds since the epoch; 0 for its zero time
    (0001-01-01) or what cannot be read."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return 0
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        moment = datetime.datetime.fromisoformat(match[1] + zone)
    except ValueError:
        return 0
    if moment.year < 1970:
        return 0
    return int(moment.timestamp()) * 1_000_000_000 + int((match[2] or "0").ljust(9, "0"))
