import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy import __version__
from runtimeproxy.cli import parse_command_line, parse_options
from runtimeproxy.klogflags import LOG_DIR_FILE_NAME
from rplab.process import ProxyProcess
from runtimeproxy.options import (
    DEFAULT_ADMIN_SOCKET, DEFAULT_DOCKER_SOCKET, DEFAULT_METRICS_ADDRESS, DEFAULT_PROXY_SOCKET, DEFAULT_RUNTIME_SOCKET,
    DEFAULT_STATE_DIR,
)


def test_defaults_match_koord_runtime_proxy() -> None:
    options, level = parse_options([])
    assert options.listen_path == DEFAULT_PROXY_SOCKET
    assert options.runtime_path == DEFAULT_RUNTIME_SOCKET
    assert options.effective_image_path == DEFAULT_RUNTIME_SOCKET
    assert options.backend_mode == "Containerd"
    assert str(options.hook_config_dir) == "/etc/runtime/hookserver.d"
    assert options.skip_label_key == "runtimeproxy.koordinator.sh/skip-hookserver"
    assert options.skip_label_value == "true"
    assert options.hook_config_trusted_uids == frozenset()
    assert options.max_request_bytes == 16 * 1024 * 1024
    assert level == "info"


def test_docker_mode_defaults_to_dockers_socket() -> None:
    options, _ = parse_options(["--backend-runtime-mode=docker"])
    assert options.backend_mode == "Docker"
    assert options.runtime_path == DEFAULT_DOCKER_SOCKET
    options, _ = parse_options(["--backend-runtime-mode=Docker", "--remote-runtime-service-endpoint=/d.sock"])
    assert options.runtime_path == Path("/d.sock")


def test_trusted_uids_are_a_comma_separated_list() -> None:
    options, _ = parse_options(["-runtime-hook-config-trusted-uids=1000, 1001,"])
    assert options.hook_config_trusted_uids == {1000, 1001}


def test_the_request_limit_can_be_raised() -> None:
    options, _ = parse_options(["--max-request-bytes=67108864"])
    assert options.max_request_bytes == 64 * 1024 * 1024


def test_go_style_single_dash_flags_and_unix_uris() -> None:
    options, level = parse_options([
        "-koord-runtimeproxy-endpoint=/tmp/p.sock",
        "--remote-runtime-service-endpoint", "unix:///tmp/c.sock",
        "-remote-image-service-endpoint", "/tmp/i.sock",
        "--log-level=DEBUG",
    ])
    assert options.listen_path == Path("/tmp/p.sock")
    assert options.runtime_path == Path("/tmp/c.sock")
    assert options.effective_image_path == Path("/tmp/i.sock")
    assert level == "debug"


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtimeproxy", *args],
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log-level=loud"], "'loud' is not one of"),
        (["--remote-runtime-service-endpoint=tcp://1.2.3.4:5"], "only unix sockets"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--backend-runtime-mode=cri-o"], "not one of Containerd, Docker"),
        (["--runtime-hook-config-trusted-uids=root"], "not a comma-separated list of uids"),
        (["--max-request-bytes=16MiB"], "'16MiB' is not a positive whole number"),
        (["--max-request-bytes=0"], "'0' is not a positive whole number"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = _run_cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]


def test_version() -> None:
    result = _run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"koord-runtime-proxy {__version__}"


# --- drop-in for the Go binary: klog's flags ------------------------------------------------------------


@pytest.mark.parametrize(("args", "level"), [
    (["-v=2"], "info"), (["--v=4"], "debug"), (["-v", "6"], "debug"), (["-v=0"], "info"),
    (["-v=5", "--log-level=warning"], "warning"),  # our own flag wins
])
def test_klog_verbosity_maps_to_the_log_level(args: list[str], level: str) -> None:
    assert parse_command_line(args).level == level


@pytest.mark.parametrize("spelling", ["--logtostderr", "-logtostderr=true", "--alsologtostderr=false",
                                      "--log_file=/tmp/x.log", "--log-file=/tmp/x.log", "-log_dir=/tmp",
                                      "--skip_headers", "--one-output=true", "-stderrthreshold=2"])
def test_every_klog_spelling_is_accepted(spelling: str) -> None:
    parse_command_line([spelling])


def test_klog_log_file_is_used_only_with_logtostderr_false_as_klog_does(tmp_path: Path) -> None:
    ignored = parse_command_line([f"--log_file={tmp_path / 'a.log'}"]).klog
    assert ignored.log_file is None and "-logtostderr=true" in ignored.warnings[0]
    used = parse_command_line([f"--log-file={tmp_path / 'a.log'}", "--logtostderr=false"]).klog
    assert (used.log_file, used.also_stderr, used.warnings) == (tmp_path / "a.log", False, [])
    both = parse_command_line([f"-log_dir={tmp_path}", "-logtostderr=false", "-alsologtostderr"]).klog
    assert (both.log_file, both.also_stderr) == (tmp_path / LOG_DIR_FILE_NAME, True)


@pytest.mark.parametrize("flag", ["-log_file", "-log_dir"])
def test_a_log_file_that_cannot_be_created_is_one_line_naming_the_flag(tmp_path: Path, flag: str) -> None:
    """Not a traceback: the log is not set up yet, so the line goes to stderr; a start that failed, exit 1."""
    (tmp_path / "a-file").write_text("")
    result = _run_cli("-logtostderr=false", f"{flag}={tmp_path / 'a-file' / 'sub'}")
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"koord-runtime-proxy: cannot start: -log_file/-log_dir {tmp_path / 'a-file' / 'sub'}")
    assert "[Errno" not in line and line.endswith("or log to stderr (drop -logtostderr=false)"), line


