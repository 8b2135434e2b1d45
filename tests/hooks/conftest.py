"""Fixtures for the hook unit tests (helpers live in tests/kits/hooks.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kits.hooks import PluginBench
from rplab.loop import LoopThread


@pytest.fixture
def bench(loop_thread: LoopThread, tmp_path: Path) -> Iterator[PluginBench]:
    bench = PluginBench(loop_thread, tmp_path)
    yield bench
    bench.close()
