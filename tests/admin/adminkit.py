"""Helpers of the admin tests (imported as a plain module: tests/admin is on sys.path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from runtimeproxy.cri.server import ProxyServer


def http_get(proxy: ProxyServer, path: str) -> tuple[int, str]:
    assert proxy.operator is not None and proxy.operator.http is not None
    url = f"http://127.0.0.1:{proxy.operator.http.bound_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def promtool_check(exposition: str) -> str:
    """`promtool check metrics` output; skips (or fails, when e2e is required) without promtool."""
    if shutil.which("promtool") is None:
        if os.environ.get("RUNTIMEPROXY_REQUIRE_E2E"):
            pytest.fail("promtool (Debian package prometheus) is not installed; run scripts/setup.sh")
        pytest.skip("promtool (Debian package prometheus) is not installed")
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr
