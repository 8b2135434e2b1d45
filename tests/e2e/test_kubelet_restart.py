"""The proxy restarted under the real kubelet at a node's speed (issue 39): the kubelet v1.35.8 (rplab.kubelet_node)
with four probed pods (exec, HTTP and TCP probes every second: the kubelet calls all the time) on the proxy's
socket, and the proxy stopped (SIGTERM) and a new one started at once, as an upgrade or `systemctl restart` does:
once with the proxy binding its socket itself, once with the socket held across the restart as systemd's .socket
unit holds it (rplab.activation). Then a crash: `kill -9` and a new proxy RESTART_SECONDS later, as the unit's
`Restart=always` and `RestartSec=` start it. Read from the kubelet's log: the calls that failed `Unavailable` over
the restart and the probes that failed or errored; from its pods: restarts and readiness.

With socket activation a restart must cost the kubelet nothing: no failed call, no probe failure, no restart.
Without it, its calls are refused until the new proxy serves; after a kill the calls in flight on the killed
process fail (both reported, not asserted: how many depends on the machine's speed and the moment). A kill must
cost no restart and no readiness.
The kubelet gets a containerd of its own (it stops every pod of its runtime it does not know).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rplab.activation import ActivationSocket, ActivationSockets
from rplab.containerd import lab_containerd
from rplab.kubelet_node import PEER, KubeletErrors, KubeletNode, wait_until
from rplab.kubelet_pods import NodePorts, kubelet_view, node_pods
from rplab.process import ProxyProcess

from tests.kits.machine import IMAGE_CACHE, built_peer

PODS = ("exec-probes", "http-probes", "tcp-probes", "guaranteed")
SETTLE_SECONDS = 300.0
WATCH_SECONDS = 15.0  # after the new proxy serves: fifteen probe periods and relists
RESTART_SECONDS = 0.1  # deploy/koord-runtime-proxy.service's RestartSec=: systemd's wait before it starts it again


@dataclass
class Restart:
    """What one restart of the proxy cost the kubelet."""

    unavailable: int  # its log lines with code = Unavailable
    probe_failures: int  # its "Probe failed" and "Probe errored" lines
    restarts: int
    not_ready: list[str]
    outage_seconds: float  # from SIGTERM (or SIGKILL) to the new proxy answering

    def line(self, name: str, ended: str = "old stopped") -> str:
        return (f"{name}: {self.unavailable} Unavailable lines, {self.probe_failures} probe failures, "
                f"{self.restarts} restarts, not Ready {self.not_ready or 'none'}, "
                f"{ended} and new serving in {self.outage_seconds:.2f} s")


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """A short directory (unix socket paths), mode 0755 as the proxy's trust rule wants for its socket's."""
    path = Path(tempfile.mkdtemp(prefix="rp-kr-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def node(base: Path, workdir: Path) -> Iterator[tuple[KubeletNode, ProxyProcess]]:
    """The kubelet settled on the proxy (which binds its socket itself)."""
    binary = built_peer(PEER, "the kubelet")
    with lab_containerd(workdir / "kr-ctd", IMAGE_CACHE) as runtime:
        proxy = ProxyProcess(base / "rp.sock", runtime.address)
        proxy.start(60)
        kubelet = KubeletNode(proxy.listen_path, workdir / "kr-node", binary=binary)
        try:
            kubelet.start()
            for manifest in node_pods(NodePorts.free()):
                if manifest["metadata"]["name"] in PODS:
                    kubelet.write_pod(manifest)
            wait_until(lambda: all_ready(kubelet), SETTLE_SECONDS, "every pod Ready", interval=0.5)
            yield kubelet, proxy
        finally:
            try:
                kubelet.stop()
            finally:
                proxy.stop()
                if proxy.activation is not None:
                    proxy.activation.close()


def all_ready(kubelet: KubeletNode) -> bool:
    view = kubelet_view(kubelet.pod_names())
    return sorted(view) == sorted(PODS) and all(pod["ready"] for pod in view.values())


def restart_count(kubelet: KubeletNode) -> int:
    return sum(int(c["restartCount"]) for pod in kubelet_view(kubelet.pod_names()).values()
               for c in pod["containers"].values())


def restart(kubelet: KubeletNode, proxy: ProxyProcess, crash: bool = False) -> Restart:
    """SIGTERM to the proxy and a new one started at once on the same socket (and sockets, if activated), or
    (`crash`) SIGKILL and a new one RESTART_SECONDS later; the kubelet watched until WATCH_SECONDS after the new one
    serves."""
    restarts = restart_count(kubelet)
    mark = kubelet.log_path.stat().st_size
    began = time.monotonic()
    if crash:
        proxy.kill()
        time.sleep(RESTART_SECONDS)
    else:
        assert proxy.stop() == 0, proxy.log_tail()
    proxy.start(60)
    outage = time.monotonic() - began
    not_ready: set[str] = set()
    watched_until = time.monotonic() + WATCH_SECONDS
    while time.monotonic() < watched_until:
        not_ready.update(name for name, pod in kubelet_view(kubelet.pod_names()).items() if not pod["ready"])
        time.sleep(0.5)
    errors = KubeletErrors.of(kubelet.log_path.read_bytes()[mark:].decode(errors="replace").splitlines())
    return Restart(unavailable=errors.unavailable, probe_failures=errors.probe_failures,
                   restarts=restart_count(kubelet) - restarts, not_ready=sorted(not_ready), outage_seconds=outage)


def test_a_restart_without_socket_activation_refuses_the_kubelets_calls_until_the_new_proxy_serves(
        node: tuple[KubeletNode, ProxyProcess], kubelet_summary: list[str]) -> None:
    kubelet, proxy = node
    without = restart(kubelet, proxy)
    kubelet_summary.append("proxy restarted under the kubelet " + without.line("without socket activation"))
    assert without.restarts == 0 and all_ready(kubelet), without


def test_a_restart_with_socket_activation_costs_the_kubelet_nothing(
        node: tuple[KubeletNode, ProxyProcess], base: Path, kubelet_summary: list[str]) -> None:
    kubelet, proxy = node
    # The switch to sockets held across restarts is a restart of its own (the socket file is made anew): not measured.
    assert proxy.stop() == 0, proxy.log_tail()
    proxy.activation = ActivationSockets([ActivationSocket("cri", proxy.listen_path, 0o660),
                                          ActivationSocket("admin", proxy.admin_path, 0o600)])
    proxy.start(60)
    wait_until(lambda: all_ready(kubelet), SETTLE_SECONDS, "every pod Ready again", interval=0.5)
    time.sleep(5)  # the kubelet's errors of the switch behind it
    activated = restart(kubelet, proxy)
    kubelet_summary.append("proxy restarted under the kubelet " + activated.line("with socket activation"))
    assert (activated.unavailable, activated.probe_failures, activated.restarts, activated.not_ready) == \
        (0, 0, 0, []), activated


def test_a_kill_with_socket_activation_costs_only_the_calls_in_flight(
        node: tuple[KubeletNode, ProxyProcess], kubelet_summary: list[str]) -> None:
    """After the test above: the sockets are held. Nothing waits for the kill's errors to settle but the watch."""
    kubelet, proxy = node
    assert proxy.activation is not None, "runs after the socket activation test, on its held sockets"
    killed = restart(kubelet, proxy, crash=True)
    kubelet_summary.append("proxy killed (kill -9) under the kubelet and started again "
                           f"{RESTART_SECONDS * 1000:.0f} ms later, " + killed.line("with socket activation",
                                                                                    "killed"))
    assert (killed.restarts, killed.not_ready) == (0, []), killed
