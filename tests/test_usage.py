"""runtimeproxy.usage: a user mistake's one line."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from runtimeproxy.usage import FlagError, OneLineParser, flag_problem, naming_flag, os_reason


def test_a_usage_error_is_one_line_naming_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = OneLineParser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--n", "x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "tool: error: argument --n: invalid int value: 'x' (see --help)\n"


def test_an_os_error_is_said_without_its_errno() -> None:
    assert os_reason(OSError(errno.EROFS, "Read-only file system", "/ro/state")) == \
        "Read-only file system: '/ro/state'"
    # asyncio's bind errors put their own words in strerror: the errno's are shorter
    assert os_reason(OSError(errno.EADDRINUSE, "error while attempting to bind on address ('::', 1): address "
                             "already in use")) == "Address already in use"
    assert os_reason(OSError("no errno")) == "no errno"
    assert os_reason(socket.gaierror(socket.EAI_NONAME, "Name or service not known")) == "Name or service not known"


def test_a_flag_problem_names_the_file_once_when_it_is_the_value() -> None:
    error = OSError(errno.EROFS, "Read-only file system", "/ro/state")
    assert flag_problem("--state-dir", Path("/ro/state"), error, "fix it") == \
        "--state-dir /ro/state: Read-only file system; fix it"
    assert flag_problem("--state-dir", Path("/ro/state/x"), error, "fix it") == \
        "--state-dir /ro/state/x: Read-only file system: '/ro/state'; fix it"


def test_naming_flag_turns_an_os_error_into_a_flag_error() -> None:
    with pytest.raises(FlagError, match=r"^--nri-socket /x/s\.sock: Permission denied: '/x'; fix$"):
        with naming_flag("--nri-socket", "/x/s.sock", "fix"):
            raise PermissionError(errno.EACCES, "Permission denied", "/x")
