"""An in-process proxy with its operator endpoints on (private admin socket, state dir, free port)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rplab.synthetic import SyntheticBackend, install_benchmark_answers
from runtimeproxy.app import Proxy


@pytest.fixture
def operated(start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend, tmp_path: Path) -> Proxy:
    install_benchmark_answers(synthetic)
    return start_proxy(runtime_path=synthetic.path, admin_path=tmp_path / "admin.sock",
                       state_dir=tmp_path / "state", metrics_address="127.0.0.1:0")

