"""The proxy's settings, as parsed from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROXY_SOCKET = Path("/var/run/koord-runtimeproxy/runtimeproxy.sock")
DEFAULT_RUNTIME_SOCKET = Path("/var/run/containerd/containerd.sock")
DEFAULT_DOCKER_SOCKET = Path("/var/run/docker.sock")  # the backend in --backend-runtime-mode=Docker
DEFAULT_HOOK_CONFIG_DIR = Path("/etc/runtime/hookserver.d")
DEFAULT_SKIP_LABEL_KEY = "runtimeproxy.koordinator.sh/skip-hookserver"
DEFAULT_SKIP_LABEL_VALUE = "true"
# kubelet caps CRI messages at 16 MiB; big nodes exceed that, so allow far more.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ProxyOptions:
    listen_path: Path = DEFAULT_PROXY_SOCKET
    runtime_path: Path = DEFAULT_RUNTIME_SOCKET
    # None: images are served by the runtime endpoint.
    image_path: Path | None = None
    backend_mode: str = "Containerd"
    hook_config_dir: Path = DEFAULT_HOOK_CONFIG_DIR
    # Owners trusted for plugin configs and sockets besides root and the proxy's own user.
    hook_config_trusted_uids: frozenset[int] = frozenset()
    skip_label_key: str = DEFAULT_SKIP_LABEL_KEY
    skip_label_value: str = DEFAULT_SKIP_LABEL_VALUE
    shutdown_grace_seconds: float = 5.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # Benchmark only: decode and re-encode every message (the design the fast path replaces).
    decode_all: bool = False

    @property
    def effective_image_path(self) -> Path:
        return self.image_path or self.runtime_path
