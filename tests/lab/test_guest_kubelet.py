"""The kubelet in the guest: its configuration and the scripts it sends the guest, without qemu
(tests/e2e/test_cgroup_v2_kubelet.py runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rplab import guest_kubelet
from rplab.guest import GUEST_BASE, KUBELET_PORT
from rplab.guest_kubelet import GuestKubeletNode
from rplab.kubelet_node import NODE_LABEL

from tests.kits.guest import ScriptedGuest


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


def test_a_registered_kubelet_gets_its_kubeconfig_and_the_guests_own_address(node: GuestKubeletNode,
                                                                               tmp_path: Path) -> None:
    assert "--node-ip=127.0.0.1" in node.guest_argv()
    (tmp_path / "node.kubeconfig").write_text('{"kind": "Config"}')
    registered = GuestKubeletNode(node.endpoint, node.directory, guest=node.guest,
                                  kubeconfig=tmp_path / "node.kubeconfig")
    argv = registered.guest_argv()
    assert f"--kubeconfig={registered.guest_kubeconfig}" in argv
    assert not any(flag.startswith("--node-ip") for flag in argv)
    assert registered.guest_kubeconfig.startswith(registered.guest_directory)


def test_a_file_is_written_into_the_guest_whole_and_a_binary_copied_once(tmp_path: Path) -> None:
    guest = ScriptedGuest(tmp_path)
    guest.write("/etc/x/conf", "a: 1", mode="0600")
    script = guest.scripts[-1]
    assert "<<'RPLAB_EOF'\na: 1\nRPLAB_EOF\n" in script and "chmod 0600 '/etc/x/conf.partial'" in script
    assert script.endswith("mv '/etc/x/conf.partial' '/etc/x/conf'")
    binary = tmp_path / "tool"
    binary.write_bytes(b"12345")
    guest.answers["stat -c %s"] = "5\n"
    assert guest.put_once(binary, "/usr/local/bin/tool") == 0.0  # there already, same size: not copied
    assert not any("mount -t 9p" in s for s in guest.scripts)


def test_the_guests_forwarder_to_the_host_listens_where_told(tmp_path: Path) -> None:
    guest = ScriptedGuest(tmp_path)
    assert guest_kubelet.through_host(guest) == guest_kubelet.PROXY_SOCKET
    assert f"socat UNIX-LISTEN:{guest_kubelet.PROXY_SOCKET},fork,unlink-early TCP:" in guest.scripts[-1]
    guest_kubelet.forward_to_host(guest, "TCP-LISTEN:6443,bind=127.0.0.1,reuseaddr,fork", "rplab-api")
    assert "--unit=rplab-api" in guest.scripts[-1] and "socat TCP-LISTEN:6443" in guest.scripts[-1]
