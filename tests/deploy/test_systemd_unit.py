"""deploy/: the service and its .socket units: systemd accepts them, the proxy accepts the service's flags, and the
sockets systemd would hold are the ones the proxy would bind, with its modes."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy.admin.service import ADMIN_SOCKET_MODE
from runtimeproxy.cli import parse_options
from runtimeproxy.listener import SOCKET_DIR_MODE, SOCKET_MODE

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNIT = DEPLOY / "koord-runtime-proxy.service"
SOCKET_UNITS = {"cri": DEPLOY / "koord-runtime-proxy.socket", "admin": DEPLOY / "koord-runtime-proxy-admin.socket"}
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


def test_a_crash_is_started_again_at_once_and_a_start_that_always_fails_is_left_failed() -> None:
    """RestartSec: what the kubelet restart test waits after its kill -9 (a crash back in under a second); the
    start limit: a crash loop ends, one crash is far from it."""
    from tests.e2e.test_kubelet_restart import RESTART_SECONDS

    service = unit_sections(UNIT)
    assert service["Service"]["RestartSec"] == f"{RESTART_SECONDS * 1000:.0f}ms"
    assert int(service["Unit"]["StartLimitBurst"]) >= 5 and int(service["Unit"]["StartLimitIntervalSec"]) >= 10


def unit_sections(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_the_proxy_accepts_the_units_flags() -> None:
    options, level = parse_options(exec_start()[1:])
    assert str(options.runtime_path) == "/var/run/containerd/containerd.sock"
    assert options.metrics_address == "127.0.0.1:9318" and options.log_format == "json"


def socket_section(role: str) -> configparser.SectionProxy:
    return unit_sections(SOCKET_UNITS[role])["Socket"]


def same_place(unit_path: str, proxy_path: Path) -> bool:
    """systemd writes /run for /var/run (a link to it on every systemd distribution)."""
    return unit_path == str(proxy_path).replace("/var/run/", "/run/", 1)


def test_the_socket_units_hold_the_services_sockets_with_the_proxys_modes() -> None:
    options, _ = parse_options(exec_start()[1:])
    assert options.admin_path is not None
    for role, path, mode in (("cri", options.listen_path, SOCKET_MODE), ("admin", options.admin_path, ADMIN_SOCKET_MODE)):
        section = socket_section(role)
        assert same_place(section["ListenStream"], path), (role, section["ListenStream"], path)
        assert section["FileDescriptorName"] == role  # the name the proxy takes it by
        assert int(section["SocketMode"], 8) == mode and int(section["DirectoryMode"], 8) == SOCKET_DIR_MODE
    assert socket_section("admin")["Service"] == UNIT.name


def test_the_service_wants_its_sockets_but_starts_without_them() -> None:
    lines = [line for line in UNIT.read_text().splitlines() if not line.startswith("#")]
    names = [unit.name for unit in SOCKET_UNITS.values()]
    for key in ("Wants", "After", "Sockets", "Also"):
        assert any(line.startswith(f"{key}=") and all(name in line for name in names) for line in lines), key
    # A node with only the service (the bundle's unit copied by hand) still runs it.
    assert not any(line.startswith(("Requires=", "BindsTo=")) for line in lines)


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
    for socket_unit in SOCKET_UNITS.values():
        shutil.copyfile(socket_unit, tmp_path / socket_unit.name)
    units = [str(tmp_path / path.name) for path in (UNIT, *SOCKET_UNITS.values())]
    # The units beside each other, as in /usr/lib/systemd/system.
    environment = {**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"}
    result = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=60, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in (UNIT, *SOCKET_UNITS.values()):
        assert path.name not in result.stdout + result.stderr, result.stdout + result.stderr
