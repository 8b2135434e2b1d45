"""Helpers of the admin tests."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request

from runtimeproxy.app import Proxy

from tests.kits.machine import require_command


def http_get(proxy: Proxy, path: str) -> tuple[int, str]:
    assert proxy.operator is not None and proxy.operator.http is not None
    url = f"http://127.0.0.1:{proxy.operator.http.bound_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def promtool_check(exposition: str) -> str:
    """`promtool check metrics` output; skips (or fails, when e2e is required) without promtool."""
    require_command("promtool", "prometheus")
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr
