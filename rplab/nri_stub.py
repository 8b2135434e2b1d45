"""The project's Go NRI plugin on NRI's real stub (peers/nriplugin, built by rplab.peers at two stub versions),
driven from Python: run as a plugin that connects to an NRI socket, or installed in a plugin directory for the runtime
to launch; either way it writes one JSON line per event it gets, which `events()` reads back.

Connected, it is given the socket with `-socket` (the stub's WithSocketPath: the real stub reads NRI_PLUGIN_SOCKET
as the number of an inherited fd, never as a path). Launched, the plugin file is a link to the binary and its flags
travel as the plugin's config text (Configure), which the plugin parses as more flags.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rplab.peers import peer_binary

STUB_VERSIONS = ("v0.8", "v0.12")  # peers nriplugin-<version>
WAIT_SECONDS = 10.0


@dataclass
class StubPlugin:
    """One nriplugin: `version` picks the stub ("v0.8", "v0.12"); `flags` are its adjustment and event flags."""

    version: str
    log: Path
    name: str = "stub"
    index: str = "10"
    flags: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def plugin_id(self) -> str:
        return f"{self.index}-{self.name}"

    @property
    def binary(self) -> Path:
        return peer_binary(f"nriplugin-{self.version}")

    def connect(self, socket: Path) -> None:
        """Starts it as a plugin that connects to `socket` on its own."""
        argv = [str(self.binary), f"-socket={socket}", f"-name={self.name}", f"-idx={self.index}",
                f"-log={self.log}", *self.flags]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.log.with_suffix(".stderr").open("wb"))

    def install(self, plugin_dir: Path, config_dir: Path) -> None:
        """Puts it in a runtime's plugin directory (`NN-name`, a link to the binary) with its flags as its config."""
        (plugin_dir / self.plugin_id).symlink_to(self.binary)
        (config_dir / f"{self.plugin_id}.conf").write_text(" ".join([f"-log={self.log}", *self.flags]))

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=WAIT_SECONDS)
            self.process = None

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def events(self) -> list[str]:
        return [record["event"] for record in self.records()]

    def record(self, event: str) -> dict:
        """The first record of `event`."""
        return next(record for record in self.records() if record["event"] == event)

    def wait_for(self, event: str, timeout: float = WAIT_SECONDS) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if event in self.events():
                return self.record(event)
            time.sleep(0.05)
        raise TimeoutError(f"NRI stub plugin {self.plugin_id} got no {event} in {timeout:g}s: {self.events()}")
