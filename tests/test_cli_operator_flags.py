"""The proxy's operator flags: admin socket, state dir, metrics address, log format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy.cli import parse_options
from runtimeproxy.options import DEFAULT_ADMIN_SOCKET, DEFAULT_METRICS_ADDRESS, DEFAULT_STATE_DIR


def test_defaults_turn_the_operator_endpoints_on() -> None:
    options, _ = parse_options([])
    assert options.admin_path == DEFAULT_ADMIN_SOCKET and options.state_dir == DEFAULT_STATE_DIR
    assert options.metrics_address == DEFAULT_METRICS_ADDRESS and options.log_format == "text"


def test_flags_are_taken_go_style_too() -> None:
    options, _ = parse_options(["-admin-endpoint=unix:///run/a.sock", "--state-dir=/tmp/s",
                                "--metrics-bind-address=", "-log-format=JSON"])
    assert options.admin_path == Path("/run/a.sock") and options.state_dir == Path("/tmp/s")
    assert options.metrics_address is None and options.log_format == "json"


@pytest.mark.parametrize("flag", ["--metrics-bind-address=9318", "--log-format=xml", "--admin-endpoint=tcp://x:1"])
def test_bad_values_are_one_line_and_exit_2(flag: str) -> None:
    result = subprocess.run([sys.executable, "-m", "runtimeproxy", flag], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and flag.split("=")[0] in result.stderr
