"""A small typed CRI client and the lab's pod/container configs, for runtime.v1 or v1alpha2.

Used by the lab command, the e2e tests and the benchmark: they all drive the same
host-network pod (no CNI needed) running the lab's busybox image.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from rplab.images import BUSYBOX_IMAGE
from runtimeproxy.cri.limits import metadata_limit_options
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as v1, api_pb2_grpc as v1_grpc
from runtimeproxy.pb.cri.runtime.v1alpha2 import api_pb2 as v1alpha2, api_pb2_grpc as v1alpha2_grpc

API_MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    "v1": (v1, v1_grpc),
    "v1alpha2": (v1alpha2, v1alpha2_grpc),
}
NODE_NETWORK = 2  # NamespaceMode.NODE: host network, no CNI
CONTAINER_PID = 1  # NamespaceMode.CONTAINER


def open_channel(address: str | Path) -> grpc.Channel:
    """A sync channel to a unix socket path (or unix:// target), without message limits
    and with the proxy's metadata limits."""
    target = str(address) if str(address).startswith("unix:") else f"unix://{address}"
    return grpc.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            *metadata_limit_options(),
        ],
    )


def env_entry(api: ModuleType, key: str, value: str | bytes) -> Any:
    """A KeyValue of either CRI version: runtime.v1 carries the value as bytes (since cri-api 0.34.9),
    v1alpha2 as a string."""
    field = api.KeyValue.DESCRIPTOR.fields_by_name["value"]
    if field.type == field.TYPE_BYTES:
        return api.KeyValue(key=key, value=value.encode() if isinstance(value, str) else value)
    return api.KeyValue(key=key, value=value.decode() if isinstance(value, bytes) else value)


@dataclass
class CriClient:
    """Stubs of one CRI version over one channel; `api` is that version's message module."""

    channel: grpc.Channel
    version: str = "v1"

    def __post_init__(self) -> None:
        self.api, stubs = API_MODULES[self.version]
        self.runtime = stubs.RuntimeServiceStub(self.channel)
        self.images = stubs.ImageServiceStub(self.channel)

    # -- configs ------------------------------------------------------------------------

    def pod_config(
        self,
        name: str,
        log_directory: Path,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        cgroup_parent: str = "",
        namespace: str = "default",
        uid: str | None = None,
    ) -> Any:
        api = self.api
        namespaces = api.NamespaceOption(network=NODE_NETWORK, pid=CONTAINER_PID)
        return api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name=name, uid=uid or str(uuid.uuid4()), namespace=namespace),
            log_directory=str(log_directory),  # no hostname: host-network pods may not set one
            labels=labels or {},
            annotations=annotations or {},
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=api.LinuxSandboxSecurityContext(namespace_options=namespaces),
            ),
        )

    def container_config(
        self,
        name: str,
        *,
        command: list[str] | None = None,
        envs: Mapping[str, str | bytes] | None = None,
        annotations: dict[str, str] | None = None,
        resources: Any | None = None,
        image: str = BUSYBOX_IMAGE,
    ) -> Any:
        api = self.api
        namespaces = api.NamespaceOption(network=NODE_NETWORK, pid=CONTAINER_PID)
        linux = api.LinuxContainerConfig(
            security_context=api.LinuxContainerSecurityContext(namespace_options=namespaces)
        )
        if resources is not None:
            linux.resources.CopyFrom(resources)
        return api.ContainerConfig(
            metadata=api.ContainerMetadata(name=name),
            image=api.ImageSpec(image=image),
            # sh traps TERM so StopContainer returns at once instead of after its grace period.
            command=command or ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            envs=[env_entry(api, k, v) for k, v in (envs or {}).items()],
            annotations=annotations or {},
            log_path=f"{name}/0.log",
            linux=linux,
        )

    # -- calls -------------------------------------------------------------------------

    def run_pod(self, config: Any, timeout: float = 60) -> str:
        request = self.api.RunPodSandboxRequest(config=config)
        return self.runtime.RunPodSandbox(request, timeout=timeout).pod_sandbox_id

    def create_container(self, pod_id: str, config: Any, pod_config: Any, timeout: float = 60) -> str:
        request = self.api.CreateContainerRequest(
            pod_sandbox_id=pod_id, config=config, sandbox_config=pod_config
        )
        return self.runtime.CreateContainer(request, timeout=timeout).container_id

    def start_container(self, container_id: str, timeout: float = 60) -> None:
        self.runtime.StartContainer(self.api.StartContainerRequest(container_id=container_id), timeout=timeout)

    def exec_sync(self, container_id: str, cmd: list[str], timeout: float = 30) -> Any:
        request = self.api.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=int(timeout))
        return self.runtime.ExecSync(request, timeout=timeout + 10)

    def container_status(self, container_id: str, verbose: bool = False) -> Any:
        request = self.api.ContainerStatusRequest(container_id=container_id, verbose=verbose)
        return self.runtime.ContainerStatus(request, timeout=30)

    def pod_status(self, pod_id: str, verbose: bool = False) -> Any:
        request = self.api.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=verbose)
        return self.runtime.PodSandboxStatus(request, timeout=30)

    def stop_container(self, container_id: str, grace: int = 0) -> None:
        request = self.api.StopContainerRequest(container_id=container_id, timeout=grace)
        self.runtime.StopContainer(request, timeout=60)

    def remove_container(self, container_id: str) -> None:
        self.runtime.RemoveContainer(self.api.RemoveContainerRequest(container_id=container_id), timeout=60)

    def stop_pod(self, pod_id: str) -> None:
        self.runtime.StopPodSandbox(self.api.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=60)

    def remove_pod(self, pod_id: str) -> None:
        self.runtime.RemovePodSandbox(self.api.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=60)

    def discard_pods(self, pod_ids: Iterable[str]) -> None:
        """StopPodSandbox + RemovePodSandbox of each pod, whatever either answers (a test's cleanup)."""
        for pod_id in pod_ids:
            for step in (self.stop_pod, self.remove_pod):
                try:
                    step(pod_id)
                except grpc.RpcError:
                    pass

    def pod_ids(self) -> list[str]:
        response = self.runtime.ListPodSandbox(self.api.ListPodSandboxRequest(), timeout=30)
        return [pod.id for pod in response.items]

    def container_ids(self, pod_id: str) -> list[str]:
        response = self.runtime.ListContainers(self.api.ListContainersRequest(
            filter=self.api.ContainerFilter(pod_sandbox_id=pod_id)), timeout=30)
        return [container.id for container in response.containers]

    def image_tags(self) -> list[str]:
        response = self.images.ListImages(self.api.ListImagesRequest(), timeout=30)
        return [tag for image in response.images for tag in image.repo_tags]
