"""Docker mode's event loop: uvloop where it is installed, asyncio's otherwise; CRI mode keeps asyncio's."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest

from runtimeproxy import app
from runtimeproxy.docker import eventloop
from runtimeproxy.options import ProxyOptions


def _options(mode: str) -> ProxyOptions:
    return ProxyOptions(listen_path=Path("/run/rp.sock"), runtime_path=Path("/run/backend.sock"), backend_mode=mode,
                        hook_config_dir=Path("/etc/hooks"))


def test_docker_mode_runs_on_uvloop_and_cri_mode_on_asyncios_loop() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert app.loop_factory(_options("Docker")) is uvloop.new_event_loop
    assert app.loop_factory(_options("Containerd")) is None
    with asyncio.Runner(loop_factory=app.loop_factory(_options("Docker"))) as runner:
        assert runner.run(_loop_name()) == "uvloop"


def test_without_uvloop_docker_mode_runs_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    try:
        fallback = importlib.reload(eventloop)
        assert fallback.docker_loop_factory() is None
        assert asyncio.run(_loop_name()) == "asyncio"
    finally:
        monkeypatch.undo()
        importlib.reload(eventloop)


async def _loop_name() -> str:
    return eventloop.running_loop_name()
