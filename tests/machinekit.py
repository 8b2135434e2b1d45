"""What a test needs from the machine, in one place.

A part the project installs itself (scripts/setup.sh) that is missing fails the run in CI
(RUNTIMEPROXY_REQUIRE_E2E set) and skips the test elsewhere. crictl and critest are built from the project's
Go module (rplab.peers): one that does not build fails the test, everywhere. cri-dockerd, which no registry here
carries, skips, in CI too, with a message saying how to install it (unless RUNTIMEPROXY_REQUIRE_CLIENTS is set);
the run's summary lists those skips (tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rplab.peers import PeerBuildError
from rplab.tools import find_tool, missing_tool_message

REQUIRE_E2E_ENV = "RUNTIMEPROXY_REQUIRE_E2E"
# Set by a CI that installed cri-dockerd: then a missing one fails instead of skipping.
REQUIRE_CLIENTS_ENV = "RUNTIMEPROXY_REQUIRE_CLIENTS"
# Offline lab images, built once and reused across runs.
IMAGE_CACHE = Path(os.environ.get("RUNTIMEPROXY_IMAGE_CACHE", Path.home() / ".cache" / "runtimeproxy" / "images"))


def skip_or_fail(reason: str) -> None:
    """Never returns: fails when e2e tests are required, skips otherwise."""
    if os.environ.get(REQUIRE_E2E_ENV):
        pytest.fail(reason)
    pytest.skip(reason)


# Every skip for a missing third-party client starts with this, so the summary can count them.
MISSING_CLIENT_SKIP = "third-party CRI client missing"


def require_tool(name: str) -> Path:
    """A third-party CRI client: crictl and critest built from peers/ (fails when that build fails);
    cri-dockerd on PATH or in $RUNTIMEPROXY_TOOLS_DIR (skips without)."""
    try:
        path = find_tool(name)
    except PeerBuildError as error:
        pytest.fail(f"{name} did not build: {error}")
    if path is None:
        reason = f"{MISSING_CLIENT_SKIP}: {missing_tool_message(name)}"
        if os.environ.get(REQUIRE_CLIENTS_ENV):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def missing_client_skips(skip_reasons: list[str]) -> dict[str, int]:
    """How many tests each missing client's skip message stands behind: {message: count}."""
    counts: dict[str, int] = {}
    for reason in skip_reasons:
        _, marker, message = reason.partition(f"{MISSING_CLIENT_SKIP}: ")
        if marker:
            counts[message] = counts.get(message, 0) + 1
    return counts


def require_command(name: str, debian_package: str) -> str:
    """A command from a Debian package that scripts/setup.sh installs."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} (Debian package {debian_package}) is not installed; run scripts/setup.sh")
    assert path is not None
    return path
