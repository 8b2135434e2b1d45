"""runtimeproxy.activation: which passed socket each role takes, and what it refuses (real sockets, no systemd)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy.activation import ActivationError, InheritedSockets, PassedSocket

MODE = 0o660


@pytest.fixture
def socket_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o755)
    return directory


@pytest.fixture
def opened() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def listening(opened: list[socket.socket], path: Path, mode: int = MODE, kind: int = socket.SOCK_STREAM,
              listen: bool = True) -> int:
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(path))
    os.chmod(path, mode)
    if listen:
        sock.listen()
    opened.append(sock)
    return sock.fileno()


def test_the_variables_are_removed_whatever_they_say() -> None:
    for pid in (str(os.getpid()), "1"):
        environ = {"LISTEN_PID": pid, "LISTEN_FDS": "0", "LISTEN_FDNAMES": "", "PATH": "/bin"}
        assert not InheritedSockets.from_environment(environ)
        assert environ == {"PATH": "/bin"}


def test_sockets_meant_for_another_process_are_ignored() -> None:
    environ = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "2"}
    assert not InheritedSockets.from_environment(environ)


@pytest.mark.parametrize(("fds", "names", "error"), [
    ("two", "", "is not a number"),
    ("2", "cri", "names 1 sockets but LISTEN_FDS=2"),
    ("400", "", "is not open"),
])
def test_malformed_variables_are_refused_in_one_line(fds: str, names: str, error: str) -> None:
    environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": fds, "LISTEN_FDNAMES": names}
    with pytest.raises(ActivationError, match=error):
        InheritedSockets.from_environment(environ)


def test_a_role_takes_its_named_socket_else_the_one_bound_to_its_path(
        socket_dir: Path, opened: list[socket.socket]) -> None:
    cri, admin = socket_dir / "rp.sock", socket_dir / "admin.sock"
    passed = InheritedSockets([PassedSocket(listening(opened, admin, 0o600), "koord-runtime-proxy"),
                               PassedSocket(listening(opened, cri), "koord-runtime-proxy")])
    taken = passed.take(cri, "cri", MODE)  # the same name twice: by path
    assert taken is not None and taken.getsockname() == str(cri)
    assert passed.take(socket_dir / "other.sock", "docker", MODE) is None  # none for it: the caller binds
    taken_admin = passed.take(admin, "admin", 0o600)
    assert taken_admin is not None and not passed
    for sock in (taken, taken_admin):
        sock.detach()  # the fixture closes them


def test_a_named_socket_must_be_bound_to_the_configured_path(socket_dir: Path, opened: list[socket.socket]) -> None:
    passed = InheritedSockets([PassedSocket(listening(opened, socket_dir / "elsewhere.sock"), "cri")])
    with pytest.raises(ActivationError, match="is bound to .*elsewhere.sock, not to .*rp.sock; set ListenStream="):
        passed.take(socket_dir / "rp.sock", "cri", MODE)


@pytest.mark.parametrize(("kind", "listen"), [(socket.SOCK_DGRAM, False), (socket.SOCK_STREAM, False)])
def test_anything_but_a_listening_unix_stream_socket_is_refused(
        socket_dir: Path, opened: list[socket.socket], kind: int, listen: bool) -> None:
    path = socket_dir / "rp.sock"
    passed = InheritedSockets([PassedSocket(listening(opened, path, kind=kind, listen=listen), "cri")])
    with pytest.raises(ActivationError, match="is not a listening unix stream socket; set ListenStream="):
        passed.take(path, "cri", MODE)


def test_a_socket_more_open_than_the_proxys_own_is_refused(socket_dir: Path, opened: list[socket.socket]) -> None:
    path = socket_dir / "rp.sock"
    passed = InheritedSockets([PassedSocket(listening(opened, path, 0o666), "cri")])
    with pytest.raises(ActivationError, match="has mode 0666, more open than 0660; set SocketMode=0660"):
        passed.take(path, "cri", MODE)
    assert opened[0].getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)  # refused, never closed


def test_a_socket_of_another_owner_or_in_an_open_directory_is_refused(
        socket_dir: Path, opened: list[socket.socket]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the socket away")
    path = socket_dir / "rp.sock"
    passed = InheritedSockets([PassedSocket(listening(opened, path), "cri")])
    os.chown(path, 65534, -1)
    with pytest.raises(ActivationError, match="owned by uid 65534.*set SocketUser=root"):
        passed.take(path, "cri", MODE)
    os.chown(path, 0, -1)
    socket_dir.chmod(0o777)
    passed = InheritedSockets([PassedSocket(opened[0].fileno(), "cri")])
    with pytest.raises(ActivationError, match="set DirectoryMode=0755"):
        passed.take(path, "cri", MODE)


def test_an_fd_that_is_no_socket_is_refused(socket_dir: Path) -> None:
    path = socket_dir / "rp.sock"
    with open(os.devnull) as not_a_socket:
        passed = InheritedSockets([PassedSocket(not_a_socket.fileno(), "cri")])
        with pytest.raises(ActivationError, match="is not a socket"):
            passed.take(path, "cri", MODE)


def test_looking_at_a_passed_fd_that_is_no_socket_leaks_nothing(socket_dir: Path) -> None:
    with open(os.devnull) as not_a_socket:
        before = len(os.listdir("/proc/self/fd"))
        assert PassedSocket(not_a_socket.fileno(), "cri").bound_path() is None
        assert len(os.listdir("/proc/self/fd")) == before


def test_a_path_through_a_link_is_the_same_place_as_systemd_writes_run_for_var_run(
        socket_dir: Path, opened: list[socket.socket]) -> None:
    (socket_dir.parent / "var-run").symlink_to(socket_dir)  # as /var/run -> /run
    passed = InheritedSockets([PassedSocket(listening(opened, socket_dir / "rp.sock"), "koord-runtime-proxy")])
    taken = passed.take(socket_dir.parent / "var-run" / "rp.sock", "cri", MODE)
    assert taken is not None
    taken.detach()
