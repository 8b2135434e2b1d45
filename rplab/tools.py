"""Where the third-party CRI clients are (crictl, critest, cri-dockerd): on PATH, else in the directory
``RUNTIMEPROXY_TOOLS_DIR`` names.

They are Go programs that no package registry this project installs from carries, so nothing here installs
them: where they are missing, what needs them says so (which tool, how to get it) and the rest goes on.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

TOOLS_DIR_ENV = "RUNTIMEPROXY_TOOLS_DIR"
# Where each client's release binaries are published, and the version the project was measured with.
RELEASES = {
    "crictl": ("https://github.com/kubernetes-sigs/cri-tools/releases", "v1.32.0"),
    "critest": ("https://github.com/kubernetes-sigs/cri-tools/releases", "v1.32.0"),
    "cri-dockerd": ("https://github.com/Mirantis/cri-dockerd/releases", "v0.3.1"),
}


def tools_dirs() -> list[Path]:
    """Directories searched after PATH."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    return [Path(configured)] if configured else []


def find_tool(name: str) -> Path | None:
    """The executable ``name`` on PATH, else in the tools directory; None when neither has it."""
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
