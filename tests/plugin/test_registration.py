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


MY_PLUGIN = (
    "from runtimeproxy.plugin import HookPlugin, main\n"
    "class MyPlugin(HookPlugin):\n"
    "    def pre_create_container(self, request):\n"
    "        return None\n"
    "raise SystemExit(main(MyPlugin()))\n")


def _run_plugin(tmp_path: Path, *args: str, stop_after: float = 3.0) -> subprocess.CompletedProcess[str]:
    """Run a kit plugin as the README does; SIGTERM it after `stop_after` seconds if it is still serving."""
    source = tmp_path / "my_plugin.py"
    source.write_text(MY_PLUGIN)
    process = subprocess.Popen([sys.executable, str(source), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(CHECKOUT)})
    try:
        out, err = process.communicate(timeout=stop_after)
    except subprocess.TimeoutExpired:
        process.terminate()
        out, err = process.communicate(timeout=10)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_register_creates_a_missing_config_directory_the_proxy_trusts(tmp_path: Path) -> None:
    """The README's `--register /etc/runtime/hookserver.d/my-plugin.json` on a node without that directory:
    created 0755 (whatever the umask), registered, and read by the proxy's own registry."""
    from runtimeproxy.hooks.registry import PluginRegistry

    config_dir = tmp_path / "etc" / "runtime" / "hookserver.d"
    old_umask = os.umask(0o002)  # a group-writable default must not make the directory untrusted
    try:
        done = _run_plugin(tmp_path, "--socket", str(tmp_path / "run" / "plugin.sock"),
                           "--register", str(config_dir / "my-plugin.json"))
    finally:
        os.umask(old_umask)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    for directory in (config_dir, config_dir.parent, config_dir.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755, directory
    registry = PluginRegistry(config_dir)
    registry.refresh()
    assert [plugin.name for plugin in registry.plugins] == ["my-plugin.json"]
    assert registry.directory_problem() == ""
    assert not (tmp_path / "run" / "plugin.sock").exists()  # removed on SIGTERM


def test_a_registration_that_cannot_be_written_is_one_line_and_leaves_no_socket(tmp_path: Path) -> None:
    (tmp_path / "not-a-directory").write_text("")
    socket = tmp_path / "run" / "plugin.sock"
    done = _run_plugin(tmp_path, "--socket", str(socket), "--register", str(tmp_path / "not-a-directory" / "p.json"))
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "--register" in line and "not-a-directory" in line and "hookserver.d" in line, line
    assert not socket.exists()


def test_an_untrusted_registration_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    """A group-writable directory: the proxy would ignore every file in it, so the kit says so and stops."""
    config_dir = tmp_path / "hookserver.d"
    config_dir.mkdir()
    config_dir.chmod(0o775)
    socket = tmp_path / "run" / "plugin.sock"
    done = _run_plugin(tmp_path, "--socket", str(socket), "--register", str(config_dir / "p.json"))
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "writable by group or others" in line and "chmod go-w" in line, line
    assert not socket.exists() and not (config_dir / "p.json").exists()


def test_serving_where_the_proxy_refuses_to_call_is_warned_at_start(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"  # as /tmp: sticky, writable by all
    shared.mkdir()
    shared.chmod(0o1777)
    done = _run_plugin(tmp_path, "--socket", str(shared / "plugin.sock"), stop_after=2)
    [line] = done.stderr.splitlines()
    assert line.startswith("warning: the proxy refuses every call to this plugin (PERMISSION_DENIED)"), line
    assert done.returncode == 0  # it serves all the same: try-plugin still works


def test_a_registration_the_proxy_would_not_read_is_refused_in_one_line(tmp_path: Path) -> None:
    socket = tmp_path / "run" / "plugin.sock"
    done = _run_plugin(tmp_path, "--socket", str(socket), "--register", str(tmp_path / "my-plugin.conf"))
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "only files named NAME.json" in line and str(tmp_path / "my-plugin.json") in line, line
    assert not socket.exists()


@pytest.mark.parametrize("args, message", [
    ((), "the following arguments are required: --socket"),
    (("--socket", "/run/p.sock", "--failure-policy", "Bogus"), "argument --failure-policy: invalid choice: 'Bogus'"),
    (("--socket", "/run/p.sock", "--socket-mode", "99x"), "'99x' is not a permission mode in octal, e.g. 0660"),
    (("--socket", "tcp://127.0.0.1:1"), "argument --socket: 'tcp://127.0.0.1:1': only unix sockets"),
    # a timeout the proxy would refuse in the registration file, said before anything is registered
    (("--socket", "/run/p.sock", "--timeout-seconds", "0"), "'0' is not a number of seconds above 0"),
])
def test_a_bad_argument_is_one_line_naming_help_with_the_usage_exit_code(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """As runtimeproxyctl says it (runtimeproxy.usage), not argparse's usage dump."""
    done = _run_plugin(tmp_path, *args)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("my_plugin.py: error: ") and line.endswith(" (see --help)") and message in line, line
