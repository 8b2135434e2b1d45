"""Finding the CRI clients: crictl and critest are the peers built from peers/, whatever PATH has; cri-dockerd
comes from PATH first, then the directory the env var names, and a missing one is named with where to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rplab import tools


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("name", tools.BUILT_TOOLS)
def test_built_clients_come_from_the_peers_never_from_path(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(executable(tmp_path / "path" / name).parent))
    built = tmp_path / "peers" / name
    monkeypatch.setattr(tools, "peer_binary", lambda peer: built if peer == name else None)
    assert tools.find_tool(name) == built


def test_built_clients_are_peers() -> None:
    from rplab.peers import PEERS

    assert set(tools.BUILT_TOOLS) <= set(PEERS)
    assert PEERS["critest"].test_binary


def test_path_wins_over_tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = executable(tmp_path / "path" / "cri-dockerd")
    executable(tmp_path / "tools" / "cri-dockerd")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, str(tmp_path / "tools"))
    assert tools.find_tool("cri-dockerd") == on_path


def test_env_var_names_the_tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_dir = executable(tmp_path / "tools" / "cri-dockerd")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, str(in_dir.parent))
    assert tools.find_tool("cri-dockerd") == in_dir
    assert tools.find_tool("nothing-like-this") is None


def test_without_the_env_var_only_path_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tools.TOOLS_DIR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tools.tools_dirs() == []
    assert tools.find_tool("cri-dockerd") is None


def test_the_missing_message_says_where_to_get_cri_dockerd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tools.TOOLS_DIR_ENV, "/opt/cri-tools")
    message = tools.missing_tool_message("cri-dockerd")
    releases, version = tools.RELEASES["cri-dockerd"]
    assert message.startswith("cri-dockerd not found on PATH nor /opt/cri-tools")
    assert releases in message and version in message and tools.TOOLS_DIR_ENV in message
