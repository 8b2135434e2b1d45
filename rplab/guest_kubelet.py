"""The real kubelet inside the cgroup v2 + systemd guest (rplab.guest), with the systemd cgroup driver: the node
most clusters run, which these cgroup v1 machines without systemd cannot be.

``GuestKubeletNode`` is rplab.kubelet_node's ``KubeletNode`` moved into the guest, so rplab.kubelet_pods runs the
same static pods on it: the binary is copied in (``Guest.put``), the kubelet runs as a transient systemd service
(``systemd-run``) with ``cgroupDriver: systemd`` and the default cgroupRoot (its pods under ``kubepods.slice``), its
manifests are written through the guest's shell, its read-only port is forwarded to the host. The guest is thrown
away after its tests (a copy-on-write disk over the snapshot), so nothing the kubelet does to it (sysctls, files,
cgroups) needs undoing, and nothing of it runs on the host: ``host_changes()`` is empty by construction.

The CRI endpoint the kubelet uses is in the guest: the guest containerd's socket (direct), or ``PROXY_SOCKET``, a
socket in the guest forwarded to ``Guest.host_socket`` on the host (``through_host``), where the proxy listens in
front of the guest's containerd (itself forwarded to the host): kubelet (guest) -> proxy (host) -> containerd
(guest). The proxy runs on the host, as in tests/e2e/test_cgroup_v2.py: in the guest it would need Python in the
image and would run under software emulation; what depends on the node is the kubelet's side.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rplab.guest import GUEST_BASE, HOST_ADDRESS, HOST_SOCKET_PORT, KUBELET_PORT, Guest, GuestError
from rplab.kubelet_node import NODE_NAME, KubeletNode, KubeletNodeError, wait_until
from rplab.peers import peer_binary

GUEST_BINARY = "/usr/local/bin/kubelet"
GUEST_DIRECTORY = "/var/lib/rplab-kubelet"  # in the guest: a directory per node below it
CONTAINERD_SOCKET = str(GUEST_BASE / "containerd.sock")  # the guest containerd's own socket, in the guest
PROXY_SOCKET = "/run/rplab-proxy.sock"  # in the guest: forwarded to Guest.host_socket
UNIT = "rplab-kubelet"
KUBELET_SERVER_PORT = 10250  # the guest's own: no other kubelet there
FORWARD_UNIT = "rplab-proxy-socket"
CGROUP_ROOT = "/sys/fs/cgroup/kubepods.slice"  # the systemd driver's default cgroupRoot


def forward_to_host(guest: Guest, listen: str, unit: str) -> None:
    """Starts the guest's forwarder (systemd unit `unit`) from socat's listening address `listen` in the guest to
    the host's ``guest.host_socket``, unless it runs already."""
    guest.shell(f"systemctl is-active -q {unit} || systemd-run -q --unit={unit} --collect "
                f"socat {listen} TCP:{HOST_ADDRESS}:{HOST_SOCKET_PORT}")


def through_host(guest: Guest, path: str = PROXY_SOCKET, unit: str = FORWARD_UNIT) -> str:
    """Starts the guest's forwarder of the socket `path` in the guest to the host's ``guest.host_socket``; returns
    `path`."""
    forward_to_host(guest, f"UNIX-LISTEN:{path},fork,unlink-early", unit)
    return path


