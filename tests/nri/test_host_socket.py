"""The NRI socket is claimed and restricted as the proxy's CRI and admin sockets are (runtimeproxy.listener):
whoever connects to it as a plugin is sent every container's env and may mount the host into a container.

Before: it followed the umask (0777 under umask 000: a uid-65534 process registered as a plugin), and a
world-writable directory was accepted for it. The outsider here is a real process under uid 65534."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from tests.kits.machine import NOBODY, connect_as, traversable_directory
from runtimeproxy.listener import SocketInUseError, UnsafeSocketPath, lock_path_for, restrictive_umask
from runtimeproxy.nri.host import NriHost
from runtimeproxy.hooks.runtime import PluginAsks
from runtimeproxy.hooks.store import Store

from tests.kits.nrihost import host_on, run

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the outsider runs as uid 65534: needs root")


@needs_root
def test_under_umask_000_the_socket_is_0660_and_another_uid_cannot_connect() -> None:
    directory = traversable_directory(Path("/tmp"))
    path = directory / "nri.sock"

    async def scenario() -> None:
        with restrictive_umask(0o777):  # umask 000, as a badly started service would have it
            async with host_on(path, on_socket=True):
                assert stat.S_IMODE(path.stat().st_mode) == 0o660
                assert connect_as(0, path) == 0  # the check is the socket's mode, not the directory
                assert connect_as(NOBODY, path) == errno.EACCES
                assert lock_path_for(path).exists()
        assert not path.exists() and not lock_path_for(path).exists()
    try:
        run(scenario())
    finally:
        shutil.rmtree(directory)


def test_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)  # the CRI socket is refused here too
    with pytest.raises(UnsafeSocketPath, match=r"writable by group or others \(mode 0777\)"):
        run(NriHost(directory / "nri.sock", PluginAsks(Store())).start())
    assert not (directory / "nri.sock").exists()


def test_a_socket_held_by_a_live_server_is_refused_and_a_stale_one_is_taken(socket_path: Path) -> None:
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(socket_path))
    live.listen()
    with pytest.raises(SocketInUseError, match=r"NRI socket: .* \(a containerd with NRI enabled"):
        run(NriHost(socket_path, PluginAsks(Store())).start())
    assert socket_path.exists()
    live.close()  # the file stays, nobody listens

    async def stale_is_taken() -> None:
        async with host_on(socket_path, on_socket=True):
            assert connect_as(0, socket_path) == 0
    run(stale_is_taken())
