"""A real containerd (private root, own sockets, offline images) and the proxy in front of it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from runtimeproxy.lab.containerd import ContainerdInstance, check_prerequisites
from runtimeproxy.lab.cri import CriClient, open_channel
from runtimeproxy.lab.images import build_and_import
from runtimeproxy.lab.process import ProxyProcess

from docker_fixtures import cri_dockerd, crictl_binary, docker_mode_proxy, dockerd  # noqa: F401

IMAGE_CACHE = Path(os.environ.get("RUNTIMEPROXY_IMAGE_CACHE", Path.home() / ".cache" / "runtimeproxy" / "images"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


def _require_lab() -> None:
    reason = check_prerequisites()
    if reason is None:
        return
    if os.environ.get("RUNTIMEPROXY_REQUIRE_E2E"):
        pytest.fail(f"cannot run the e2e suite: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    # Short, because unix socket paths are limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="rp-e2e-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def containerd(workdir: Path) -> Iterator[ContainerdInstance]:
    _require_lab()
    instance = ContainerdInstance(workdir / "ctd")
    instance.start()
    try:
        build_and_import(instance.address, IMAGE_CACHE)
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def proxy_process(containerd: ContainerdInstance, workdir: Path) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(workdir / "proxy" / "rp.sock", containerd.address, extra_args=["--log-level=debug"])
    proxy.start()
    yield proxy
    assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="session")
def direct_channel(containerd: ContainerdInstance) -> Iterator[grpc.Channel]:
    channel = open_channel(containerd.address)
    yield channel
    channel.close()


@pytest.fixture(scope="session")
def proxied_channel(proxy_process: ProxyProcess) -> Iterator[grpc.Channel]:
    channel = open_channel(proxy_process.listen_path)
    yield channel
    channel.close()


@pytest.fixture(params=["v1", "v1alpha2"])
def api_version(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def proxied(proxied_channel: grpc.Channel, api_version: str) -> CriClient:
    return CriClient(proxied_channel, api_version)


@pytest.fixture
def direct(direct_channel: grpc.Channel, api_version: str) -> CriClient:
    return CriClient(direct_channel, api_version)


@pytest.fixture
def log_dir(workdir: Path, request: pytest.FixtureRequest) -> Path:
    path = workdir / "logs" / request.node.name.replace("/", "_")[:60]
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def cleanup_pods(direct_channel: grpc.Channel) -> Iterator[list[str]]:
    """Pods a test registers here are stopped and removed (directly) whatever the test's outcome."""
    pods: list[str] = []
    yield pods
    client = CriClient(direct_channel)
    for pod_id in pods:
        for step in (client.stop_pod, client.remove_pod):
            try:
                step(pod_id)
            except grpc.RpcError:
                pass
