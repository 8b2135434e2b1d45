import os
import socket
import stat
from pathlib import Path

import pytest

from runtimeproxy.listener import (
    SocketInUseError,
    claim_socket_path,
    lock_path_for,
    release_socket,
    restrict_socket,
)


def _bound_socket(path: Path, listening: bool) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    if listening:
        sock.listen(1)
    return sock


def test_creates_missing_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "proxy.sock"
    claim_socket_path(path).release()
    assert path.parent.is_dir()


def test_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    _bound_socket(path, listening=False).close()  # leaves the file, nobody listens
    claim_socket_path(path).release()
    assert not path.exists()


def test_live_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    live = _bound_socket(path, listening=True)
    try:
        with pytest.raises(SocketInUseError, match="another running process"):
            claim_socket_path(path)
        assert path.exists()
    finally:
        live.close()


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    path.write_text("precious")
    with pytest.raises(SocketInUseError, match="not a socket"):
        claim_socket_path(path)
    assert path.read_text() == "precious"


def test_restrict_sets_0660_and_release_removes_only_our_socket(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    sock = _bound_socket(path, listening=True)
    inode = restrict_socket(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o660
    other = _bound_socket(tmp_path / "other.sock", listening=True)
    (tmp_path / "other.sock").rename(path)  # someone else's socket took the path
    sock.close()
    try:
        release_socket(path, inode)
        assert path.exists()
    finally:
        other.close()
    release_socket(path, path.stat().st_ino)
    assert not path.exists()
    release_socket(path, None)  # already gone: no error


def test_the_lock_beside_the_socket_refuses_a_second_claim_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    lock = claim_socket_path(path)
    try:
        assert lock_path_for(path).read_text().strip() == str(os.getpid())
        with pytest.raises(SocketInUseError, match=f"pid {os.getpid()} holds .*proxy.sock.lock"):
            claim_socket_path(path)
    finally:
        lock.release()
    assert not lock_path_for(path).exists()
    claim_socket_path(path).release()  # free again


def test_a_lock_file_left_by_a_dead_process_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    lock_path_for(path).write_text("999999\n")  # nobody holds a flock on it
    lock = claim_socket_path(path)
    assert lock_path_for(path).read_text().strip() == str(os.getpid())
    lock.release()


def test_a_refused_claim_leaves_the_lock_free(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sock"
    path.write_text("precious")
    with pytest.raises(SocketInUseError, match="not a socket"):
        claim_socket_path(path)
    path.unlink()
    claim_socket_path(path).release()
