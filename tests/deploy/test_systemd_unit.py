"""deploy/koord-runtime-proxy.service: systemd accepts it and the proxy accepts its flags."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy.cli import parse_options

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "koord-runtime-proxy.service"
INSTALLED_BINARY = "/opt/koord-runtime-proxy/bin/koord-runtime-proxy"


def exec_start() -> list[str]:
    text = UNIT.read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_unit_orders_after_containerd_before_the_kubelet_and_is_kept_alive_as_containerd_is() -> None:
    text = UNIT.read_text()
    assert "Before=kubelet.service" in text and "containerd.service" in text
    assert "Restart=always" in text and "OOMScoreAdjust=-999" in text
    assert exec_start()[0] == INSTALLED_BINARY


def test_the_proxy_accepts_the_units_flags() -> None:
    options, level = parse_options(exec_start()[1:])
    assert str(options.runtime_path) == "/var/run/containerd/containerd.sock"
    assert options.metrics_address == "127.0.0.1:9318" and options.log_format == "json"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    # The command installed beside the Python running the tests (the checkout's .venv).
    installed = Path(sys.executable).parent / "koord-runtime-proxy"
    binary = str(installed) if installed.exists() else shutil.which("koord-runtime-proxy")
    if analyze is None or binary is None:
        pytest.skip("needs systemd-analyze and an installed koord-runtime-proxy (pip install .)")
    # verify checks that ExecStart exists: point it at this machine's installed command.
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(INSTALLED_BINARY, binary))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert UNIT.name not in result.stdout + result.stderr, result.stdout + result.stderr
