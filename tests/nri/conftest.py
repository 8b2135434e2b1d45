"""Fixtures of the NRI unit tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A path for the host's NRI socket, in a fresh directory (bound only by the tests about the socket: the host
    of the others serves socketpairs, tests.kits.nrihost)."""
    with tempfile.TemporaryDirectory(prefix="nri-") as directory:
        yield Path(directory) / "nri.sock"
