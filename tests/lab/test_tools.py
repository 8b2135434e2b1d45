"""Finding crictl/critest: PATH first, then the shared tools dir (or the directory the env var names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimeproxy.lab import tools


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


def test_default_is_shared_bin_beside_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tools.TOOLS_DIR_ENV, raising=False)
    assert tools.tools_dirs() == [tools.REPO_ROOT.parent / "shared" / "bin"]
    message = tools.missing_tool_message("critest")
    assert tools.TOOLS_DIR_ENV in message and tools.RELEASES_URL in message


def test_the_message_for_cri_dockerd_names_its_own_releases() -> None:
    assert tools.OTHER_RELEASES_URLS["cri-dockerd"] in tools.missing_tool_message("cri-dockerd")
