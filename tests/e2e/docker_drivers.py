"""The kubelet's side of Docker mode, two ways, behind one interface (`PodDriver`), so each Docker-mode hook
test runs with both: `ReplayDriver` sends cri-dockerd's requests itself (lab.cridockerd_replay, always
available) and `CrictlDriver` drives the real cri-dockerd with crictl (where both are installed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Protocol

from rplab.cridockerd_replay import CriDockerdReplay, ReplayError
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import CriDockerd

HOST_NETWORK = {"network": 2}


class DriverError(RuntimeError):
    """The CRI call failed; the message is what the kubelet would see."""


class PodDriver(Protocol):
    name: str

    def run_pod(self, pod: PodShape) -> str: ...
    def create_container(self, pod: PodShape, pod_id: str) -> str: ...
    def start_container(self, container_id: str) -> None: ...
    def update_memory(self, container_id: str, memory: int) -> None: ...
    def stop_container(self, container_id: str) -> None: ...
    def stop_pod(self, pod_id: str) -> None: ...
    def remove_pod(self, pod_id: str) -> None: ...
    def close(self) -> None: ...


class ReplayDriver:
    """cri-dockerd's requests, replayed against the proxy's socket."""

    name = "replay"

    def __init__(self, socket: Path) -> None:
        self.replay = CriDockerdReplay(socket)

    def _call(self, action, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return action(*args, **kwargs)
        except ReplayError as error:
            raise DriverError(str(error)) from None

    def run_pod(self, pod: PodShape) -> str:
        return self._call(self.replay.run_pod_sandbox, pod)

    def create_container(self, pod: PodShape, pod_id: str) -> str:
        return self._call(self.replay.create_container, pod, pod_id)

    def start_container(self, container_id: str) -> None:
        self._call(self.replay.start_container, container_id)

    def update_memory(self, container_id: str, memory: int) -> None:
        self._call(self.replay.update_container_resources, container_id, memory=memory)

    def stop_container(self, container_id: str) -> None:
        self._call(self.replay.stop_container, container_id)

    def stop_pod(self, pod_id: str) -> None:
        self._call(self.replay.stop_pod_sandbox, pod_id)

    def remove_pod(self, pod_id: str) -> None:
        self._call(self.replay.remove_pod_sandbox, pod_id)

    def close(self) -> None:
        self.replay.close()


class CrictlDriver:
    """crictl → the real cri-dockerd (already started in front of the proxy)."""

    name = "cri-dockerd"

    def __init__(self, crictl: Path, server: CriDockerd, config_dir: Path) -> None:
        self.crictl_binary, self.server, self.config_dir = crictl, server, config_dir
        self._configs: dict[str, tuple[Path, Path]] = {}

    def crictl(self, *args: str) -> str:
        endpoint = f"unix://{self.server.socket}"
        result = subprocess.run([str(self.crictl_binary), "--runtime-endpoint", endpoint, "--image-endpoint",
                                 endpoint, "--timeout", "30s", *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise DriverError(f"crictl {' '.join(args)}: {result.stderr}")
        return result.stdout.strip()

    def _write_configs(self, pod: PodShape) -> tuple[Path, Path]:
        """The CRI configs the kubelet would send for `pod` (host network: cri-dockerd runs without CNI here)."""
        if pod.name not in self._configs:
            base = self.config_dir / pod.name
            base.mkdir(parents=True, exist_ok=True)
            (base / pod.container).mkdir(exist_ok=True)
            sandbox = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                                    "attempt": pod.attempt},
                       "log_directory": str(base), "labels": pod.labels, "annotations": pod.annotations,
                       "linux": {"cgroup_parent": pod.cgroup_parent,
                                 "security_context": {"namespace_options": HOST_NETWORK}}}
            container = {"metadata": {"name": pod.container}, "image": {"image": pod.image},
                         "command": list(pod.command), "envs": [{"key": k, "value": v} for k, v in pod.envs],
                         "log_path": f"{pod.container}/0.log",
                         "linux": {"resources": {"cpu_shares": pod.cpu_shares, "cpu_period": pod.cpu_period,
                                                 "cpu_quota": pod.cpu_quota, "memory_limit_in_bytes": pod.memory,
                                                 "oom_score_adj": pod.oom_score_adj},
                                   "security_context": {"namespace_options": HOST_NETWORK}}}
            (base / "pod.json").write_text(json.dumps(sandbox))
            (base / "container.json").write_text(json.dumps(container))
            self._configs[pod.name] = (base / "pod.json", base / "container.json")
        return self._configs[pod.name]

    def run_pod(self, pod: PodShape) -> str:
        return self.crictl("runp", str(self._write_configs(pod)[0]))

    def create_container(self, pod: PodShape, pod_id: str) -> str:
        pod_config, container_config = self._write_configs(pod)
        return self.crictl("create", pod_id, str(container_config), str(pod_config))

    def start_container(self, container_id: str) -> None:
        self.crictl("start", container_id)

    def update_memory(self, container_id: str, memory: int) -> None:
        self.crictl("update", "--memory", str(memory), container_id)

    def stop_container(self, container_id: str) -> None:
        self.crictl("stop", container_id)

    def stop_pod(self, pod_id: str) -> None:
        self.crictl("stopp", pod_id)

    def remove_pod(self, pod_id: str) -> None:
        self.crictl("rmp", pod_id)

    def close(self) -> None:
        return None
