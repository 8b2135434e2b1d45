"""The Docker case's node: containers in the lab dockerd, made through the Engine API, for list, inspect and exec.

N containers shaped like cri-dockerd's pod sandboxes (the pause image, a `k8s_POD_…` name, the Kubernetes
labels and an annotation label, no network), the first few of them running, so that a list answers real
state of both kinds; plus one busybox container running `sleep` that the execs go into. They are removed
with dockerd (`DockerdInstance.stop` removes every container).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rplab.dockerd import UnixHTTPConnection
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE

API_PREFIX = "/v1.41"
RUNNING_SANDBOXES = 10  # of the N; the rest stay created
SETUP_THREADS = 4
REQUEST_TIMEOUT_SECONDS = 60.0
EXEC_TARGET_NAME = "bench-exec-target"


class EngineApiError(RuntimeError):
    """dockerd did not answer a setup request as expected."""


def engine_call(docker_socket: Path, method: str, path: str, body: Any = None) -> Any:
    """One Engine API request on a fresh connection; the decoded JSON answer (None when empty)."""
    connection = UnixHTTPConnection(docker_socket, REQUEST_TIMEOUT_SECONDS)
    try:
        payload = None if body is None else json.dumps(body).encode()
        connection.request(method, API_PREFIX + path, body=payload, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    if not 200 <= answer.status < 300:
        raise EngineApiError(f"{method} {path}: dockerd answered {answer.status}: {data[:300]!r}")
    return json.loads(data) if data else None


def sandbox_name(index: int) -> str:
    return f"k8s_POD_bench-{index}_default_{pod_uid(index)}_0"


def pod_uid(index: int) -> str:
    return f"00000000-0000-4000-8000-{index:012d}"


def sandbox_body(index: int) -> dict[str, Any]:
    """A create body like cri-dockerd's for a pod sandbox (labels as a list answer carries them)."""
    return {
        "Image": PAUSE_IMAGE,
        "Labels": {
            "io.kubernetes.pod.name": f"bench-{index}",
            "io.kubernetes.pod.namespace": "default",
            "io.kubernetes.pod.uid": pod_uid(index),
            "io.kubernetes.docker.type": "podsandbox",
            "io.kubernetes.container.name": "POD",
            "app": "bench",
            "annotation.kubernetes.io/config.source": "api",
        },
        "HostConfig": {"NetworkMode": "none", "CpuShares": 2},
    }


def exec_target_body() -> dict[str, Any]:
    return {"Image": BUSYBOX_IMAGE, "Cmd": ["sleep", "86400"], "HostConfig": {"NetworkMode": "none"}}


@dataclass(frozen=True)
class DockerNode:
    sandbox_ids: list[str]
    exec_target: str

    @classmethod
    def create(cls, docker_socket: Path, count: int) -> DockerNode:
        def create(name: str, body: dict[str, Any]) -> str:
            return str(engine_call(docker_socket, "POST", f"/containers/create?name={name}", body)["Id"])

        def start(container_id: str) -> None:
            engine_call(docker_socket, "POST", f"/containers/{container_id}/start")

        with ThreadPoolExecutor(SETUP_THREADS) as pool:
            ids = list(pool.map(lambda index: create(sandbox_name(index), sandbox_body(index)), range(count)))
            target = create(EXEC_TARGET_NAME, exec_target_body())
            list(pool.map(start, [target, *ids[:RUNNING_SANDBOXES]]))
        return cls(ids, target)

    def write_ids(self, directory: Path) -> tuple[Path, Path]:
        """Files for the client: the sandboxes' ids (inspect cycles through them), the exec target's."""
        sandboxes, target = directory / "sandbox-ids", directory / "exec-target-id"
        sandboxes.write_text("\n".join(self.sandbox_ids) + "\n")
        target.write_text(self.exec_target + "\n")
        return sandboxes, target
