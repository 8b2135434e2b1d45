"""Finding crictl/critest/cri-dockerd: PATH first, then the directory the env var names; a missing one is
named with where to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rplab import tools


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_path_wins_over_tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = executable(tmp_path / "path" / "crictl")
    executable(tmp_path / "tools" / "crictl")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, str(tmp_path / "tools"))
    assert tools.find_tool("crictl") == on_path


def test_env_var_names_the_tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_dir = executable(tmp_path / "tools" / "critest")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, str(in_dir.parent))
    assert tools.find_tool("critest") == in_dir
    assert tools.find_tool("nothing-like-this") is None


def test_without_the_env_var_only_path_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tools.TOOLS_DIR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tools.tools_dirs() == []
    assert tools.find_tool("crictl") is None


@pytest.mark.parametrize("name", ["crictl", "critest", "cri-dockerd"])
def test_the_missing_message_says_where_to_get_the_tool(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, "/opt/cri-tools")
    message = tools.missing_tool_message(name)
    releases, version = tools.RELEASES[name]
    assert message.startswith(f"{name} not found on PATH nor /opt/cri-tools")
    assert releases in message and version in message and tools.TOOLS_DIR_ENV in message
