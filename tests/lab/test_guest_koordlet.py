"""rplab.guest_koordlet: koordlet's command in the guest, the figures' rows (no guest, no cluster; the lane itself
runs by hand: python -m rplab.guest_koordlet)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from rplab import guest_koordlet
from rplab.guest_koordlet import AS_ON_V1, BE, LSR, GuestKoordlet, Row, batch_files
from rplab.guest_kubelet import GuestKubeletNode
from rplab.kubelet_node import NODE_NAME
from rplab.nodepackages import HOOK_DIR

from tests.kits.guest import ScriptedGuest


def koordlet(tmp_path: Path) -> GuestKoordlet:
    guest = ScriptedGuest(tmp_path)
    kubelet = GuestKubeletNode(tmp_path / "host.sock", tmp_path / "node", guest=guest)
    return GuestKoordlet(guest, tmp_path / "admin.kubeconfig", kubelet, binary=tmp_path / "koordlet")


def test_koordlet_runs_on_the_guests_own_paths_and_registers_into_the_proxys_directory(tmp_path: Path) -> None:
    agent = koordlet(tmp_path)
    argv = agent.argv()
    assert argv[0] == guest_koordlet.KOORDLET_BINARY
    for flag in ("--cgroup-root-dir=/sys/fs/cgroup/", "--proc-root-dir=/proc/", "--sys-fs-root-dir=/sys/fs/",
                 f"--var-lib-kubelet-dir={agent.kubelet.guest_root}/", f"--runtime-hooks-config-path={HOOK_DIR}",
                 f"--runtime-hooks-addr={guest_koordlet.KOORDLET_SOCKET}", "--kubelet-read-only-port=10255",
                 "--enable-nri-runtime-hook=false"):
        assert flag in argv
    command = agent.start_command()
    assert f"--unit={guest_koordlet.KOORDLET_UNIT}" in command and f"-E NODE_NAME={NODE_NAME}" in command
    assert command.endswith(shlex.join(argv))


def test_koordlet_is_ready_once_registered_and_serving_and_a_dead_one_is_said(tmp_path: Path) -> None:
    agent = koordlet(tmp_path)
    guest = agent.guest
    assert isinstance(guest, ScriptedGuest)
    guest.answers["systemctl is-active"] = "active\n"
    assert not agent._registered()
    guest.answers["systemctl is-active"] = "active\nserving\n"
    assert agent._registered()
    guest.answers["systemctl is-active"] = "inactive\n"
    guest.answers["journalctl"] = "E1202 b.go:2] no kubeconfig\n"  # what the guest's grep keeps
    with pytest.raises(guest_koordlet.KoordletError, match="no kubeconfig"):
        agent._registered()
    assert "grep -E '^[WEF][0-9]{4} '" in guest.scripts[-1]


def test_a_row_says_whether_the_guests_files_are_cgroup_v1s_through_runcs_conversion() -> None:
    be = Row(BE, "runtimeproxy", {"cpu.max": "50000 100000", "cpu.weight": "20", "memory.max": "268435456",
                                  "cpuset.cpus": ""}, 3.3, "Running", AS_ON_V1[BE])
    assert be.as_on_v1() == "yes"
    assert be.line() == "| BE pod | runtimeproxy | 50000 100000 | 20 | 268435456 |  | yes | 3.3 | Running |"
    lsr = Row(LSR, "runtimeproxy", {"cpu.max": "100000 100000", "cpu.weight": "39", "memory.max": "67108864",
                                    "cpuset.cpus": "1"}, expected=AS_ON_V1[LSR] | {"cpuset.cpus": "1"})
    assert lsr.as_on_v1() == "no: cpu.max"
    assert Row("failed", "runtimeproxy", note="failed: x", expected=AS_ON_V1[BE]).as_on_v1() == ""
    assert batch_files(be.values) == {"cpu.max": "50000 100000", "cpu.weight": "20", "memory.max": "268435456"}


def test_what_a_container_was_created_with_is_read_from_its_oci_spec() -> None:
    spec = {"linux": {"resources": {"cpu": {"shares": 2, "period": 100000}, "memory": {}}}}
    assert guest_koordlet.carried(spec) == "created with shares 2, quota -, memory -"
    spec = {"linux": {"resources": {"cpu": {"shares": 1024, "quota": -1, "cpus": "1"}, "memory": {"limit": 67108864}}}}
    assert guest_koordlet.carried(spec) == "created with shares 1024, quota -1, memory 67108864, cpus 1"
