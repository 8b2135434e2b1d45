"""The project's NRI plugin (nrikit) as a process a runtime launches from its plugin directory: connected through
fd NRI_PLUGIN_SOCKET, named by NRI_PLUGIN_NAME / NRI_PLUGIN_IDX, exits on Shutdown.

Its config (Configure's text, from the config directory) is JSON: `env` variables to add on CreateContainer,
and `record`, a file where it writes what it learned at Configure (its name, index, environment, config) and
appends each event it gets. `plugin_file()` writes the executable for a plugin directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from google.protobuf.message import Message

from tests.kits.nri import NriPlugin
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

_ROOT = Path(__file__).resolve().parents[2]


def plugin_file(path: Path, forks: bool = False) -> Path:
    """An executable at `path` that runs this module's plugin (with this interpreter and this checkout); `forks`:
    it forks first, its child keeping fd 3 and being the plugin, and the launched process exits 1 s later."""
    fork = "import os, time\nif os.fork():\n    time.sleep(1)\n    os._exit(0)\n" if forks else ""
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(_ROOT)!r}]\n"
                    f"{fork}from tests.kits.launched_plugin import main\nmain()\n")
    path.chmod(0o755)
    return path


class LaunchedPlugin(NriPlugin):
    settings: dict = {}

    def record(self, entry: dict) -> None:
        if self.settings.get("record"):
            with open(self.settings["record"], "a") as out:
                out.write(json.dumps(entry) + "\n")

    async def _configure(self, request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        self.settings = json.loads(request.config or "{}")
        self.record({"configured": request.config, "name": self.name, "index": self.index,
                     "environ": dict(os.environ), "runtime": request.runtime_name})
        return await super()._configure(request)


async def _create(plugin: NriPlugin, request: Message) -> Message:
    env = [nri.KeyValue(key=key, value=value) for key, value in plugin.settings.get("env", {}).items()]  # type: ignore[attr-defined]
    return nri.CreateContainerResponse(adjust=nri.ContainerAdjustment(env=env))


async def _run() -> None:
    plugin = LaunchedPlugin(every_event=True, methods={"CreateContainer": (nri.CreateContainerRequest, _create)})
    await plugin.connect_launched()
    assert plugin.mux is not None
    closed = asyncio.ensure_future(plugin.mux.wait_closed())
    shut = asyncio.ensure_future(plugin.shut_down.wait())
    await asyncio.wait({closed, shut}, return_when=asyncio.FIRST_COMPLETED)
    plugin.record({"events": [name for name, _ in plugin.received]})
    await asyncio.sleep(0.05)  # let the Shutdown answer go out
    plugin.close()


def main() -> None:
    asyncio.run(_run())
