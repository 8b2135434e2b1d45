"""The kubelet in the guest: its configuration and the scripts it sends the guest, without qemu
(tests/e2e/test_cgroup_v2_kubelet.py runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab import guest_kubelet
from rplab.guest import GUEST_BASE, KUBELET_PORT, Guest, GuestImage
from rplab.guest_kubelet import GuestKubeletNode
from rplab.kubelet_node import NODE_LABEL


class ScriptedGuest(Guest):
    """A guest whose shell records the scripts it is given and answers from `answers` (else nothing)."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, GuestImage(base / "image"))
        self.scripts: list[str] = []
        self.answers: dict[str, str] = {}

    def shell(self, script: str, timeout: float = 60.0, check: bool = True) -> str:
        self.scripts.append(script)
        return next((answer for start, answer in self.answers.items() if script.startswith(start)), "")


@pytest.fixture
def node(tmp_path: Path) -> GuestKubeletNode:
    return GuestKubeletNode(tmp_path / "host.sock", tmp_path / "node", guest=ScriptedGuest(tmp_path))


def test_it_uses_the_systemd_driver_with_its_default_root_and_a_socket_in_the_guest(node: GuestKubeletNode) -> None:
    config = node.config(10250)
    assert config["cgroupDriver"] == "systemd" and "cgroupRoot" not in config
    assert config["containerRuntimeEndpoint"] == f"unix://{GUEST_BASE}/containerd.sock"
    assert config["readOnlyPort"] == KUBELET_PORT and config["address"] == "0.0.0.0"
    assert config["staticPodPath"].startswith(f"{guest_kubelet.GUEST_DIRECTORY}/{node.node_id}/")
    assert str(node.directory) not in json.dumps(config)  # every path is the guest's
    proxied = GuestKubeletNode(node.endpoint, node.directory, guest=node.guest, guest_endpoint="/run/p.sock")
    assert proxied.config(10250)["containerRuntimeEndpoint"] == "unix:///run/p.sock"


def test_a_manifest_is_labelled_and_moved_into_place_whole(node: GuestKubeletNode) -> None:
    path = node.write_pod({"metadata": {"name": "web"}, "spec": {}})
    script = node.guest.scripts[-1]  # type: ignore[union-attr]
    written = json.loads(script.split("<<'RPLAB_EOF'\n", 1)[1].split("\nRPLAB_EOF", 1)[0])
    assert written["metadata"]["labels"] == {NODE_LABEL: node.node_id}
    assert script.endswith(f"mv {node.guest_manifests}/.web.partial {path}")


def test_on_the_host_it_changes_nothing(node: GuestKubeletNode) -> None:
    assert node.host_changes() == [] and node.written_sysctls() == {} and node.overlay_writes() == []


def test_a_pod_cgroup_is_looked_up_as_the_systemd_drivers_slice(node: GuestKubeletNode) -> None:
    guest = node.guest
    assert isinstance(guest, ScriptedGuest)
    guest.answers["find"] = "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice\n"
    assert node.has_pod_cgroup("1-2")
    assert "-name '*pod1_2.slice'" in guest.scripts[-1]
    guest.answers.clear()
    assert not node.has_pod_cgroup("1-2")
