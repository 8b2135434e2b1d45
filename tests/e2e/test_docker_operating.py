"""Docker mode is not dark: request metrics by route and status, and `runtimeproxyctl status` naming dockerd's
version, with the real dockerd and the docker CLI (Debian's docker.io) through the proxy."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rplab.dockerd import DockerdInstance, DockerModeProxy

from docker_fixtures import Docker
from tests.kits.machine import refused_dials
from test_operating import free_port, status as proxy_status


@pytest.fixture
def metered_proxy(dockerd: DockerdInstance, workdir: Path) -> Iterator[tuple[DockerModeProxy, int]]:
    port = free_port()
    proxy = DockerModeProxy(workdir / "dkmetered" / "rp.sock", dockerd.socket,
                            extra_args=[f"--metrics-bind-address=127.0.0.1:{port}"])
    proxy.start()
    yield proxy, port
    assert proxy.stop() == 0, proxy.log_tail()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def test_requests_are_counted_by_route_and_status(metered_proxy: tuple[DockerModeProxy, int]) -> None:
    proxy, port = metered_proxy
    docker = Docker(proxy.listen_path)
    docker.out("version")
    docker.out("ps", "-a")
    assert docker.run("inspect", "no-such-container", check=False).returncode != 0
    text = scrape(port)
    assert 'runtimeproxy_docker_requests_total{route="GET /containers/json",status="200"} 1.0' in text
    assert 'runtimeproxy_docker_requests_total{route="GET /containers/{id}/json",status="404"}' in text
    assert 'runtimeproxy_docker_request_duration_seconds_count{route="GET /containers/json"} 1.0' in text
    assert "no-such-container" not in text  # IDs and names never become labels
    assert "runtimeproxy_cri_calls_total{" not in text  # no CRI series in Docker mode


def test_status_names_dockerds_version(metered_proxy: tuple[DockerModeProxy, int], dockerd: DockerdInstance) -> None:
    proxy, _ = metered_proxy
    server = json.loads(Docker(dockerd.socket).out("version", "--format", "{{json .Server}}"))
    status = proxy_status(proxy)
    assert (status["listen_endpoint"], status["backend_mode"], status["admin_endpoint"]) == \
        (str(proxy.listen_path), "Docker", str(proxy.admin_path))
    assert status["state_dir"] == str(proxy.listen_path.parent / "state")
    assert status["metrics_address"].startswith("127.0.0.1:")
    (backend,) = status["backends"]
    assert backend["runtime_name"] == "docker" and backend["reachable"] is True
    assert backend["runtime_version"] == f"{server['Version']} (API {server['ApiVersion']})"


def test_a_burst_of_300_dials_is_queued_on_every_socket(dockerd: DockerdInstance, workdir: Path) -> None:
    """dockerd listens with the kernel's backlog (somaxconn); so does the proxy on each of its sockets (before:
    asyncio's 100 on the Docker and NRI sockets, and 119-157 of 300 dials failed with EAGAIN, which Go clients
    such as cri-dockerd report as `connect: resource temporarily unavailable`)."""
    base = workdir / "dkburst"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=[f"--nri-socket={base / 'nri.sock'}"])
    proxy.start()
    try:
        for socket_path in (proxy.listen_path, base / "nri.sock", proxy.admin_path, dockerd.socket):
            assert refused_dials(socket_path, 300) == 0, socket_path
    finally:
        assert proxy.stop() == 0, proxy.log_tail()
