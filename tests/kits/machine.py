"""What a test needs from the machine, in one place.

A part the project installs itself (scripts/setup.sh) that is missing fails the run in CI
(RUNTIMEPROXY_REQUIRE_E2E set) and skips the test elsewhere. crictl and critest are built from the project's
Go module (rplab.peers): one that does not build fails the test, everywhere. cri-dockerd, which no registry here
carries, skips, in CI too, with a message saying how to install it (unless RUNTIMEPROXY_REQUIRE_CLIENTS is set);
the run's summary lists those skips (tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rplab.images import IMAGE_CACHE  # noqa: F401  (the tests import it from here)
from rplab.peers import PeerBuildError
from rplab.tools import find_tool, missing_tool_message

REQUIRE_E2E_ENV = "RUNTIMEPROXY_REQUIRE_E2E"
# Set by a CI that installed cri-dockerd: then a missing one fails instead of skipping.
REQUIRE_CLIENTS_ENV = "RUNTIMEPROXY_REQUIRE_CLIENTS"


def skip_or_fail(reason: str) -> None:
    """Never returns: fails when e2e tests are required, skips otherwise."""
    if os.environ.get(REQUIRE_E2E_ENV):
        pytest.fail(reason)
    pytest.skip(reason)


def built_peer(name: str, what: str) -> Path:
    """The binary of peer `name` (built on first use); a build that fails skips or fails the test, saying `what`."""
    from rplab.peers import PeerBuildError, peer_binary
    try:
        return peer_binary(name)
    except PeerBuildError as error:
        skip_or_fail(f"cannot build {what}: {error}")
        raise


# Every skip for a missing third-party client starts with this, so the summary can count them.
MISSING_CLIENT_SKIP = "third-party CRI client missing"


def require_tool(name: str) -> Path:
    """A third-party CRI client: crictl and critest built from peers/ (fails when that build fails);
    cri-dockerd on PATH or in $RUNTIMEPROXY_TOOLS_DIR (skips without)."""
    try:
        path = find_tool(name)
    except PeerBuildError as error:
        pytest.fail(f"{name} did not build: {error}")
    if path is None:
        reason = f"{MISSING_CLIENT_SKIP}: {missing_tool_message(name)}"
        if os.environ.get(REQUIRE_CLIENTS_ENV):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def missing_client_skips(skip_reasons: list[str]) -> dict[str, int]:
    """How many tests each missing client's skip message stands behind: {message: count}."""
    counts: dict[str, int] = {}
    for reason in skip_reasons:
        _, marker, message = reason.partition(f"{MISSING_CLIENT_SKIP}: ")
        if marker:
            counts[message] = counts.get(message, 0) + 1
    return counts


def require_command(name: str, debian_package: str) -> str:
    """A command from a Debian package that scripts/setup.sh installs."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} (Debian package {debian_package}) is not installed; run scripts/setup.sh")
    assert path is not None
    return path


NOBODY = 65534


def connect_as(uid: int, socket_path: Path) -> int:
    """connect() to a unix socket from a forked child running as `uid` (no supplementary groups): 0 if it
    connected, else the errno (EACCES: the socket's mode or a directory on its way kept it out)."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only connects and exits
        code = 0
        try:
            import socket
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(socket_path))
        except OSError as error:
            code = error.errno or 255
        os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def traversable_directory(parent: Path) -> Path:
    """A fresh root-owned 0755 directory under `parent` (itself traversable: /tmp), so that what keeps another
    uid out of a socket inside is the socket's own mode."""
    import tempfile
    directory = Path(tempfile.mkdtemp(dir=parent))
    directory.chmod(0o755)
    return directory


def refused_dials(socket_path: Path, count: int) -> int:
    """`count` non-blocking connect()s to a unix socket, all open at once (as a burst of clients): how many the
    kernel refused with EAGAIN because the listener's backlog was full."""
    import errno
    import socket
    probes, refused = [], 0
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.setblocking(False)
            probes.append(probe)
            try:
                probe.connect(str(socket_path))
            except BlockingIOError as error:
                assert error.errno == errno.EAGAIN, error
                refused += 1
    finally:
        for probe in probes:
            probe.close()
    return refused


@contextmanager
def tcp_server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on 127.0.0.1 calling `handle` on each connection (then closing it) in a thread, for the
    block; its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                handle(connection)

    threading.Thread(target=serve, name="tcp-server", daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
