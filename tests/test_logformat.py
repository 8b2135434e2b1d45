"""--log-format json: one object per line, with structured fields passed by call sites."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from runtimeproxy.logformat import JsonFormatter, configure_logging


def test_json_lines_carry_time_level_message_and_fields() -> None:
    record = logging.LogRecord("runtimeproxy.hooks", logging.WARNING, __file__, 1, "plugin %s down\nreally", ("k",),
                               None)
    record.plugin, record.hook, record.pod = "koordlet.json", "PreRunPodSandbox", ""
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning" and entry["message"] == "plugin k down\nreally"
    assert entry["plugin"] == "koordlet.json" and entry["hook"] == "PreRunPodSandbox"
    assert "pod" not in entry  # empty fields are left out
    assert entry["time"].endswith("Z") and "T" in entry["time"]


def test_the_proxy_logs_json_lines(tmp_path: Path) -> None:
    # A proxy that cannot start (its socket path is a directory) still logs in the format asked for.
    listen = tmp_path / "busy"
    listen.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "runtimeproxy", f"--koord-runtimeproxy-endpoint={listen}", "--log-format=json",
         f"--remote-runtime-service-endpoint={tmp_path / 'none.sock'}", "--metrics-bind-address=",
         f"--admin-endpoint={tmp_path / 'admin.sock'}", f"--state-dir={tmp_path / 'state'}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines and all(json.loads(line)["level"] for line in lines)
    assert "not a socket" in json.loads(lines[-1])["message"]


def test_debug_is_the_proxys_not_grpcs() -> None:
    # grpc's asyncio poller logs "Loaded running loop" at debug every second: it would bury the plugin-change lines
    # a plugin author turns debug on for.
    root = logging.getLogger()
    saved = root.level, root.handlers[:]
    try:
        configure_logging("debug")
        assert logging.getLogger("runtimeproxy.hooks.dispatcher").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("grpc._cython.cygrpc").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("grpc._cython.cygrpc").isEnabledFor(logging.INFO)
        assert not logging.getLogger("asyncio").isEnabledFor(logging.DEBUG)
        configure_logging("warning")
        assert not logging.getLogger("grpc").isEnabledFor(logging.INFO)
    finally:
        for name in ("grpc", "asyncio"):
            logging.getLogger(name).setLevel(logging.NOTSET)
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
