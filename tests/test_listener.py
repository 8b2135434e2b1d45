import os
import socket
import stat
from pathlib import Path

import pytest

from runtimeproxy.listener import (
    SocketInUseError,
    UnsafeSocketPath,
    claim_socket_path,
    lock_path_for,
    release_socket,
    restrict_socket,
)

NOBODY = 65534


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


# --- planted lock files and untrusted directories (issue 17) ---------------------------

def _precious(tmp_path: Path) -> Path:
    target = tmp_path / "precious"
    target.write_text("precious\n")
    os.chmod(target, 0o644)
    return target


def test_a_lock_file_planted_as_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "run" / "proxy.sock"
    path.parent.mkdir()
    target = _precious(tmp_path)
    lock_path_for(path).symlink_to(target)
    with pytest.raises(UnsafeSocketPath, match=f"refusing to use {lock_path_for(path)}: it is a symbolic link "
                                               f"\\(to {target}\\)"):
        claim_socket_path(path)
    assert target.read_text() == "precious\n" and lock_path_for(path).is_symlink()


def test_a_dangling_symbolic_link_is_not_followed_to_create_its_target(tmp_path: Path) -> None:
    path = tmp_path / "run" / "proxy.sock"
    path.parent.mkdir()
    lock_path_for(path).symlink_to(tmp_path / "created-by-root")
    with pytest.raises(UnsafeSocketPath, match="symbolic link"):
        claim_socket_path(path)
    assert not (tmp_path / "created-by-root").exists()


@pytest.mark.parametrize("plant", ["hard link", "fifo", "foreign owner"])
def test_a_lock_path_that_is_not_a_regular_file_of_ours_is_refused_untouched(tmp_path: Path, plant: str) -> None:
    path = tmp_path / "run" / "proxy.sock"
    path.parent.mkdir()
    lock = lock_path_for(path)
    target = _precious(tmp_path)
    if plant == "hard link":
        os.link(target, lock)
        problem = "has 2 hard links"
    elif plant == "fifo":
        os.mkfifo(lock)  # opening it must not block the start
        problem = "is not a regular file"
    else:
        lock.write_text("precious\n")
        os.chown(lock, NOBODY, NOBODY)
        problem = f"is owned by uid {NOBODY}, not by this proxy's user"
    with pytest.raises(UnsafeSocketPath, match=problem):
        claim_socket_path(path)
    assert target.read_text() == "precious\n"
    if plant != "fifo":
        assert lock.read_text() == "precious\n"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777], ids=lambda mode: f"{mode:04o}")
def test_a_socket_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "run" / "proxy.sock"
    path.parent.mkdir()
    os.chmod(path.parent, mode)
    with pytest.raises(UnsafeSocketPath, match=f"refusing to serve a socket in {path.parent}: directory "
                                               f"{path.parent} is writable by group or others \\(mode {mode:04o}\\)"):
        claim_socket_path(path)
    assert list(path.parent.iterdir()) == []  # no lock file created there


def test_a_socket_directory_of_another_user_or_below_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "up" / "run" / "proxy.sock"
    path.parent.mkdir(parents=True)
    os.chown(path.parent, NOBODY, NOBODY)
    with pytest.raises(UnsafeSocketPath, match=f"directory {path.parent} is owned by uid {NOBODY}"):
        claim_socket_path(path)
    os.chown(path.parent, 0, 0)
    os.chmod(tmp_path / "up", 0o777)
    with pytest.raises(UnsafeSocketPath, match=f"directory {tmp_path / 'up'} is writable by group or others"):
        claim_socket_path(path)


def test_missing_directories_are_created_0755_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "proxy.sock"
    previous = os.umask(0o002)
    try:
        claim_socket_path(path).release()
    finally:
        os.umask(previous)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "a", tmp_path / "a" / "b")] == [0o755, 0o755]
