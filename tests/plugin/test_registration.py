"""The registration JSON, as the proxy's own config loader reads it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from runtimeproxy.plugin import registration, write_registration

CHECKOUT = Path(__file__).resolve().parents[2]  # a script's own directory comes first on sys.path, not cwd


def test_registration_document(tmp_path: Path) -> None:
    document = orjson.loads(registration(tmp_path / "p.sock", ["PreCreateContainer"], "Fail", 2))
    assert document == {"remote-endpoint": str(tmp_path / "p.sock"), "failure-policy": "Fail",
                        "runtime-hooks": ["PreCreateContainer"], "timeout-seconds": 2}


def test_written_0644_atomically_and_loaded_by_the_proxy(tmp_path: Path) -> None:
    from runtimeproxy.hooks.registry import PluginRegistry

    config_dir = tmp_path / "hookserver.d"
    config_dir.mkdir(mode=0o755)
    path = config_dir / "my-plugin.json"
    write_registration(path, registration(tmp_path / "p.sock", ["PreCreateContainer"]))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in config_dir.iterdir()) == ["my-plugin.json"]  # no temporary left
    registry = PluginRegistry(config_dir)
    registry.refresh()
    [plugin] = registry.plugins
    assert plugin.name == "my-plugin.json" and plugin.endpoint == tmp_path / "p.sock"


def test_print_registration_lists_the_hooks_the_plugin_defines(tmp_path: Path) -> None:
    source = tmp_path / "my_plugin.py"
    source.write_text(
        "from runtimeproxy.plugin import HookPlugin, main\n"
        "class MyPlugin(HookPlugin):\n"
        "    def pre_create_container(self, request):\n"
        "        return None\n"
        "raise SystemExit(main(MyPlugin()))\n")
    out = subprocess.run([sys.executable, str(source), "--socket", "unix:///run/my/plugin.sock",
                          "--print-registration", "--failure-policy", "Fail"],
                         check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(CHECKOUT)}).stdout
    assert orjson.loads(out) == {"remote-endpoint": "/run/my/plugin.sock", "failure-policy": "Fail",
                                 "runtime-hooks": ["PreCreateContainer"]}


def test_shadow_registers_a_new_version_on_trial(capsys: pytest.CaptureFixture[str]) -> None:
    """`--shadow`: a new plugin version goes straight into shadow, never live first (promote: unshadow)."""
    from runtimeproxy.plugin import HookPlugin, main

    class V2(HookPlugin):
        def pre_create_container(self, request: object) -> None:
            return None

    assert main(V2(), ["--socket", "/run/v2/plugin.sock", "--print-registration", "--shadow"]) == 0
    assert orjson.loads(capsys.readouterr().out) == {
        "remote-endpoint": "/run/v2/plugin.sock", "failure-policy": "Ignore", "runtime-hooks": ["PreCreateContainer"],
        "shadow": True}
