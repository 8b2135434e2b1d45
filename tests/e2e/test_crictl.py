"""crictl, the CRI reference client, through the proxy (runs where crictl is installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from runtimeproxy.lab.images import BUSYBOX_IMAGE
from runtimeproxy.lab.process import ProxyProcess

CRICTL = shutil.which("crictl")
pytestmark = pytest.mark.skipif(CRICTL is None, reason="crictl is not on PATH (it is not packaged by Debian)")


def crictl(proxy: ProxyProcess, *args: str) -> str:
    endpoint = f"unix://{proxy.listen_path}"
    result = subprocess.run(
        [CRICTL, "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, "--timeout", "30s", *args],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, f"crictl {' '.join(args)}: {result.stderr}"
    return result.stdout


def test_crictl_lifecycle(proxy_process: ProxyProcess, tmp_path: Path, cleanup_pods: list[str]) -> None:
    namespaces = {"network": 2, "pid": 1}
    pod = {
        "metadata": {"name": "crictl-pod", "namespace": "default", "uid": str(uuid.uuid4())},
        "log_directory": str(tmp_path),
        "linux": {"security_context": {"namespace_options": namespaces}},
    }
    container = {
        "metadata": {"name": "box"},
        "image": {"image": BUSYBOX_IMAGE},
        "command": ["sh", "-c", "echo started; trap 'exit 0' TERM; while true; do sleep 1; done"],
        "log_path": "box.log",
        "linux": {"security_context": {"namespace_options": namespaces}},
    }
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    (tmp_path / "container.json").write_text(json.dumps(container))

    assert "containerd" in crictl(proxy_process, "version")
    assert json.loads(crictl(proxy_process, "info"))["status"]
    assert "localhost/runtimeproxy/busybox" in crictl(proxy_process, "images")
    pod_id = crictl(proxy_process, "runp", str(tmp_path / "pod.json")).strip()
    cleanup_pods.append(pod_id)
    container_id = crictl(proxy_process, "create", pod_id, str(tmp_path / "container.json"),
                          str(tmp_path / "pod.json")).strip()
    crictl(proxy_process, "start", container_id)
    assert crictl(proxy_process, "exec", "-s", container_id, "echo", "hi").strip() == "hi"
    assert "started" in crictl(proxy_process, "logs", container_id)
    crictl(proxy_process, "stop", container_id)
    crictl(proxy_process, "rm", container_id)
    crictl(proxy_process, "stopp", pod_id)
    crictl(proxy_process, "rmp", pod_id)
