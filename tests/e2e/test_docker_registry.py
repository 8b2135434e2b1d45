"""`docker push` and `docker pull` through the proxy in Docker mode, against a private registry on 127.0.0.1.

Real parts: a private dockerd (Debian's docker.io, which treats 127.0.0.0/8 registries as insecure, so plain
HTTP), Debian's docker-registry, the proxy process, the docker CLI. The image is made for this module
(`docker import` of a one-file layer) so that a pull really downloads a layer. One piece of fault
injection: a TCP gate in front of the registry that can hold blob downloads, so a pull is provably
unfinished while its first progress lines are read.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from rplab.dockerd import DockerdInstance, DockerModeProxy, UnixHTTPConnection
from rplab.images import FileEntry, layer_tar
from rplab.registry import REGISTRY_HOST, LocalRegistry

from docker_fixtures import Docker

REPOSITORY = "lab/imported"
TAG = "v1"
API_VERSION = "v1.41"  # dockerd 20.10
STREAM_WAIT_SECONDS = 30.0
GATE_HOLD_SECONDS = 2 * STREAM_WAIT_SECONDS  # longer than a client read: a buffering proxy times the client out
READ_CHUNK_BYTES = 65536


class BlobGate:
    """A TCP relay to the registry that, once `hold()` is called, holds every blob request until `open()`."""

    def __init__(self, registry_port: int) -> None:
        self._registry = (REGISTRY_HOST, registry_port)
        self._listener = socket.create_server((REGISTRY_HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        self._holding = False
        self._opened = threading.Event()
        self._held_now = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self._opened.clear()
        self._holding = True

    def open(self) -> None:
        self._holding = False
        self._opened.set()

    def wait_until_a_blob_is_held(self) -> None:
        deadline = time.monotonic() + STREAM_WAIT_SECONDS
        while self._held_now == 0:
            assert time.monotonic() < deadline, "dockerd never asked the registry for a blob"
            time.sleep(0.02)

    def close(self) -> None:
        self.open()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                registry = socket.create_connection(self._registry)
            except OSError:
                return
            self._sockets += [client, registry]
            threading.Thread(target=self._pump, args=(client, registry, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(registry, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(READ_CHUNK_BYTES):
                if requests and self._holding and b"/blobs/sha256:" in data:
                    self._held_now += 1
                    self._opened.wait(GATE_HOLD_SECONDS)
                    self._held_now -= 1
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture(scope="module")
def registry(workdir: Path) -> Iterator[LocalRegistry]:
    with LocalRegistry(workdir / "dkreg") as started:
        yield started


@pytest.fixture(scope="module")
def gate(registry: LocalRegistry) -> Iterator[BlobGate]:
    relay = BlobGate(registry.port)
    yield relay
    relay.close()


@pytest.fixture(scope="module")
def pushed(dockerd: DockerdInstance, docker_mode_proxy: DockerModeProxy, gate: BlobGate,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's image, imported and pushed through the proxy; its reference (registry host = the gate)."""
    ref = f"{REGISTRY_HOST}:{gate.port}/{REPOSITORY}:{TAG}"
    archive = tmp_path_factory.mktemp("layer") / "layer.tar"
    archive.write_bytes(layer_tar([FileEntry("hello.txt", 0o644, b"pulled through runtimeproxy\n")]))
    proxied = Docker(docker_mode_proxy.listen_path)
    proxied.out("import", str(archive), ref)  # a streamed upload of the layer tar
    proxied.out("push", ref)  # X-Registry-Auth up, streamed progress down; dockerd itself uploads the layer
    yield ref
    dockerd.docker("rmi", "-f", ref, check=False)


def _forget(docker: Docker, ref: str) -> None:
    """Remove the image (its only layer too), so the next pull downloads it."""
    docker.run("rmi", "-f", ref, check=False)
    assert docker.run("image", "inspect", ref, check=False).returncode != 0


def test_push_and_pull_through_the_proxy(both: list[Docker], pushed: str, registry: LocalRegistry) -> None:
    proxied, direct = both
    digest = registry.manifest_digest(REPOSITORY, TAG)
    assert digest and digest.startswith("sha256:")
    _forget(proxied, pushed)
    pulled = proxied.out("pull", pushed)
    assert f"Digest: {digest}\n" in pulled and f"Status: Downloaded newer image for {pushed}\n" in pulled
    listed = proxied.out("images", "--digests", "--format", "{{.Repository}}:{{.Tag}} {{.Digest}}").splitlines()
    assert f"{pushed} {digest}" in listed
    repository = pushed.rsplit(":", 1)[0]
    inspected = [json.loads(docker.out("image", "inspect", pushed)) for docker in both]
    assert inspected[0] == inspected[1] and inspected[0][0]["RepoDigests"] == [f"{repository}@{digest}"]


def _status_line(response: http.client.HTTPResponse) -> str:
    """The next progress message's status ("" at the end of the stream)."""
    try:
        line = response.readline()
    except TimeoutError:
        pytest.fail(f"no progress line within {STREAM_WAIT_SECONDS:.0f}s: the pull's answer is held back")
    return str(json.loads(line).get("status", "")) if line.strip() else ""


def test_pull_progress_reaches_the_client_while_the_pull_runs(
    both: list[Docker], docker_mode_proxy: DockerModeProxy, pushed: str, gate: BlobGate, registry: LocalRegistry,
) -> None:
    proxied, _ = both
    _forget(proxied, pushed)
    image, tag = pushed.rsplit(":", 1)
    auth = base64.urlsafe_b64encode(b"{}").decode()  # what the CLI sends without a login
    connection = UnixHTTPConnection(docker_mode_proxy.listen_path, STREAM_WAIT_SECONDS)
    gate.hold()
    try:
        connection.request("POST", f"/{API_VERSION}/images/create?fromImage={urllib.parse.quote(image, safe='')}"
                                    f"&tag={tag}", headers={"X-Registry-Auth": auth})
        response = connection.getresponse()
        assert response.status == 200
        gate.wait_until_a_blob_is_held()
        # dockerd cannot finish while the gate holds its download: these lines were streamed, not buffered
        early = [_status_line(response)]
        while early[-1] not in ("Pulling fs layer", ""):
            early.append(_status_line(response))
        assert early[0] == f"Pulling from {REPOSITORY}" and early[-1] == "Pulling fs layer"
        gate.open()
        rest = [_status_line(response)]
        while rest[-1]:
            rest.append(_status_line(response))
    finally:
        gate.open()
        connection.close()
    assert rest[-3:] == [f"Digest: {registry.manifest_digest(REPOSITORY, TAG)}",
                         f"Status: Downloaded newer image for {pushed}", ""]
    assert "Pull complete" in rest


def test_pull_of_a_missing_tag_is_dockers_own_error(both: list[Docker], pushed: str) -> None:
    missing = pushed.rsplit(":", 1)[0] + ":absent"
    proxied, direct = (docker.run("pull", missing, check=False) for docker in both)
    assert proxied.returncode == direct.returncode != 0
    assert proxied.stderr == direct.stderr
    assert f"manifest for {missing} not found: manifest unknown" in proxied.stderr
