"""A private image registry on 127.0.0.1 and the containerd mirror config that points pulls at it.

The registry is Debian's ``docker-registry`` (docker/distribution), started with its own config, storage
directory and a free port. Images are pushed with the plain registry HTTP API (blob uploads, then the
manifest under each tag), so nothing but the standard library is needed. containerd finds it through a
``certs.d`` directory with one ``hosts.toml`` per upstream host: both ``server`` and the ``[host]`` entry name
the local registry, so a missing image is an error and never a trip to the internet.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from rplab.images import MEDIA_MANIFEST, ImageBlobs, sha256_digest
from rplab.process import end_process

REGISTRY_HOST = "127.0.0.1"
REGISTRY_START_TIMEOUT_SECONDS = 20.0
HTTP_TIMEOUT_SECONDS = 30.0
# What `docker push` (dockerd 20.10) uploads; asked for so the registry answers that manifest's digest.
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


class RegistryError(RuntimeError):
    """The local registry failed to start or refused a push."""


def free_port(host: str = REGISTRY_HOST) -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def registry_config(storage: Path, port: int) -> str:
    """docker-registry config: filesystem storage in ``storage``, HTTP on 127.0.0.1:``port``, no auth."""
    return json.dumps({  # YAML is a superset of JSON
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"{REGISTRY_HOST}:{port}"},
    }, indent=2)


def write_mirror_config(certs_dir: Path, hosts: Iterable[str], mirror: str) -> Path:
    """containerd ``config_path`` directory sending every pull from ``hosts`` to ``mirror`` (http://host:port)."""
    for host in hosts:
        directory = certs_dir / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "{mirror}"\n\n[host."{mirror}"]\n  capabilities = ["pull", "resolve"]\n')
    return certs_dir


class LocalRegistry:
    """docker-registry rooted at ``base_dir``; a context manager. ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{REGISTRY_HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "registry.log"

    def start(self) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RegistryError("docker-registry not found (apt-get install -y docker-registry)")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.base_dir / "config.yml"
        config.write_text(registry_config(self.base_dir / "storage", self.port))
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen([binary, "serve", str(config)], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + REGISTRY_START_TIMEOUT_SECONDS
        while True:
            if self._proc.poll() is not None:
                raise RegistryError(f"docker-registry exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                if self._request("GET", "/v2/")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RegistryError(f"docker-registry not answering on {self.url}: {self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            end_process(proc, 10)

    def __enter__(self) -> LocalRegistry:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no registry log)"

    # -- the registry HTTP API -----------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: bytes = b"",
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(REGISTRY_HOST, self.port, timeout=HTTP_TIMEOUT_SECONDS)
        try:
            conn.request(method, path, body=body or None, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def push_blob(self, repository: str, data: bytes) -> None:
        digest = sha256_digest(data)
        if self._request("HEAD", f"/v2/{repository}/blobs/{digest}")[0] == 200:
            return
        status, headers, body = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        if status != 202:
            raise RegistryError(f"upload to {repository} refused: {status} {body[:200]!r}")
        location = headers["Location"]
        path = location.split(self.url, 1)[-1] if location.startswith("http") else location
        separator = "&" if "?" in path else "?"
        status, _, body = self._request("PUT", f"{path}{separator}digest={digest}", data,
                                        {"Content-Type": "application/octet-stream"})
        if status != 201:
            raise RegistryError(f"blob {digest} to {repository}: {status} {body[:200]!r}")

    def push(self, repository: str, tags: Iterable[str], image: ImageBlobs) -> None:
        """Upload the image's blobs (skipping those already there) and its manifest under every tag."""
        for blob in (*image.layers, image.config):
            self.push_blob(repository, blob)
        for tag in tags:
            status, _, body = self._request("PUT", f"/v2/{repository}/manifests/{tag}", image.manifest,
                                            {"Content-Type": MEDIA_MANIFEST})
            if status != 201:
                raise RegistryError(f"manifest {repository}:{tag}: {status} {body[:200]!r}")

    def manifest_digest(self, repository: str, tag: str) -> str | None:
        """The digest the registry has for ``repository:tag`` (Docker's or OCI's manifest), None if unknown."""
        status, headers, _ = self._request("HEAD", f"/v2/{repository}/manifests/{tag}",
                                           headers={"Accept": f"{MEDIA_DOCKER_MANIFEST}, {MEDIA_MANIFEST}"})
        return headers.get("Docker-Content-Digest") if status == 200 else None
