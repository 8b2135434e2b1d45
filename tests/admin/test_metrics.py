"""/metrics, /healthz and /readyz over HTTP: the series, their exposition (promtool) and health."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.kits.admin import http_get, promtool_check
from runtimeproxy.endpoints import parse_bind_address
from rplab.cri import open_channel
from rplab.synthetic import EVENT_COUNT_KEY
from runtimeproxy.app import Proxy

VERSION = "/runtime.v1.RuntimeService/Version"


def test_cri_calls_are_counted_by_method_and_code(operated: Proxy) -> None:
    with open_channel(operated.options.listen_path) as channel:
        for _ in range(3):
            channel.unary_unary(VERSION)(b"", timeout=5)
        try:
            channel.unary_unary("/runtime.v1.RuntimeService/NoSuchMethod")(b"", timeout=5)
        except grpc.RpcError:
            pass
    text = wait_for_metric(operated, 'runtimeproxy_backend_reachable{role="runtime"} 1.0')
    assert ('runtimeproxy_cri_calls_total{code="OK",method="Version",service="runtime.v1.RuntimeService"} 3.0'
            in text)
    assert 'runtimeproxy_cri_call_duration_seconds_count{method="Version",service="runtime.v1.RuntimeService"} 3.0' in text
    assert 'method="other",service="other"' in text  # no path from a client becomes a label
    assert "runtimeproxy_build_info{" in text and "runtimeproxy_store_pods 0.0" in text
    promtool_check(text)


def test_hook_series_and_config_rejections(operated: Proxy) -> None:
    config_dir = operated.options.hook_config_dir
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "broken.json").write_text("[")
    (config_dir / "koordlet.json").write_text(json.dumps({
        "remote-endpoint": str(config_dir / "nobody.sock"), "runtime-hooks": ["PreRunPodSandbox"]}))
    stats = operated.hook_service.dispatcher.stats
    stats.record("koordlet.json", "PreRunPodSandbox", "ok", 0.002)
    stats.record("koordlet.json", "PreRunPodSandbox", "UNAVAILABLE", 0.001, "connection refused")
    stats.changed("koordlet.json", "PreRunPodSandbox")
    operated.hook_service.toggles.disable("koordlet", frozenset(), "test")
    text = wait_for_metric(operated, "runtimeproxy_plugins_registered 1.0")
    assert 'runtimeproxy_hook_calls_total{hook="PreRunPodSandbox",outcome="UNAVAILABLE",plugin="koordlet.json"} 1.0' in text
    assert 'runtimeproxy_hook_changes_applied_total{hook="PreRunPodSandbox",plugin="koordlet.json"} 1.0' in text
    assert 'runtimeproxy_hook_call_duration_seconds_bucket{hook="PreRunPodSandbox",le="+Inf",plugin="koordlet.json"} 2.0' in text
    assert "runtimeproxy_plugins_disabled 1.0" in text
    assert "runtimeproxy_plugin_configs_rejected 1.0" in text
    promtool_check(text)


def wait_for_metric(proxy: Proxy, line: str, polls: int = 100) -> str:
    """Until the registry (polled every 0.5 s) shows what the test wrote."""
    for _ in range(polls):
        _, text = http_get(proxy, "/metrics")
        if line in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{line!r} never appeared:\n{text}")


def test_health_and_readiness(operated: Proxy, start_proxy: Callable[..., Proxy], tmp_path: Path) -> None:
    assert http_get(operated, "/healthz") == (200, "ok\n")
    wait_for_metric(operated, 'runtimeproxy_backend_reachable{role="runtime"} 1.0')  # connected by now
    assert http_get(operated, "/readyz") == (200, "ok\n")
    assert http_get(operated, "/nope")[0] == 404
    no_backend = start_proxy(runtime_path=tmp_path / "absent.sock", metrics_address="127.0.0.1:0")
    status, text = http_get(no_backend, "/readyz")
    assert status == 503 and "absent.sock unreachable" in text
    assert http_get(no_backend, "/healthz")[0] == 200


def test_garbage_and_half_requests_do_not_hurt_the_endpoint(operated: Proxy) -> None:
    assert operated.operator is not None and operated.operator.http is not None
    port = operated.operator.http.bound_port
    for payload in (b"\x00\x01garbage\r\n\r\n", b"GET /metrics HTTP/1.1\r\n", b"POST /metrics HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(payload)
            connection.shutdown(socket.SHUT_WR)
            connection.recv(4096)
    assert http_get(operated, "/healthz")[0] == 200


def test_bind_addresses() -> None:
    assert parse_bind_address("127.0.0.1:9318") == ("127.0.0.1", 9318)
    assert parse_bind_address("[::1]:9318") == ("::1", 9318)
    assert parse_bind_address(":9318") == ("0.0.0.0", 9318)


def test_failed_calls_are_counted_with_their_code(start_proxy: Callable[..., Proxy], tmp_path: Path) -> None:
    proxy = start_proxy(runtime_path=tmp_path / "absent.sock", metrics_address="127.0.0.1:0")
    with open_channel(proxy.options.listen_path) as channel:
        try:
            channel.unary_unary(VERSION)(b"", timeout=5)
        except grpc.RpcError as error:
            assert error.code() is grpc.StatusCode.UNAVAILABLE
    _, text = http_get(proxy, "/metrics")
    assert 'runtimeproxy_cri_calls_total{code="UNAVAILABLE",method="Version",service="runtime.v1.RuntimeService"} 1.0' in text
    assert 'runtimeproxy_backend_reachable{role="runtime"} 0.0' in text


def test_streams_are_counted_when_they_end(operated: Proxy) -> None:
    with open_channel(operated.options.listen_path) as channel:
        events = channel.unary_stream("/runtime.v1.RuntimeService/GetContainerEvents")(
            b"", timeout=10, metadata=((EVENT_COUNT_KEY, "3"),))
        assert len(list(events)) == 3
    _, text = http_get(operated, "/metrics")
    assert ('runtimeproxy_cri_calls_total{code="OK",method="GetContainerEvents",service="runtime.v1.RuntimeService"} 1.0'
            in text)


def _health_views(proxy: Proxy, channel: grpc.Channel) -> tuple[str, int, bool]:
    """(gRPC health, /readyz status, backend_reachable is 1) of one proxy."""
    checked = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    _, text = http_get(proxy, "/metrics")
    reachable = 'runtimeproxy_backend_reachable{role="runtime"} 1.0' in text
    return health_pb2.HealthCheckResponse.ServingStatus.Name(checked.status), http_get(proxy, "/readyz")[0], reachable


def _wait_for_views(proxy: Proxy, channel: grpc.Channel, expected: tuple[str, int, bool]) -> None:
    deadline = time.monotonic() + 30
    while (views := _health_views(proxy, channel)) != expected:
        assert time.monotonic() < deadline, f"health, /readyz, metric: {views}, never {expected}"
        time.sleep(0.05)


def test_readiness_and_the_metric_follow_grpc_health_when_the_backend_freezes(
    start_proxy: Callable[..., Proxy], synthetic_process: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    path, backend = synthetic_process
    proxy = start_proxy(runtime_path=path, metrics_address="127.0.0.1:0")
    with open_channel(proxy.options.listen_path) as channel:
        _wait_for_views(proxy, channel, ("SERVING", 200, True))
        backend.send_signal(signal.SIGSTOP)  # connected, but nothing answers the probe
        try:
            _wait_for_views(proxy, channel, ("NOT_SERVING", 503, False))
            assert "connected but not answering" in http_get(proxy, "/readyz")[1]
        finally:
            backend.send_signal(signal.SIGCONT)
        _wait_for_views(proxy, channel, ("SERVING", 200, True))
