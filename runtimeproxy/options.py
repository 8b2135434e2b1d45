"""The proxy's settings, as parsed from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

DEFAULT_PROXY_SOCKET = Path("/var/run/koord-runtimeproxy/runtimeproxy.sock")
DEFAULT_RUNTIME_SOCKET = Path("/var/run/containerd/containerd.sock")
DEFAULT_DOCKER_SOCKET = Path("/var/run/docker.sock")  # the backend in --backend-runtime-mode=Docker
DEFAULT_HOOK_CONFIG_DIR = Path("/etc/runtime/hookserver.d")
DEFAULT_SKIP_LABEL_KEY = "runtimeproxy.koordinator.sh/skip-hookserver"
DEFAULT_SKIP_LABEL_VALUE = "true"
# Responses (and what goes upstream): kubelet caps CRI messages at 16 MiB, but big nodes
# answer List calls with more, so allow far more.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# Requests from the kubelet: its own limit. A bigger one is refused on arrival with
# RESOURCE_EXHAUSTED instead of being relayed (containerd would refuse it anyway).
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
# Operator pieces (runtimeproxy.admin): the command line's defaults.
DEFAULT_ADMIN_SOCKET = Path("/var/run/koord-runtimeproxy/admin.sock")
DEFAULT_STATE_DIR = Path("/var/lib/koord-runtimeproxy")
DEFAULT_METRICS_ADDRESS = "127.0.0.1:9318"
# Calls in progress beyond this get RESOURCE_EXHAUSTED (a bound far above any kubelet's needs).
DEFAULT_MAX_CONCURRENT_CALLS = 10_000
# The decision trace's ring per pod (runtimeproxy.hooks.trace): a pod with a few containers goes through
# ~5 hooked calls per container (create, start, post-start, stop, post-stop), so 32 keeps a small pod's life.
DEFAULT_HOOK_TRACE_ENTRIES = 32
# NRI (runtimeproxy.nri): the socket NRI plugins connect to by default, and NRI's own timeouts.
DEFAULT_NRI_SOCKET = Path("/var/run/nri/nri.sock")
DEFAULT_NRI_REGISTRATION_TIMEOUT = 5.0
DEFAULT_NRI_REQUEST_TIMEOUT = 2.0
# Where NRI runtimes launch plugins from (NN-name executables) and read their configs (NN-name.conf, name.conf).
DEFAULT_NRI_PLUGIN_PATH = Path("/opt/nri/plugins")
DEFAULT_NRI_PLUGIN_CONFIG_PATH = Path("/etc/nri/conf.d")


# A proxy serving another CRI socket than the default (a second proxy on the node: Docker mode beside CRI
# mode, a test instance) gets operator endpoints of its own, so it never shares the first one's toggles.
def default_admin_socket(listen_path: Path) -> Path:
    """The admin socket beside the CRI socket: <stem>-admin.sock, or the well-known one for the default."""
    if listen_path == DEFAULT_PROXY_SOCKET:
        return DEFAULT_ADMIN_SOCKET
    return listen_path.with_name(f"{listen_path.stem}-admin.sock")


def default_state_dir(listen_path: Path) -> Path:
    """The toggle state: the well-known directory for the default socket, else one named after the socket."""
    if listen_path == DEFAULT_PROXY_SOCKET:
        return DEFAULT_STATE_DIR
    return DEFAULT_STATE_DIR / "proxies" / quote(str(listen_path), safe="")


def default_metrics_address(listen_path: Path) -> str:
    """The well-known port for the default socket; off for any other (one port cannot serve two proxies)."""
    return DEFAULT_METRICS_ADDRESS if listen_path == DEFAULT_PROXY_SOCKET else ""


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
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    # Benchmark only: decode and re-encode every message (the design the fast path replaces).
    decode_all: bool = False
    # The CRI frontend's transport: an HTTP/2 frame relay on the public socket (cri.framerelay) sends the calls
    # no hook intercepts straight to the backend, the rest to the gRPC server on a private socket.
    frame_relay: bool = True
    # Operator pieces; None: off (in-process tests), the command line turns them on.
    admin_path: Path | None = None
    state_dir: Path | None = None  # toggles are kept in memory only when None
    metrics_address: str | None = None  # "host:port"
    log_format: str = "text"  # or "json"
    # The decision trace's ring per pod (hooks.trace); 0 turns the trace off.
    hook_trace_entries: int = DEFAULT_HOOK_TRACE_ENTRIES
    # The NRI socket the proxy hosts NRI plugins on; None: NRI off (the drop-in default).
    nri_socket: Path | None = None
    nri_registration_timeout: float = DEFAULT_NRI_REGISTRATION_TIMEOUT
    nri_request_timeout: float = DEFAULT_NRI_REQUEST_TIMEOUT
    nri_plugin_path: Path | None = None  # plugins launched from there; None: none (the command line's default is NRI's)
    nri_plugin_config_path: Path | None = None
    nri_default_validator_config: Path | None = None  # the built-in default validator's TOML (nri.default_validator)

    @property
    def effective_image_path(self) -> Path:
        return self.image_path or self.runtime_path

    @property
    def frontend_role(self) -> str:
        """The name a .socket unit gives the proxy socket (FileDescriptorName=): `cri`, or `docker` in Docker mode."""
        return "docker" if self.backend_mode == "Docker" else "cri"

    @property
    def uses_frame_relay(self) -> bool:
        """The CRI frontend serves its socket through the frame relay (cri.framefront), not the gRPC server alone."""
        return self.backend_mode != "Docker" and self.frame_relay and not self.decode_all
