"""The cgroup v2 + systemd guest's recipe and plumbing, without qemu (tests/e2e/test_cgroup_v2.py boots it)."""

from __future__ import annotations

import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rplab import guest
from rplab.guest import Guest, GuestError, GuestImage

from tests.kits.machine import tcp_server


def test_the_guest_containerd_uses_the_systemd_driver_and_no_nri_of_its_own() -> None:
    files = guest.guest_files()
    config = tomllib.loads(files["/etc/containerd/config.toml"])
    assert config["version"] == 2  # the guest runs Debian 12's containerd 1.6, whatever runtime the host selects
    runc = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is True
    assert config["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert config["grpc"]["address"] == f"{guest.GUEST_BASE}/containerd.sock"
    assert f"UNIX-CONNECT:{guest.GUEST_BASE}/containerd.sock" in files["/etc/systemd/system/rplab-cri.service"]
    assert "localhost" in files["/etc/hosts"]  # without it RunPodSandbox fails


def test_the_recipe_key_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    key = guest.recipe_key()
    assert key == guest.recipe_key()
    monkeypatch.setattr(guest, "PACKAGES", (*guest.PACKAGES, "procps"))
    assert guest.recipe_key() != key


def test_a_restore_loads_the_saved_state_into_the_same_machine(tmp_path: Path) -> None:
    machine = Guest(tmp_path, GuestImage(tmp_path / "image"))
    cold = machine.qemu_argv(tmp_path / "disk.qcow2")
    warm = machine.qemu_argv(tmp_path / "disk.qcow2", incoming=tmp_path / "state.bin")
    assert warm[: len(cold)] == cold and warm[len(cold):] == ["-incoming", f"exec:cat {tmp_path / 'state.bin'}"]
    assert "systemd.unified_cgroup_hierarchy=1" in cold[cold.index("-append") + 1]
    assert any("restrict=on" in arg and f"127.0.0.1:{machine.cri_port}-:{guest.CRI_PORT}" in arg for arg in cold)


def test_the_guest_reaches_a_host_socket_and_a_read_only_share_and_nothing_else(tmp_path: Path) -> None:
    machine = Guest(tmp_path, GuestImage(tmp_path / "image"))
    argv = machine.qemu_argv(tmp_path / "disk.qcow2")
    network = next(arg for arg in argv if arg.startswith("user,"))
    assert "restrict=on" in network
    assert (f"guestfwd=tcp:{guest.HOST_ADDRESS}:{guest.HOST_SOCKET_PORT}-cmd:socat - "
            f"UNIX-CONNECT:{machine.host_socket}") in network
    assert network.count("guestfwd") == 1
    share = argv[argv.index("-virtfs") + 1]
    assert f"path={machine.share}," in share and "readonly=on" in share
    assert f"hostfwd=tcp:127.0.0.1:{machine.kubelet_port}-:{guest.KUBELET_PORT}" in network


@pytest.fixture
def fake_shell(tmp_path: Path) -> Iterator[tuple[Guest, list[bytes]]]:
    """A Guest whose shell port is a server answering each script with canned output (`answers`, in order)."""
    answers: list[bytes] = []

    def answer(connection: socket.socket) -> None:
        while connection.recv(65536):
            pass
        connection.sendall(answers.pop(0))

    with tcp_server(answer) as port:
        machine = Guest(tmp_path, GuestImage(tmp_path / "image"))
        machine.shell_port = port
        yield machine, answers


def test_the_shell_returns_output_and_fails_on_a_nonzero_exit(fake_shell: tuple[Guest, list[bytes]]) -> None:
    machine, answers = fake_shell
    answers += [b"max\nrplab-exit=0\n", b"cat: nope: No such file\nrplab-exit=1\n", b"cut short"]
    assert machine.read("/sys/fs/cgroup/memory.max") == "max"
    with pytest.raises(GuestError, match="No such file"):
        machine.shell("cat nope")
    with pytest.raises(GuestError, match="no exit status"):
        machine.shell("true")
