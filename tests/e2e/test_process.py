"""The koord-runtime-proxy process: signals, its socket, and a backend that comes and goes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.process import ProxyProcess


def test_socket_mode_and_clean_sigterm(containerd: ContainerdInstance, workdir: Path) -> None:
    proxy = ProxyProcess(workdir / "sig" / "rp.sock", containerd.address)
    proxy.start()
    assert stat.S_IMODE(proxy.listen_path.stat().st_mode) == 0o660
    assert proxy.stop() == 0
    assert not proxy.listen_path.exists()
    log = proxy.log_path.read_text()
    assert "listening on" in log and "stopped" in log


def test_a_second_proxy_refuses_a_live_socket(proxy_process: ProxyProcess, containerd: ContainerdInstance) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runtimeproxy", f"--koord-runtimeproxy-endpoint={proxy_process.listen_path}",
         f"--remote-runtime-service-endpoint={containerd.address}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "served by another running process" in result.stderr
    with open_channel(proxy_process.listen_path) as channel:  # the first one is unharmed
        assert CriClient(channel).runtime.Version(CriClient(channel).api.VersionRequest(), timeout=10).runtime_name


def _first_to_exit(proxies: list[ProxyProcess], timeout: float = 30) -> ProxyProcess | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proxy in proxies:
            if proxy.returncode() is not None:
                return proxy
        time.sleep(0.05)
    return None


def test_two_proxies_started_at_once_on_one_path_leave_exactly_one(
    containerd: ContainerdInstance, workdir: Path
) -> None:
    for attempt in range(5):
        path = workdir / f"race{attempt}" / "rp.sock"
        proxies = [ProxyProcess(path, containerd.address, log_path=path.parent / f"proxy{n}.log") for n in (0, 1)]
        for proxy in proxies:
            proxy.spawn()
        try:
            loser = _first_to_exit(proxies)
            assert loser is not None, "both proxies kept running on one socket"
            (winner,) = [proxy for proxy in proxies if proxy is not loser]
            assert loser.returncode() == 1, loser.log_tail()
            assert f"pid {winner.pid} holds" in loser.log_tail(), loser.log_tail()
            winner.wait_until_listening(30)
            assert winner.returncode() is None
        finally:
            assert [proxy.stop() for proxy in proxies].count(0) == 1


def _version(client: CriClient) -> str:
    return client.runtime.Version(client.api.VersionRequest(), timeout=5).runtime_name


def _eventually_version(client: CriClient, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _version(client)
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_backend_down_at_start_then_up_then_restarted(workdir: Path, containerd: ContainerdInstance) -> None:
    later = ContainerdInstance(workdir / "late")
    proxy = ProxyProcess(workdir / "late-proxy" / "rp.sock", later.address)
    proxy.start(wait_serving=False)
    try:
        with open_channel(proxy.listen_path) as channel:
            client = CriClient(channel)
            with pytest.raises(grpc.RpcError) as raised:
                _version(client)
            assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
            assert later.address in raised.value.details()

            later.start()
            assert _eventually_version(client) == "containerd"
            later.stop()
            with pytest.raises(grpc.RpcError):
                _version(client)
            later.start()
            assert _eventually_version(client) == "containerd"
        # The frame relay answers as soon as containerd does; the backend channel behind the health service
        # logs its reconnection within its backoff (at most 1 s) after that.
        deadline = time.monotonic() + 10
        while "is reachable" not in proxy.log_tail(100) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "is unreachable" in proxy.log_tail(100) and "is reachable" in proxy.log_tail(100), proxy.log_tail(100)
    finally:
        assert proxy.stop() == 0
        later.stop()


def _wait_for_health(channel: grpc.Channel, expected: int, timeout: float = 30) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    while stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status != expected:
        assert time.monotonic() < deadline, f"health never became {expected}"
        time.sleep(0.1)


def test_a_frozen_containerd_turns_health_not_serving_and_back(workdir: Path) -> None:
    frozen = ContainerdInstance(workdir / "frozen")
    frozen.start()
    proxy = ProxyProcess(workdir / "frozen-proxy" / "rp.sock", frozen.address)
    try:
        proxy.start()
        with open_channel(proxy.listen_path) as channel:
            assert frozen.pid is not None
            os.kill(frozen.pid, signal.SIGSTOP)
            try:
                _wait_for_health(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
            _wait_for_health(channel, health_pb2.HealthCheckResponse.SERVING)
            assert _version(CriClient(channel)) == "containerd"
        log = proxy.log_tail(100)
        assert log.count("is connected but does not answer") == 1 and log.count("answers again") == 1, log
    finally:
        proxy.stop()
        frozen.stop()


def test_default_log_level_has_no_per_call_lines(containerd: ContainerdInstance, workdir: Path) -> None:
    proxy = ProxyProcess(workdir / "quiet" / "rp.sock", containerd.address)
    proxy.start()
    try:
        with open_channel(proxy.listen_path) as channel:
            client = CriClient(channel)
            for _ in range(50):
                _version(client)
    finally:
        proxy.stop()
    lines = proxy.log_path.read_text().splitlines()
    assert len(lines) <= 5, lines


def test_socket_directory_is_created(containerd: ContainerdInstance, workdir: Path) -> None:
    proxy = ProxyProcess(workdir / "deep" / "a" / "b" / "rp.sock", containerd.address,
                         log_path=workdir / "deep.log", hook_config_dir=workdir / "deep-hooks")
    with proxy:
        assert proxy.listen_path.parent.is_dir()
