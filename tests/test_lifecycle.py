"""The proxy process gives back its sockets and their lock files on every way it stops, in both modes,
and never follows a lock file someone planted as a link nor serves from a directory others can write.

Real processes (`python -m runtimeproxy`) with private paths; no backend is needed: the proxy starts and
serves without one. A path over the unix socket limit (107 bytes) is the start-up failure that comes after
the socket's lock was taken.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.kits.machine import require_command, skip_or_fail
from rplab.process import ProxyProcess
from runtimeproxy.hooks.journal import JOURNAL_FILE_NAME
from runtimeproxy.listener import lock_path_for

MODES = ["Containerd", "Docker"]
LISTENING_WAIT_SECONDS = 30.0
TOO_LONG_DIR_NAME = "x" * 110  # a socket below it is over the 107-byte limit


def _proxy(tmp_path: Path, mode: str, listen_dir: Path | None = None, admin_dir: Path | None = None) -> ProxyProcess:
    proxy = ProxyProcess((listen_dir or tmp_path / "main") / "rp.sock", tmp_path / "absent.sock",
                         hook_config_dir=tmp_path / "hooks", log_path=tmp_path / "proxy.log",
                         extra_args=[f"--backend-runtime-mode={mode}"])
    proxy.admin_path = (admin_dir or tmp_path / "admin") / "admin.sock"  # a directory of its own
    return proxy


def _wait_listening(proxy: ProxyProcess) -> None:
    """Until the start-up line is logged (it comes after the admin endpoint started or failed)."""
    deadline = time.monotonic() + LISTENING_WAIT_SECONDS
    while "listening on" not in proxy.log_path.read_text(errors="replace"):
        assert proxy.returncode() is None, proxy.log_tail()
        assert time.monotonic() < deadline, proxy.log_tail()
        time.sleep(0.05)


def _failed_start(proxy: ProxyProcess) -> tuple[int, str]:
    """Run a proxy that is expected to fail its start; its exit code and log (bounded: stop() ends it)."""
    proxy.spawn()
    deadline = time.monotonic() + LISTENING_WAIT_SECONDS
    while proxy.returncode() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proxy.stop(), proxy.log_path.read_text()


def _leftovers(*directories: Path) -> list[Path]:
    """What is left beside the sockets; the state directory persists by design, with its journal of calls in flight
    (hooks.journal: the next proxy reads it), but not its lock."""
    found = [path for directory in directories if directory.is_dir() for path in directory.iterdir()]
    return sorted(path for path in found if path.name != "state"
                  or any(kept.name != JOURNAL_FILE_NAME for kept in path.iterdir()))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("mode", MODES)
def test_a_signal_removes_both_sockets_and_their_locks(tmp_path: Path, mode: str, signum: int) -> None:
    proxy = _proxy(tmp_path, mode)
    proxy.spawn()
    _wait_listening(proxy)
    assert proxy.listen_path.is_socket() and proxy.admin_path.is_socket()
    assert proxy.pid is not None
    os.kill(proxy.pid, signum)
    assert proxy.stop() == 0, proxy.log_tail()
    assert _leftovers(proxy.listen_path.parent, proxy.admin_path.parent) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_start_after_the_lock_leaves_no_lock(tmp_path: Path, mode: str) -> None:
    proxy = _proxy(tmp_path, mode, listen_dir=tmp_path / TOO_LONG_DIR_NAME)
    code, log = _failed_start(proxy)
    assert code == 1 and "cannot start" in log
    assert _leftovers(proxy.listen_path.parent, proxy.admin_path.parent) == []


@pytest.mark.parametrize("mode", MODES)
def test_an_admin_socket_that_fails_to_start_gives_its_lock_back_at_once(tmp_path: Path, mode: str) -> None:
    proxy = _proxy(tmp_path, mode, admin_dir=tmp_path / TOO_LONG_DIR_NAME)
    proxy.spawn()
    _wait_listening(proxy)
    assert "admin API not available" in proxy.log_path.read_text()
    assert _leftovers(proxy.admin_path.parent) == []  # while the proxy goes on serving
    assert proxy.stop() == 0, proxy.log_tail()
    assert _leftovers(proxy.listen_path.parent) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_second_proxy_leaves_the_first_ones_sockets_and_locks(tmp_path: Path, mode: str) -> None:
    first = _proxy(tmp_path, mode)
    first.spawn()
    _wait_listening(first)
    second = _proxy(tmp_path / "second", mode, listen_dir=first.listen_path.parent)
    code, log = _failed_start(second)  # its failed start must not remove what the first one holds
    assert code == 1 and "served by another running process" in log
    assert (f"ERROR runtimeproxy.app: --koord-runtimeproxy-endpoint: {first.listen_path} is served by another "
            "running process") in log and log.rstrip().endswith(
                "; give --koord-runtimeproxy-endpoint a path no other process serves"), log
    names = [path.name for path in _leftovers(first.listen_path.parent, first.admin_path.parent)]
    relay = [".rp.sock.relay"] if mode == "Containerd" else []  # the frame relay's gRPC server (CRI mode)
    assert names == ["admin.sock", "admin.sock.lock", *relay, "rp.sock", "rp.sock.lock", "state"]
    assert (first.listen_path.parent / "state" / "toggles.json.lock").is_file()  # the first one's state lock
    assert first.stop() == 0, first.log_tail()


@pytest.mark.parametrize("mode", MODES)
def test_a_second_proxy_on_the_same_state_dir_is_refused_naming_it(tmp_path: Path, mode: str) -> None:
    """Two proxies on one node (CRI and Docker side by side) never share toggles: the second is refused."""
    first = _proxy(tmp_path, mode)
    first.spawn()
    _wait_listening(first)
    second = _proxy(tmp_path / "second", mode, admin_dir=tmp_path / "second-admin")
    second.extra_args.append(f"--state-dir={first.listen_path.parent / 'state'}")  # the first one's
    code, log = _failed_start(second)
    assert code == 1
    assert f"{first.listen_path.parent / 'state' / 'toggles.json'} belongs to another running proxy (pid {first.pid}" \
        in log and "give each proxy its own --state-dir" in log
    assert first.stop() == 0, first.log_tail()


def _planted_link(lock: Path, tmp_path: Path) -> Path:
    """`lock` as a symbolic link to a root-owned file (what the proxy, as root, must never truncate)."""
    target = tmp_path / "precious"
    target.write_text("precious\n")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.symlink_to(target)
    return target


def _only_line(log: str) -> str:
    """The one line a refused start logs (and nothing else)."""
    (line,) = log.splitlines()
    return line


@pytest.mark.parametrize("mode", MODES)
def test_a_lock_file_planted_as_a_link_stops_the_start_in_one_line_and_its_target_is_untouched(
    tmp_path: Path, mode: str,
) -> None:
    proxy = _proxy(tmp_path, mode)
    lock = lock_path_for(proxy.listen_path)
    target = _planted_link(lock, tmp_path)
    code, log = _failed_start(proxy)
    assert code == 1, log
    assert target.read_text() == "precious\n"
    assert f"cannot start: refusing to use {lock}: it is a symbolic link (to {target})" in _only_line(log)
    assert _leftovers(proxy.listen_path.parent) == [lock]  # left for the operator to look at


@pytest.mark.parametrize("mode", MODES)
def test_a_socket_directory_others_can_write_stops_the_start_naming_it(tmp_path: Path, mode: str) -> None:
    proxy = _proxy(tmp_path, mode)
    proxy.listen_path.parent.mkdir()
    os.chmod(proxy.listen_path.parent, 0o777)
    code, log = _failed_start(proxy)
    assert code == 1, log
    assert (f"cannot start: refusing to serve a socket in {proxy.listen_path.parent}: directory "
            f"{proxy.listen_path.parent} is writable by group or others (mode 0777)") in _only_line(log)
    assert _leftovers(proxy.listen_path.parent) == []


def test_an_admin_lock_planted_as_a_link_costs_only_the_admin_api(tmp_path: Path) -> None:
    proxy = _proxy(tmp_path, "Containerd")
    lock = lock_path_for(proxy.admin_path)
    target = _planted_link(lock, tmp_path)
    proxy.spawn()
    _wait_listening(proxy)
    assert f"admin API not available (runtimeproxyctl will not work): refusing to use {lock}" in proxy.log_tail()
    assert target.read_text() == "precious\n"
    assert proxy.stop() == 0, proxy.log_tail()
    assert _leftovers(proxy.admin_path.parent) == [lock]


@pytest.mark.parametrize("flag", ["--state-dir", "--koord-runtimeproxy-endpoint", "--nri-socket"])
def test_a_path_the_proxy_cannot_create_is_one_line_naming_the_flag_and_the_fix(tmp_path: Path, flag: str) -> None:
    """A state directory or socket beneath a file (as beneath a read-only mount): `cannot start: FLAG PATH: reason;
    give FLAG ...`, exit 1, no errno."""
    (tmp_path / "a-file").write_text("")
    beneath = tmp_path / "a-file" / ("state" if flag == "--state-dir" else "x.sock")
    proxy = _proxy(tmp_path, "Containerd", listen_dir=beneath.parent if flag == "--koord-runtimeproxy-endpoint"
                   else None)
    if flag == "--koord-runtimeproxy-endpoint":
        beneath = proxy.listen_path
    else:
        proxy.extra_args.append(f"{flag}={beneath}")
    code, log = _failed_start(proxy)
    line = next(line for line in log.splitlines() if "ERROR" in line)
    assert code == 1 and "[Errno" not in log, log
    assert f"cannot start: {flag} {beneath}: Not a directory" in line and f"; give {flag} a " in line, line


def test_an_admin_socket_the_proxy_cannot_create_names_the_flag_the_fix_and_how_to_turn_it_off(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    proxy = _proxy(tmp_path, "Containerd", admin_dir=tmp_path / "a-file")
    proxy.spawn()
    _wait_listening(proxy)
    assert proxy.stop() == 0, proxy.log_tail()
    [line] = [line for line in proxy.log_path.read_text().splitlines() if "ERROR" in line]
    assert (f"admin API not available (runtimeproxyctl will not work): --admin-endpoint {proxy.admin_path}: "
            "Not a directory") in line and "(--admin-endpoint= turns it off)" in line, line


def test_a_world_writable_config_directory_is_warned_at_start_with_the_fix(tmp_path: Path) -> None:
    proxy = _proxy(tmp_path, "Containerd")
    proxy.hook_config_dir.mkdir()
    proxy.hook_config_dir.chmod(0o777)
    proxy.spawn()
    _wait_listening(proxy)
    assert proxy.stop() == 0, proxy.log_tail()
    [line] = [line for line in proxy.log_path.read_text().splitlines() if "not trusted" in line]
    assert " WARNING " in line and "writable by group or others (mode 0777)" in line, line
    assert line.endswith(f"no file in it is used until: chmod go-w {proxy.hook_config_dir}"), line


def test_a_read_only_state_dir_names_the_flag_and_the_fix(tmp_path: Path) -> None:
    """The mistake as made: a --state-dir on a read-only file system (a read-only tmpfs in a private mount namespace,
    gone with the proxy)."""
    if os.geteuid() != 0:
        skip_or_fail("needs root for a private mount namespace")
    unshare = require_command("unshare", "util-linux")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    proxy = _proxy(tmp_path, "Containerd")
    proxy.extra_args.append(f"--state-dir={read_only / 'state'}")
    command = f"mount -t tmpfs -o ro tmpfs {read_only} && exec {shlex.join(proxy.argv)}"
    done = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", command],
                          capture_output=True, text=True, timeout=60)
    [line] = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert done.returncode == 1, done.stderr
    assert line.endswith(f"cannot start: --state-dir {read_only / 'state'}: Read-only file system; give --state-dir a "
                         "directory this user may create and write (the proxy keeps its plugin toggles there)"), line
