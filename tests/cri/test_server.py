"""The proxy as a server: routing, health, reflection, backend outages and shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rplab.burst import burst
from rplab.cri import open_channel
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend
from runtimeproxy.activation import InheritedSockets, PassedSocket
from runtimeproxy.app import Proxy
from runtimeproxy.options import ProxyOptions

VERSION = "/runtime.v1.RuntimeService/Version"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health_of(channel: grpc.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def wait_for_health(channel: grpc.Channel, expected: int, service: str = "", timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while health_of(channel, service) != expected:
        assert time.monotonic() < deadline, f"health of {service!r} never became {expected}"
        time.sleep(0.05)


def test_reflection_lists_cri_and_health(client: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(client)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    names = {service.name for service in response.list_services_response.service}
    assert {
        "runtime.v1.RuntimeService", "runtime.v1.ImageService",
        "runtime.v1alpha2.RuntimeService", "runtime.v1alpha2.ImageService",
        "grpc.health.v1.Health",
    } <= names


def test_reflection_serves_the_cri_file_descriptor(client: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(client)
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="runtime.v1.RuntimeService")
    (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    assert response.file_descriptor_response.file_descriptor_proto


def test_health_follows_the_backend(
    loop_thread: LoopThread, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    backend = SyntheticBackend(tmp_path / "late.sock")
    proxy = start_proxy(runtime_path=backend.path)
    with open_channel(proxy.options.listen_path) as channel:
        wait_for_health(channel, NOT_SERVING)
        loop_thread.run(backend.start())
        try:
            wait_for_health(channel, SERVING)
            wait_for_health(channel, SERVING, "runtime.v1.RuntimeService")
        finally:
            loop_thread.run(backend.stop(0))
        wait_for_health(channel, NOT_SERVING)


def test_backend_down_then_up_without_a_proxy_restart(
    loop_thread: LoopThread, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    backend = SyntheticBackend(tmp_path / "late.sock")
    proxy = start_proxy(runtime_path=backend.path)
    with open_channel(proxy.options.listen_path) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            channel.unary_unary(VERSION)(b"", timeout=5)
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
        assert str(backend.path) in raised.value.details()
        loop_thread.run(backend.start())
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    assert channel.unary_unary(VERSION)(b"up", timeout=5) == b"up"
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline, "the proxy did not recover"
                    time.sleep(0.1)
        finally:
            loop_thread.run(backend.stop(0))


def test_health_turns_not_serving_while_a_connected_backend_is_frozen(
    start_proxy: Callable[..., Proxy], synthetic_process: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    path, backend = synthetic_process
    proxy = start_proxy(runtime_path=path)
    with open_channel(proxy.options.listen_path) as channel:
        wait_for_health(channel, SERVING, timeout=30)
        backend.send_signal(signal.SIGSTOP)  # the connection stays up; nothing answers
        try:
            wait_for_health(channel, NOT_SERVING, timeout=30)
            wait_for_health(channel, NOT_SERVING, "runtime.v1.RuntimeService")
        finally:
            backend.send_signal(signal.SIGCONT)
        wait_for_health(channel, SERVING, timeout=30)
        wait_for_health(channel, SERVING, "runtime.v1.ImageService")


def test_image_calls_go_to_the_image_endpoint(
    loop_thread: LoopThread, start_proxy: Callable[..., Proxy], tmp_path: Path, synthetic: SyntheticBackend
) -> None:
    images = SyntheticBackend(tmp_path / "images.sock")
    loop_thread.run(images.start())
    try:
        proxy = start_proxy(runtime_path=synthetic.path, image_path=images.path)
        with open_channel(proxy.options.listen_path) as channel:
            channel.unary_unary(LIST_IMAGES)(b"img", timeout=5)
            channel.unary_unary(VERSION)(b"rt", timeout=5)
        assert [call.path for call in images.calls] == [LIST_IMAGES]
        assert synthetic.calls_to(VERSION) and not synthetic.calls_to(LIST_IMAGES)
    finally:
        loop_thread.run(images.stop(0))


def test_stop_lets_in_flight_calls_finish_and_removes_the_socket(
    loop_thread: LoopThread, proxy: Proxy, synthetic: SyntheticBackend
) -> None:
    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(0.5)
        return b"done"

    synthetic.unary[VERSION] = slow
    path = proxy.options.listen_path
    with open_channel(path) as channel:
        future = channel.unary_unary(VERSION).future(b"", timeout=10)
        time.sleep(0.1)
        stopper = threading.Thread(target=loop_thread.run, args=(proxy.stop(5),))
        stopper.start()
        assert future.result() == b"done"
        stopper.join(10)
    assert not path.exists()


def test_under_socket_activation_stop_finishes_calls_in_flight_and_leaves_new_ones_to_the_next_proxy(
    loop_thread: LoopThread, synthetic: SyntheticBackend, tmp_path: Path
) -> None:
    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(0.5)
        return request

    synthetic.unary[VERSION] = slow
    path = tmp_path / "rp.sock"
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # systemd's copy, outliving both proxies
    held.bind(str(path))
    os.chmod(path, 0o660)
    held.listen()
    options = ProxyOptions(listen_path=path, runtime_path=synthetic.path, hook_config_dir=tmp_path / "hooks")

    def proxy_on_the_held_socket() -> Proxy:
        proxy = Proxy(options, inherited=InheritedSockets([PassedSocket(os.dup(held.fileno()), "cri")]))
        loop_thread.run(proxy.start())
        return proxy

    old = proxy_on_the_held_socket()
    try:
        with open_channel(path) as channel:
            in_flight = channel.unary_unary(VERSION).future(b"in flight", timeout=10)
            time.sleep(0.1)
            stopper = threading.Thread(target=loop_thread.run, args=(old.stop(5),))
            stopper.start()
            time.sleep(0.1)
            with open_channel(path) as during_the_stop:
                made_meanwhile = during_the_stop.unary_unary(VERSION).future(b"meanwhile", timeout=10)
                assert in_flight.result() == b"in flight"
                stopper.join(10)
                new = proxy_on_the_held_socket()
                assert made_meanwhile.result() == b"meanwhile"  # waited in the backlog, not refused
        loop_thread.run(new.stop(0))
        assert path.exists()  # systemd's: never removed
    finally:
        held.close()


def test_stop_cancels_calls_that_outlive_the_grace_period(
    loop_thread: LoopThread, proxy: Proxy, synthetic: SyntheticBackend
) -> None:
    async def hang(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(60)
        return b""

    synthetic.unary[VERSION] = hang
    with open_channel(proxy.options.listen_path) as channel:
        future = channel.unary_unary(VERSION).future(b"", timeout=30)
        time.sleep(0.1)
        started = time.monotonic()
        loop_thread.run(proxy.stop(0.3))
        assert time.monotonic() - started < 5
        with pytest.raises(grpc.RpcError):
            future.result(timeout=5)
    assert synthetic.cancel_seen.wait(5)


def test_a_burst_of_2000_concurrent_calls_is_served_without_a_cancel(proxy: Proxy) -> None:
    assert burst(proxy.options.listen_path, calls=2000) == {("OK", ""): 2000}


def test_calls_beyond_the_concurrency_bound_get_resource_exhausted_not_cancelled(
    start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend
) -> None:
    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(1)
        return b""

    synthetic.unary[VERSION] = slow
    proxy = start_proxy(runtime_path=synthetic.path, max_concurrent_calls=4)
    tally = burst(proxy.options.listen_path, calls=12)
    assert tally[("OK", "")] >= 4
    assert set(tally) == {("OK", ""), ("RESOURCE_EXHAUSTED", "Concurrent RPC limit exceeded!")}, tally
