from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimeproxy.trust import TrustedOwners


def test_root_and_the_proxy_user_are_always_trusted() -> None:
    assert TrustedOwners.with_extra([1000]).uids == {0, os.geteuid(), 1000}


def test_files_need_a_trusted_owner_and_no_group_or_other_write(tmp_path: Path) -> None:
    owners = TrustedOwners(frozenset({0}))
    path = tmp_path / "f"
    path.write_bytes(b"")
    os.chmod(path, 0o644)
    assert owners.file_problem("f", os.stat(path)) is None
    os.chmod(path, 0o620)
    assert owners.file_problem("f", os.stat(path)) == "f is writable by group or others (mode 0620)"
    os.chmod(path, 0o644)
    os.chown(path, 65534, 65534)
    assert owners.file_problem("f", os.stat(path)) == "f is owned by uid 65534, not a trusted owner (trusted uids: 0)"


def test_sockets_need_only_a_trusted_owner(tmp_path: Path) -> None:
    owners = TrustedOwners(frozenset({0}))
    path = tmp_path / "s"
    path.write_bytes(b"")
    os.chmod(path, 0o777)  # plugin sockets are often world-connectable
    assert owners.owner_problem("s", os.stat(path)) is None


# --- whole socket paths (sshd's StrictModes walk) ---------------------------------------

NOBODY = 65534
ROOT_ONLY = TrustedOwners(frozenset({0}))


def _socket_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")  # the walk looks at owners and modes only: any file stands in for a socket
    return path


def test_a_socket_in_directories_only_trusted_users_can_write_is_trusted(tmp_path: Path) -> None:
    assert ROOT_ONLY.socket_path_problem(_socket_file(tmp_path / "run" / "p.sock")) is None


def test_a_missing_socket_is_trusted_only_where_no_untrusted_user_could_create_it(tmp_path: Path) -> None:
    assert ROOT_ONLY.socket_path_problem(tmp_path / "run" / "p.sock") is None  # the connect fails on its own
    (tmp_path / "run").mkdir(mode=0o755)
    assert ROOT_ONLY.socket_path_problem(tmp_path / "run" / "p.sock") is None
    os.chmod(tmp_path / "run", 0o1777)
    assert ROOT_ONLY.socket_path_problem(tmp_path / "run" / "p.sock") == (
        f"{tmp_path}/run/p.sock does not exist and directory {tmp_path}/run is writable by group or others "
        "(mode 1777): anyone could create it"
    )
    assert "anyone could create it" in ROOT_ONLY.socket_path_problem(tmp_path / "run" / "sub" / "p.sock")


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_the_socket_s_own_directory_may_not_be_writable_by_others_even_if_sticky(tmp_path: Path, mode: int) -> None:
    socket = _socket_file(tmp_path / "run" / "p.sock")
    os.chmod(socket.parent, mode)
    problem = ROOT_ONLY.socket_path_problem(socket)
    assert problem is not None and f"directory {socket.parent}" in problem and f"mode {mode:04o}" in problem


def test_a_writable_directory_further_up_is_refused_unless_sticky(tmp_path: Path) -> None:
    socket = _socket_file(tmp_path / "up" / "run" / "p.sock")
    os.chmod(tmp_path / "up", 0o777)
    assert ROOT_ONLY.socket_path_problem(socket) == (
        f"directory {tmp_path}/up is writable by group or others (mode 0777)"
    )
    os.chmod(tmp_path / "up", 0o1777)  # like /tmp: only an entry's owner may rename or remove it
    assert ROOT_ONLY.socket_path_problem(socket) is None
    os.chown(tmp_path / "up" / "run", NOBODY, NOBODY)
    assert ROOT_ONLY.socket_path_problem(socket) == (
        f"directory {tmp_path}/up/run is owned by uid {NOBODY}, not a trusted owner (trusted uids: 0)"
    )


def test_the_socket_and_every_link_on_the_way_need_a_trusted_owner(tmp_path: Path) -> None:
    socket = _socket_file(tmp_path / "real" / "p.sock")
    (tmp_path / "link").symlink_to("real")  # relative, like /var/run -> ../run elsewhere
    (tmp_path / "real" / "up").symlink_to("../real/p.sock")
    assert ROOT_ONLY.socket_path_problem(tmp_path / "link" / "up") is None
    os.lchown(tmp_path / "link", NOBODY, NOBODY)
    assert ROOT_ONLY.socket_path_problem(tmp_path / "link" / "up") == (
        f"symbolic link {tmp_path}/link is owned by uid {NOBODY}, not a trusted owner (trusted uids: 0)"
    )
    os.chown(socket, NOBODY, NOBODY)
    assert ROOT_ONLY.socket_path_problem(socket) == (
        f"socket {socket} is owned by uid {NOBODY}, not a trusted owner (trusted uids: 0)"
    )


def test_links_are_checked_where_they_lead(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir(mode=0o755)
    os.chmod(tmp_path / "open", 0o777)
    _socket_file(tmp_path / "open" / "p.sock")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "p.sock").symlink_to(tmp_path / "open" / "p.sock")  # absolute
    assert "directory " + str(tmp_path / "open") in ROOT_ONLY.socket_path_problem(tmp_path / "run" / "p.sock")


def test_paths_that_cannot_be_walked_raise(tmp_path: Path) -> None:
    _socket_file(tmp_path / "file")
    with pytest.raises(NotADirectoryError):
        ROOT_ONLY.socket_path_problem(tmp_path / "file" / "p.sock")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        ROOT_ONLY.socket_path_problem(tmp_path / "loop")


def test_directories_for_our_own_sockets_follow_the_file_rule_along_the_whole_chain(tmp_path: Path) -> None:
    run = tmp_path / "up" / "run"
    run.mkdir(parents=True)
    assert ROOT_ONLY.directory_chain_problem(run) is None
    os.chmod(run, 0o1777)
    assert ROOT_ONLY.directory_chain_problem(run) == f"directory {run} is writable by group or others (mode 1777)"
    os.chmod(run, 0o755)
    os.chmod(tmp_path / "up", 0o777)
    assert ROOT_ONLY.directory_chain_problem(run) == (
        f"directory {tmp_path}/up is writable by group or others (mode 0777)"
    )
    with pytest.raises(FileNotFoundError):
        ROOT_ONLY.directory_chain_problem(tmp_path / "absent")
