import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy import __version__
from runtimeproxy.cli import parse_options
from runtimeproxy.options import DEFAULT_DOCKER_SOCKET, DEFAULT_PROXY_SOCKET, DEFAULT_RUNTIME_SOCKET


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
