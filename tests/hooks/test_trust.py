from __future__ import annotations

import os
from pathlib import Path

from runtimeproxy.hooks.trust import TrustedOwners


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