def test_klog_flags_without_meaning_here_get_one_warning() -> None:
    (warning,) = parse_command_line(["-vmodule=server=4", "--skip_headers", "-v=2"]).klog.warnings
    assert "-vmodule, -skip_headers" in warning and "no effect here" in warning


def test_a_klog_boolean_takes_gos_spellings_only() -> None:
    assert _run_cli("--logtostderr=maybe").returncode == 2


def test_a_go_unit_files_command_line_starts_the_proxy(tmp_path: Path) -> None:
    """A koord-runtime-proxy unit file's flags, klog's included: it starts, logs to the klog file, says what
    it ignores once, and stops cleanly."""
    log_file = tmp_path / "klog" / "proxy.log"
    proxy = ProxyProcess(tmp_path / "rp.sock", tmp_path / "absent.sock", extra_args=[
        "-v=4", "--logtostderr=false", f"--log_file={log_file}", "--alsologtostderr=false", "-vmodule=cri=5"])
    proxy.start(wait_serving=False)
    assert proxy.stop() == 0
    text = log_file.read_text()
    assert "listening on" in text and " DEBUG " in text
    assert text.count("have no effect here") == 1
    assert "listening on" not in proxy.log_path.read_text()  # not on stderr: -logtostderr=false


# --- each proxy's own operator endpoints --------------------------------------------------------------


def test_the_default_socket_keeps_the_well_known_operator_endpoints() -> None:
    options, _ = parse_options([])
    assert (options.admin_path, options.state_dir, options.metrics_address) == \
        (DEFAULT_ADMIN_SOCKET, DEFAULT_STATE_DIR, DEFAULT_METRICS_ADDRESS)


def test_another_socket_gets_operator_endpoints_of_its_own() -> None:
    options, _ = parse_options(["--koord-runtimeproxy-endpoint=/run/rp-docker/docker.sock"])
    assert options.admin_path == Path("/run/rp-docker/docker-admin.sock")
    assert options.state_dir == DEFAULT_STATE_DIR / "proxies" / "%2Frun%2Frp-docker%2Fdocker.sock"
    assert options.metrics_address is None  # one port cannot serve two proxies: set it to have metrics


def test_operator_endpoints_given_win_and_empty_turns_them_off() -> None:
    options, _ = parse_options(["--koord-runtimeproxy-endpoint=/run/x.sock", "--admin-endpoint=",
                                "--metrics-bind-address=127.0.0.1:9400", "--state-dir=/var/lib/x"])
    assert (options.admin_path, options.metrics_address, options.state_dir) == \
        (None, "127.0.0.1:9400", Path("/var/lib/x"))


def test_nri_plugins_are_launched_from_nris_directories_unless_emptied() -> None:
    options, _ = parse_options(["--enable-nri"])
    assert (options.nri_plugin_path, options.nri_plugin_config_path) == (Path("/opt/nri/plugins"),
                                                                         Path("/etc/nri/conf.d"))
    options, _ = parse_options(["--enable-nri", "--nri-plugin-path=", "--nri-plugin-config-path=/c"])
    assert (options.nri_plugin_path, options.nri_plugin_config_path) == (None, Path("/c"))
