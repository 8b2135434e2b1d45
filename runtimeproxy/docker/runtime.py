"""Docker mode's `hooks.runtime.Runtime`: everything the hook core asks of dockerd.

The loaders, the lister and the image's entrypoint and command are docker.recovery's (list and inspect calls);
the proxy's own calls (an NRI plugin's update or eviction of another container, the removal of a sandbox an NRI
plugin failed) are here, and whether dockerd injects CDI devices (dockerd 25+ with its CDI feature on: GET /info
lists the CDI spec directories, an empty list or none when CDI is off).
"""

from __future__ import annotations

import logging

from runtimeproxy.docker.engine import EngineError
from runtimeproxy.docker.messages import BodyError, update_config
from runtimeproxy.docker.recovery import DockerRecords
from runtimeproxy.hooks.model import Resources

log = logging.getLogger(__name__)


class DockerRuntime(DockerRecords):
    """dockerd's engine API, as the hook core asks it."""

    _cdi: bool | None = None  # dockerd's answer, once it gave one

    async def cdi_enabled(self) -> bool:
        if self._cdi is None:
            try:
                info = await self._engine.get_json("/info")
            except EngineError as error:
                log.warning("cannot tell whether dockerd injects CDI devices: %s", error)
                return False
            self._cdi = isinstance(info, dict) and bool(info.get("CDISpecDirs"))
        return self._cdi

    async def update_container_resources(self, container_id: str, resources: Resources) -> None:
        """The proxy's own update on dockerd (NRI plugins' updates of other containers): only the changed,
        non-zero resources, as cri-dockerd's UpdateContainerResources sends them."""
        try:
            await self._engine.update(container_id, update_config(resources))
        except (EngineError, BodyError) as error:
            raise RuntimeError(str(error)) from None

    async def evict_container(self, container_id: str) -> None:
        """An NRI plugin's eviction: `POST /containers/{id}/stop?t=0`, as containerd's EvictContainer (timeout 0)."""
        try:
            await self._engine.stop(container_id, 0)
        except EngineError as error:
            raise RuntimeError(str(error)) from None

    async def remove_container(self, container_id: str) -> None:
        """`DELETE /containers/{id}?force=1` of a container an interrupted call left created (hooks.reconcile)."""
        try:
            await self._engine.remove(container_id)
        except EngineError as error:
            raise RuntimeError(str(error)) from None

    async def remove_sandbox(self, sandbox_id: str) -> None:
        """Undo a sandbox create an NRI plugin failed (RunPodSandbox): `DELETE /containers/{id}?force=1`."""
        try:
            await self._engine.remove(sandbox_id)
        except EngineError as error:
            log.warning("cannot remove the sandbox %s an NRI plugin failed: %s", sandbox_id, error)
