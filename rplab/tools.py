"""Where the third-party CRI clients are: crictl and critest are built from the project's Go module
(``rplab.peers``, cri-tools at the version ``peers/go.mod`` pins); cri-dockerd is looked for on PATH, else in
the directory ``RUNTIMEPROXY_TOOLS_DIR`` names.

cri-dockerd cannot be built from the Go module proxy (its go.mod has replace directives) and no package registry
this project installs from carries it, so nothing here installs it: where it is missing, what needs it says so
(where to get it) and the rest goes on. A built client that fails to build raises ``PeerBuildError``: that is a
broken checkout or machine, never a reason to skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rplab.peers import peer_binary

TOOLS_DIR_ENV = "RUNTIMEPROXY_TOOLS_DIR"
# The clients rplab.peers builds; find_tool never looks for these on PATH, so every run uses the pinned version.
BUILT_TOOLS = ("crictl", "critest")
# Where each client that is not built here is published, and the version the project was measured with.
RELEASES = {
    "cri-dockerd": ("https://github.com/Mirantis/cri-dockerd/releases", "v0.3.1"),
}


def tools_dirs() -> list[Path]:
    """Directories searched after PATH."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    return [Path(configured)] if configured else []


def find_tool(name: str) -> Path | None:
    """A built client's binary (built on first use); else the executable ``name`` on PATH, else in the tools
    directory; None when neither has it."""
    if name in BUILT_TOOLS:
        return peer_binary(name)
    found = shutil.which(name)
    if found:
        return Path(found)
    for directory in tools_dirs():
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_tool_message(name: str) -> str:
    """One line: which tool is missing, where it was looked for, and how to install it."""
    where = "PATH" + "".join(f" nor {d}" for d in tools_dirs())
    releases, version = RELEASES.get(name, ("its project's release page", "a recent release"))
    return (f"{name} not found on {where}; install it from {releases} ({version} was tested) on PATH "
            f"or in the directory ${TOOLS_DIR_ENV} names")
