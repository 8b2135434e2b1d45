"""The kubelet's path in Docker mode: crictl → cri-dockerd → proxy → dockerd, a host-network pod's life.

Real parts: a private dockerd, the proxy process in Docker mode, cri-dockerd, crictl.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from rplab.dockerd import DockerdInstance
from rplab.images import BUSYBOX_IMAGE

from docker_fixtures import Crictl

HOST_NETWORK = {"network": 2}
MEMORY_LIMIT_BYTES = 64 * 1024 * 1024


def _configs(tmp_path: Path) -> tuple[Path, Path]:
    pod = {
        "metadata": {"name": "dk-pod", "namespace": "default", "uid": str(uuid.uuid4())},
        "log_directory": str(tmp_path),
        "labels": {"app": "rp-docker"},
        "linux": {"security_context": {"namespace_options": HOST_NETWORK}},
    }
    container = {
        "metadata": {"name": "box"},
        "image": {"image": BUSYBOX_IMAGE},
        "command": ["sh", "-c", "echo started; trap 'exit 0' TERM; while true; do sleep 1; done"],
        "log_path": "box.log",
        "linux": {"security_context": {"namespace_options": HOST_NETWORK}},
    }
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    (tmp_path / "container.json").write_text(json.dumps(container))
    return tmp_path / "pod.json", tmp_path / "container.json"


def test_pod_lifecycle_through_cri_dockerd(cri_dockerd: Crictl, dockerd: DockerdInstance, tmp_path: Path) -> None:
    crictl = cri_dockerd
    pod_config, container_config = _configs(tmp_path)
    assert "docker" in crictl("version")
    pod_id = crictl("runp", str(pod_config)).strip()
    try:
        container_id = crictl("create", pod_id, str(container_config), str(pod_config)).strip()
        crictl("start", container_id)
        assert crictl("exec", "-s", container_id, "echo", "hi").strip() == "hi"
        assert crictl("exec", "-i", container_id, "cat", input_text="from stdin\n") == "from stdin\n"
        assert "started" in crictl("logs", container_id)
        crictl("update", "--memory", str(MEMORY_LIMIT_BYTES), container_id)
        inspected = json.loads(dockerd.docker("inspect", container_id).stdout)[0]
        assert inspected["HostConfig"]["Memory"] == MEMORY_LIMIT_BYTES
        crictl("stop", container_id)
        crictl("rm", container_id)
        assert dockerd.docker("inspect", container_id, check=False).returncode != 0
    finally:
        crictl("stopp", pod_id)
        crictl("rmp", pod_id)
    assert pod_id not in crictl("pods", "-q")
