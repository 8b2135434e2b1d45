"""Shared fixtures: an event-loop thread, a synthetic backend and in-process proxies."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from rplab import CHECKOUT
from rplab.cri import open_channel
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend
from runtimeproxy.options import ProxyOptions
from runtimeproxy.app import Proxy

from tests.kits.machine import missing_client_skips
from tests.kits.packages import PACKAGE_WORKDIR

# The modules that build the wheel, the release bundle or the node packages (minutes each): marked `packaging`, so
# a quick loop deselects them with -m "not e2e and not packaging".
PACKAGING_MODULES = frozenset({"test_packaging.py", "test_binary.py", "test_nodepackages.py", "test_debian_roots.py",
                               "test_installed.py", "test_documented_node.py", "test_guest_node_ops.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).name in PACKAGING_MODULES:
            item.add_marker(pytest.mark.packaging)

@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def synthetic(loop_thread: LoopThread, tmp_path: Path) -> Iterator[SyntheticBackend]:
    backend = SyntheticBackend(tmp_path / "backend.sock")
    loop_thread.run(backend.start())
    yield backend
    loop_thread.run(backend.stop(0))


@pytest.fixture
def synthetic_process(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A synthetic backend in its own process (one a test can freeze with SIGSTOP): (socket, process)."""
    path = tmp_path / "backend-process.sock"
    backend = subprocess.Popen([sys.executable, "-m", "rplab.synthetic", "--socket", str(path)], cwd=CHECKOUT)
    yield path, backend
    backend.terminate()
    backend.wait(10)


ProxyFactory = Callable[..., Proxy]


@pytest.fixture
def start_proxy(loop_thread: LoopThread, tmp_path: Path) -> Iterator[ProxyFactory]:
    """Start an in-process proxy: start_proxy(runtime_path=..., **other ProxyOptions)."""
    started: list[Proxy] = []

    def start(**overrides: object) -> Proxy:
        settings: dict[str, object] = {
            "listen_path": tmp_path / f"proxy{len(started)}.sock",
            "hook_config_dir": tmp_path / "hookserver.d",
        }
        settings.update(overrides)
        proxy = Proxy(ProxyOptions(**settings))  # type: ignore[arg-type]
        loop_thread.run(proxy.start())
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        loop_thread.run(proxy.stop(0))


@pytest.fixture
def proxy(start_proxy: ProxyFactory, synthetic: SyntheticBackend) -> Proxy:
    return start_proxy(runtime_path=synthetic.path)


@pytest.fixture
def client(proxy: Proxy) -> Iterator[grpc.Channel]:
    channel = open_channel(proxy.options.listen_path)
    yield channel
    channel.close()


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say it when tests did not run because a third-party CRI client is not installed."""
    skipped = terminalreporter.stats.get("skipped", [])
    counts = missing_client_skips([_skip_reason(report) for report in skipped])
    if counts:
        terminalreporter.section("Skipped: third-party CRI clients not installed")
        for message, count in counts.items():
            terminalreporter.write_line(f"{count} test(s) skipped: {message}")


def pytest_sessionfinish() -> None:
    shutil.rmtree(PACKAGE_WORKDIR, ignore_errors=True)  # the wheel and virtualenvs tests/packagekit.py made
