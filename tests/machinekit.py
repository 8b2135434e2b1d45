"""What a test needs from the machine, in one place: a missing part fails the run in CI
(RUNTIMEPROXY_REQUIRE_E2E set) and skips the test elsewhere, with a message saying what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from runtimeproxy.lab.tools import find_tool, missing_tool_message

REQUIRE_E2E_ENV = "RUNTIMEPROXY_REQUIRE_E2E"
# Offline lab images, built once and reused across runs.
IMAGE_CACHE = Path(os.environ.get("RUNTIMEPROXY_IMAGE_CACHE", Path.home() / ".cache" / "runtimeproxy" / "images"))


def skip_or_fail(reason: str) -> None:
    """Never returns: fails when e2e tests are required, skips otherwise."""
    if os.environ.get(REQUIRE_E2E_ENV):
        pytest.fail(reason)
    pytest.skip(reason)


def require_tool(name: str) -> Path:
    """A third-party client (crictl, critest, cri-dockerd): on PATH or in the shared tools directory."""
    path = find_tool(name)
    if path is None:
        skip_or_fail(missing_tool_message(name))
    assert path is not None
    return path


def require_command(name: str, debian_package: str) -> str:
    """A command from a Debian package that scripts/setup.sh installs."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} (Debian package {debian_package}) is not installed; run scripts/setup.sh")
    assert path is not None
    return path
