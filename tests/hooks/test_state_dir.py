"""The state directory's claim (hooks.service.claim_state_dir): a full disk (or quota) is the node's condition, and
the proxy serves without the directory; one this user may not write, or on a read-only disk, is a wrong flag."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from runtimeproxy.hooks import service as service_module
from runtimeproxy.hooks.service import claim_state_dir
from runtimeproxy.listener import SocketLock
from runtimeproxy.usage import FlagError


def failing_lock(code: int):  # type: ignore[no-untyped-def]
    def lock(path: Path, in_use: str = "") -> SocketLock:
        raise OSError(code, errno.errorcode[code])
    return lock


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_said_and_the_proxy_goes_on_without_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int) -> None:
    monkeypatch.setattr(service_module, "lock_socket_path", failing_lock(code))
    assert claim_state_dir(tmp_path / "state") is None
    said, = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert str(tmp_path / "state") in said and "serving without it" in said


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_a_directory_this_user_may_not_write_is_still_a_wrong_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   code: int) -> None:
    monkeypatch.setattr(service_module, "lock_socket_path", failing_lock(code))
    with pytest.raises(FlagError, match="--state-dir"):
        claim_state_dir(tmp_path / "state")


def test_a_writable_directory_is_locked_for_the_process(tmp_path: Path) -> None:
    lock = claim_state_dir(tmp_path / "state")
    assert lock is not None and lock.path.exists()
    lock.release()
