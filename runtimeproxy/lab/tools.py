"""Where the third-party CRI clients (crictl, critest) are: PATH first, then the shared tools directory.

Debian packages neither, and nothing here can download them, so prebuilt upstream binaries sit in
``../shared/bin`` beside the repository (``RUNTIMEPROXY_TOOLS_DIR`` points elsewhere).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

TOOLS_DIR_ENV = "RUNTIMEPROXY_TOOLS_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_TOOLS_DIR = REPO_ROOT.parent / "shared" / "bin"
RELEASES_URL = "https://github.com/kubernetes-sigs/cri-tools/releases"  # crictl, critest
OTHER_RELEASES_URLS = {"cri-dockerd": "https://github.com/Mirantis/cri-dockerd/releases"}


def tools_dirs() -> list[Path]:
    """Directories searched after PATH, in order."""
    configured = os.environ.get(TOOLS_DIR_ENV)
    return [Path(configured)] if configured else [SHARED_TOOLS_DIR]


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
    where = ", ".join(str(d) for d in tools_dirs())
    return (f"{name} not found on PATH nor in {where} (set {TOOLS_DIR_ENV} to its directory; "
            f"upstream builds: {OTHER_RELEASES_URLS.get(name, RELEASES_URL)})")
