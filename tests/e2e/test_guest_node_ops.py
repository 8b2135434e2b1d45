"""Node operations under the real kubelet, on the node as operators run it (issue 39; rplab.node_ops): the .deb
installed in the cgroup v2 + systemd guest with its sockets held by systemd, the newest kubelet on the proxy's
socket, the example plugin on all seven hooks under Ignore (on this machine, reached through the guest's
forwarded socket), six pods with exec, HTTP and TCP probes. Then, in turn, to the running node: the next version's
.deb installed over it, `systemctl restart`, `kill -9`, `kill -9` mid-start, containerd restarted, the plugin
restarted, the state directory's disk full. Each operation's figures go to the terminal summary as one table row.

What must hold whatever the speed of the machine: no container restarts, every pod Ready again, no Created orphan
and no failed start left in the runtime, the kill mid-start reconciled by the next proxy, the pod made while the
plugin was down noted as missed, the proxy serving on a full state disk. The kubelet's refused calls are
reported, not asserted: its CRI client gives a connection 5 s to be greeted, and the emulated guest starts the
proxy slower than that (docs/operating.md, "Upgrades and restarts").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rplab import node_ops
from rplab.guest import Guest
from rplab.kubelet_node import NEWEST_KUBELET_VERSION, NEWEST_PEER
from rplab.loop import LoopThread
from rplab.nodepackages import build_deb
from runtimeproxy import __version__

from tests.kits.machine import built_peer

RESULTS: dict[str, node_ops.Disruption] = {}


@pytest.fixture(scope="module")
def debs(bundle: Path, workdir: Path) -> tuple[Path, Path]:
    """The package of this checkout and a later version of it (the upgrade)."""
    return build_deb(bundle, __version__, workdir / "node-ops-debs"), build_deb(bundle, f"{__version__}+1",
                                                                                 workdir / "node-ops-debs")


@pytest.fixture(scope="module")
def node(guest_containerd: Guest, debs: tuple[Path, Path], workdir: Path,
         guest_summary: list[str]) -> Iterator[node_ops.ServiceNode]:
    kubelet = built_peer(NEWEST_PEER, f"the kubelet {NEWEST_KUBELET_VERSION}")
    loop = LoopThread("node-ops-plugin")
    try:
        with node_ops.service_node(guest_containerd, debs, kubelet, loop, workdir / "node-ops") as node:
            yield node
    finally:
        loop.close()
        if RESULTS:
            guest_summary += ["node operations under the kubelet (the .deb, socket activation):",
                              *node_ops.table(list(RESULTS.values())).splitlines()]


def measured(name: str, disruption: node_ops.Disruption) -> node_ops.Disruption:
    RESULTS[name] = disruption
    print("\n" + node_ops.TABLE_HEADER + "\n" + disruption.row())
    return disruption


def assert_nothing_lost(disruption: node_ops.Disruption) -> None:
    assert (disruption.restarts, disruption.orphans, disruption.failed_starts) == (0, 0, 0), disruption


def test_an_upgrade_restarts_the_proxy_on_the_new_version_and_loses_nothing(
        node: node_ops.ServiceNode, debs: tuple[Path, Path]) -> None:
    disruption = measured("upgrade", node_ops.upgrade(node, debs[1]))
    assert_nothing_lost(disruption)
    assert f"{__version__}+1" in disruption.notes[0]


def test_a_restart_loses_nothing(node: node_ops.ServiceNode) -> None:
    assert_nothing_lost(measured("restart", node_ops.restart(node)))


def test_a_kill_is_restarted_by_systemd_and_loses_nothing(node: node_ops.ServiceNode) -> None:
    assert_nothing_lost(measured("kill", node_ops.kill(node)))


def test_a_kill_mid_start_leaves_no_orphan(node: node_ops.ServiceNode) -> None:
    disruption = measured("kill mid-start", node_ops.kill_mid_start(node))
    assert (disruption.orphans, disruption.failed_starts) == (0, 0), disruption
    assert "1 Created removed" in disruption.notes[0], disruption.notes


def test_a_containerd_restart_loses_nothing(node: node_ops.ServiceNode) -> None:
    assert_nothing_lost(measured("containerd restart", node_ops.containerd_restart(node)))


def test_a_pod_made_while_the_plugin_is_down_is_noted_as_missed(node: node_ops.ServiceNode) -> None:
    disruption = measured("plugin restart", node_ops.plugin_restart(node))
    assert_nothing_lost(disruption)
    assert "status: 0 more" not in disruption.notes[0], disruption.notes


def test_on_a_full_state_disk_the_proxy_starts_serves_and_says_what_it_goes_without(
        node: node_ops.ServiceNode) -> None:
    disruption = measured("state disk full", node_ops.state_disk_full(node))
    assert_nothing_lost(disruption)
    assert "status journal problem: none" not in disruption.notes[0], disruption.notes
    assert "'cannot be written' log lines: 0" not in disruption.notes[0], disruption.notes
