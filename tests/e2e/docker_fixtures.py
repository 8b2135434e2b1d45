"""Session fixtures for Docker mode: a private dockerd with the lab images, the proxy in Docker mode in
front of it, and cri-dockerd (the kubelet's side) in front of the proxy (imported by conftest.py); and
`Docker`, the docker CLI against one socket."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rplab.docker_images import build_docker_archives
from rplab.dockerd import (
    CriDockerd,
    DockerdInstance,
    DockerModeProxy,
    check_docker_prerequisites,
)
from rplab.images import PAUSE_IMAGE
from rplab.runtimes import selected

from tests.kits.machine import IMAGE_CACHE, require_tool, skip_or_fail

Crictl = Callable[..., str]


class Docker:
    """The docker CLI of the selected dockerd's package set (rplab.runtimes) against one socket."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.cli = selected("dockerd").binary("docker")

    def argv(self, *args: str) -> list[str]:
        return [str(self.cli), "-H", f"unix://{self.socket}", *args]

    def run(self, *args: str, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=120, input=input_text)
        if check:
            assert result.returncode == 0, f"docker {' '.join(args)} via {self.socket}: {result.stderr}"
        return result

    def out(self, *args: str, input_text: str | None = None) -> str:
        return self.run(*args, input_text=input_text).stdout


@pytest.fixture(scope="session")
def dockerd(workdir: Path) -> Iterator[DockerdInstance]:
    reason = check_docker_prerequisites()
    if reason:
        skip_or_fail(f"cannot run the Docker-mode e2e tests: {reason}")
    instance = DockerdInstance(workdir / "dk")
    instance.start()
    try:
        instance.load_images(build_docker_archives(IMAGE_CACHE))
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def docker_mode_proxy(dockerd: DockerdInstance, workdir: Path) -> Iterator[DockerModeProxy]:
    proxy = DockerModeProxy(workdir / "dkproxy" / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    proxy.start()
    yield proxy
    assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="session")
def cri_dockerd(docker_mode_proxy: DockerModeProxy, crictl_binary: Path, workdir: Path) -> Iterator[Crictl]:
    """crictl → cri-dockerd → proxy → dockerd; yields crictl(*args) -> stdout."""
    server = CriDockerd(require_tool("cri-dockerd"), workdir / "cridk", docker_mode_proxy.listen_path, PAUSE_IMAGE)

    def crictl(*args: str, input_text: str | None = None) -> str:
        endpoint = f"unix://{server.socket}"
        result = subprocess.run(
            [str(crictl_binary), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
             "--timeout", "30s", *args],
            capture_output=True, text=True, timeout=120, input=input_text,
        )
        assert result.returncode == 0, f"crictl {' '.join(args)}: {result.stderr}\n{server.log_tail()}"
        return result.stdout

    server.start(ready=lambda: _answers(crictl))
    yield crictl
    server.stop()


def _answers(crictl: Crictl) -> bool:
    try:
        crictl("version")
    except AssertionError:
        return False
    return True


@pytest.fixture
def both(dockerd: DockerdInstance, docker_mode_proxy: DockerModeProxy) -> Iterator[list[Docker]]:
    """[through the proxy, direct]; containers named by the test are removed afterwards."""
    clients = [Docker(docker_mode_proxy.listen_path), Docker(dockerd.socket)]
    yield clients
    stale = dockerd.docker("ps", "-aq", "--filter", "label=rp-test", check=False).stdout.decode().split()
    if stale:
        dockerd.docker("rm", "-f", *stale, check=False)
