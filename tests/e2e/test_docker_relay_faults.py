"""Faults of the Docker relay reproduced against a real dockerd (issue 17): framing headers, deep JSON on a
hooked route, a client hanging up during a plugin call, memory after aborted uploads.

Real parts: a private dockerd, the proxy process, an in-process plugin (hookkit.ScriptedPlugin).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.kits.hooks import ScriptedPlugin, register
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.loop import LoopThread

from docker_fixtures import Docker

WAIT_SECONDS = 60.0  # a generous bound for conditions; never a timing assertion
MIB = 1024 * 1024


def _answer(socket_path: Path, request: bytes) -> tuple[int, bytes]:
    """One raw request on a fresh connection; the status and the raw rest (head and body)."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(WAIT_SECONDS)
        connection.connect(str(socket_path))
        connection.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not _complete(data):
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n")


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS}s: {what}"
        time.sleep(0.1)


@pytest.fixture
def volumes(dockerd: DockerdInstance) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        dockerd.docker("volume", "rm", "-f", name, check=False)


@pytest.mark.parametrize("framing", [
    b"Connection: Content-Length\r\nContent-Length: %d\r\n\r\n%s",
    b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
], ids=["connection-names-content-length", "content-length-and-chunked"])
def test_framing_headers_reach_dockerd_as_direct(both: list[Docker], volumes: list[str], framing: bytes) -> None:
    results = []
    for docker in both:
        name = f"rp-vol-{uuid.uuid4().hex[:8]}"
        volumes.append(name)
        body = json.dumps({"Name": name, "Labels": {"rp-test": "1"}}).encode()
        status, answer = _answer(docker.socket, b"POST /v1.41/volumes/create HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\n"
                                 + framing % (len(body), body))
        results.append((status, name.encode() in answer))
    assert results[0] == results[1] == (201, True)


def test_json_nested_deeper_than_hooks_read_is_relayed_untouched(both: list[Docker]) -> None:
    depth = 5_000  # dockerd (Go) reads up to 10,000
    results = []
    for docker in both:
        name = f"rp-deep-{uuid.uuid4().hex[:8]}"
        body = (b'{"Image":"%s","Labels":{"rp-test":"1"},"X":' % BUSYBOX_IMAGE.encode()
                + b"[" * depth + b"]" * depth + b"}")
        status, answer = _answer(docker.socket, b"POST /v1.41/containers/create?name=%s HTTP/1.1\r\nHost: d\r\n"
                                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (name.encode(), len(body), body))
        results.append((status, b'"Id"' in answer))
    assert results[0] == results[1] == (201, True)


class HeldSandboxPlugin(ScriptedPlugin):
    """PreRunPodSandbox waits until the proxy cancels the call."""

    def __init__(self) -> None:
        super().__init__({"PreRunPodSandbox": self._hold})
        self.called = asyncio.Event()
        self.cancelled = False

    async def _hold(self, request: object, context: grpc.aio.ServicerContext) -> object:
        self.called.set()
        try:
            await asyncio.sleep(WAIT_SECONDS)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return None


def test_a_client_hanging_up_during_a_plugin_call_creates_nothing(dockerd: DockerdInstance, tmp_path: Path) -> None:
    loop = LoopThread()
    plugin = HeldSandboxPlugin()
    loop.run(plugin.start(tmp_path / "plugin.sock"))
    proxy = DockerModeProxy(tmp_path / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    register(proxy.hook_config_dir, "10-held.json", tmp_path / "plugin.sock", ["PreRunPodSandbox"], timeout=300)
    proxy.start()
    name = f"k8s_POD_web_ns_{uuid.uuid4().hex[:8]}_0"
    try:
        body = json.dumps({"Image": PAUSE_IMAGE, "Labels": {"io.kubernetes.docker.type": "podsandbox",
                                                            "io.kubernetes.container.name": "POD", "rp-test": "1"}})
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(proxy.listen_path))
            client.sendall(b"POST /v1.41/containers/create?name=%s HTTP/1.1\r\nHost: d\r\nContent-Length: %d\r\n\r\n%s"
                           % (name.encode(), len(body), body.encode()))
            _wait_for(plugin.called.is_set, "the plugin is called")
        _wait_for(lambda: plugin.cancelled, "the plugin call is cancelled")
        _wait_for(lambda: "nothing sent to dockerd" in proxy.log_path.read_text(), "the proxy abandons the call")
        assert dockerd.docker("ps", "-aq", "--filter", f"name={name}").stdout.strip() == b""
    finally:
        proxy.stop()
        loop.run(plugin.stop())
        loop.close()
        dockerd.docker("rm", "-f", name, check=False)


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_memory_returns_near_idle_after_aborted_hooked_uploads(dockerd: DockerdInstance, tmp_path: Path) -> None:
    proxy = DockerModeProxy(tmp_path / "rp.sock", dockerd.socket)
    proxy.start()
    assert proxy.pid is not None
    try:
        idle = _rss_bytes(proxy.pid)
        for _ in range(50):
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(proxy.listen_path))
                client.sendall(b"POST /v1.41/containers/create?name=k8s_POD_p_ns_u_0 HTTP/1.1\r\nHost: d\r\n"
                               b"Content-Length: %d\r\n\r\n" % (16 * MIB))
                for _ in range(15):
                    client.sendall(b"x" * MIB)
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # abort: RST
        bound = idle + 48 * MIB
        _wait_for(lambda: _rss_bytes(proxy.pid) <= bound,  # type: ignore[arg-type]
                  f"RSS back within 48 MiB of idle ({idle // MIB} MiB)")
    finally:
        proxy.stop()