@dataclass
class GuestKubeletNode(KubeletNode):
    """The kubelet in ``guest`` on ``guest_endpoint`` (a socket path in the guest); ``endpoint`` is the same runtime
    as seen from the host (for the runtime's view and clean-up), ``directory`` a host directory for its config.
    With a ``kubeconfig`` (a host file written for the guest: the API server's address as the guest reaches it,
    the certificates embedded) it registers as NODE_NAME, as KubeletNode does."""

    guest: Guest | None = None
    guest_endpoint: str = CONTAINERD_SOCKET
    copy_seconds: float = 0.0  # copying the binary into the guest took (0: it was there)
    http_timeout: float = 60.0

    @property
    def _guest(self) -> Guest:
        if self.guest is None:
            raise KubeletNodeError("a GuestKubeletNode needs its guest")
        return self.guest

    @property
    def guest_directory(self) -> str:
        return f"{GUEST_DIRECTORY}/{self.node_id}"

    @property
    def guest_manifests(self) -> str:
        return f"{self.guest_directory}/manifests"

    def config(self, port: int) -> dict[str, Any]:
        config = super().config(port)
        del config["cgroupRoot"]  # the systemd driver's default: kubepods.slice
        config.update({
            "staticPodPath": self.guest_manifests,
            "containerRuntimeEndpoint": f"unix://{self.guest_endpoint}",
            "cgroupDriver": "systemd",
            "address": "0.0.0.0",  # the read-only port is reached through qemu's forward, from outside
            "readOnlyPort": KUBELET_PORT,
            "podLogsDir": f"{self.guest_directory}/pod-logs",
            "volumePluginDir": f"{self.guest_directory}/volume-plugins",
        })
        return config

    @property
    def guest_kubeconfig(self) -> str:
        return f"{self.guest_directory}/kubeconfig"

    @property
    def guest_root(self) -> str:
        return f"{self.guest_directory}/root"

    def guest_argv(self) -> list[str]:
        # Registered (a kubeconfig): the node's address is the guest's own (a loopback one fails the kubelet's
        # validation); standalone: loopback.
        node = f"--kubeconfig={self.guest_kubeconfig}" if self.kubeconfig else "--node-ip=127.0.0.1"
        return [GUEST_BINARY, f"--config={self.guest_directory}/kubelet.json", f"--root-dir={self.guest_root}",
                f"--cert-dir={self.guest_directory}/pki", f"--hostname-override={NODE_NAME}", node, "--v=2"]

    def start(self, timeout: float = 300.0) -> None:
        """Copies the binary in (once per guest), writes the config, starts the service; returns once /healthz
        answers. Refuses a runtime that holds pods of others, as the host's does."""
        guest = self._guest
        self._refuse_foreign_pods()
        self.directory.mkdir(parents=True, exist_ok=True)
        binary = self.binary or peer_binary(self.peer)
        self.copy_seconds = guest.put_once(binary, GUEST_BINARY)
        config = json.dumps(self.config(KUBELET_SERVER_PORT), indent=1)
        (self.directory / "kubelet.json").write_text(config)
        guest.shell(f"mkdir -p {self.guest_manifests}")
        guest.write(f"{self.guest_directory}/kubelet.json", config)
        if self.kubeconfig is not None:
            guest.write(self.guest_kubeconfig, self.kubeconfig.read_text(), mode="0600")
        self.read_only_port = guest.kubelet_port
        self.host_before = None  # nothing of it runs on the host
        self.started_at = time.monotonic()
        guest.shell(f"systemd-run -q --unit={UNIT} --collect -p KillMode=mixed "
                    + " ".join(shlex.quote(arg) for arg in self.guest_argv()))
        wait_until(self._healthy, timeout, f"the guest kubelet's /healthz (journalctl -u {UNIT} in the guest)")

    @property
    def running(self) -> bool:
        try:
            return self._guest.shell(f"systemctl is-active {UNIT}", check=False).strip() == "active"
        except (GuestError, OSError):
            return False

    def stop(self, timeout: float = 600.0) -> None:
        super().stop(timeout)  # an emulated node stops its pods slower

    def _check_running(self) -> None:
        if not self.running:
            raise KubeletNodeError(f"the guest's kubelet is not running\n{self.log_tail()}")

    def _remove_manifests(self) -> None:
        self._guest.shell(f"rm -f {self.guest_manifests}/*.json")

    def _tidy_host(self) -> list[str]:
        return []  # nothing of it ran on the host

    def _terminate(self) -> None:
        if self.guest is not None:
            self.guest.shell(f"systemctl stop {UNIT} 2>/dev/null; systemctl reset-failed {UNIT} 2>/dev/null; true")

    def write_pod(self, manifest: dict[str, Any]) -> Path:
        name, text = self.labelled(manifest)
        partial, final = f"{self.guest_manifests}/.{name}.partial", f"{self.guest_manifests}/{name}.json"
        self._guest.shell(f"cat > {partial} <<'RPLAB_EOF'\n{text}\nRPLAB_EOF\nmv {partial} {final}")
        return Path(final)

    def remove_pod(self, name: str) -> None:
        self._guest.shell(f"rm {self.guest_manifests}/{name}.json")

    def has_pod_cgroup(self, uid: str) -> bool:
        found = self._guest.shell(f"find {CGROUP_ROOT} -maxdepth 2 -name '*pod{uid.replace('-', '_')}.slice'",
                                  check=False)
        return bool(found.strip())

    def host_changes(self) -> list[str]:
        return []

    def written_sysctls(self) -> dict[str, str]:
        return {}

    def overlay_writes(self) -> list[str]:
        return []

    def log_tail(self, lines: int = 30) -> str:
        if self.guest is None:
            return "(no guest)"
        try:
            return "guest kubelet journal tail:\n" + self.guest.shell(
                f"journalctl -u {UNIT} -n {lines} --no-pager -o cat", check=False)
        except (GuestError, OSError) as error:
            return f"(the guest's journal: {error})"
