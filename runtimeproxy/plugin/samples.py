"""Sample hook requests shaped like the kubelet's, for trying a plugin without a cluster.

A Burstable pod "default/sample" with one container "app": the cgroup parent the kubelet gives such a
pod (cgroupfs "/kubepods/burstable/pod<uid>", or the systemd driver's slice path), the resources it
computes from requests/limits (cpu 250m/500m, memory 128Mi/256Mi), the annotations and labels the API
server and kubelet set, and a container environment with the variables the kubelet injects.
"""

from __future__ import annotations

from google.protobuf.message import Message

from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

CGROUP_DRIVERS = ("cgroupfs", "systemd")
POD_UID = "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
MiB = 1024 * 1024


def pod_cgroup_parent(driver: str = "cgroupfs") -> str:
    """Where the kubelet puts a Burstable pod, per cgroup driver."""
    if driver == "systemd":
        slug = POD_UID.replace("-", "_")
        return f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slug}.slice"
    return f"/kubepods/burstable/pod{POD_UID}"


def pod_meta() -> hooks.PodSandboxMetadata:
    return hooks.PodSandboxMetadata(name="sample", uid=POD_UID, namespace="default", attempt=0)


def pod_labels() -> dict[str, str]:
    return {"app": "sample", "io.kubernetes.pod.name": "sample", "io.kubernetes.pod.namespace": "default",
            "io.kubernetes.pod.uid": POD_UID}


def pod_annotations() -> dict[str, str]:
    return {"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2024-01-01T00:00:00Z"}


def pod_resources() -> hooks.LinuxContainerResources:
    return hooks.LinuxContainerResources(cpu_period=100_000, cpu_quota=50_000, cpu_shares=256,
                                         memory_limit_in_bytes=256 * MiB)


def container_resources() -> hooks.LinuxContainerResources:
    """cpu 250m request / 500m limit, memory 256Mi limit; swap = memory ("no swap", cgroup v1)."""
    return hooks.LinuxContainerResources(cpu_period=100_000, cpu_quota=50_000, cpu_shares=256,
                                         memory_limit_in_bytes=256 * MiB, oom_score_adj=968,
                                         memory_swap_limit_in_bytes=256 * MiB)


def container_envs() -> dict[str, str]:
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME": "sample",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "APP_MODE": "production"}


def pod_request(driver: str = "cgroupfs") -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(pod_meta=pod_meta(), runtime_handler="", labels=pod_labels(),
                                       annotations=pod_annotations(), cgroup_parent=pod_cgroup_parent(driver),
                                       resources=pod_resources())


def container_request(driver: str = "cgroupfs", with_id: bool = True) -> hooks.ContainerResourceHookRequest:
    """The container's request; its ID is known from CreateContainer's answer on (not in PreCreateContainer)."""
    return hooks.ContainerResourceHookRequest(
        pod_meta=pod_meta(),
        container_meta=hooks.ContainerMetadata(name="app", attempt=0, id="4f0e1d2c3b4a" * 5 + "0f1e" if with_id else ""),
        container_annotations={"io.kubernetes.container.hash": "1a2b3c4d",
                               "io.kubernetes.container.restartCount": "0"},
        container_resources=container_resources(),
        pod_resources=pod_resources(),
        pod_annotations=pod_annotations(),
        pod_labels=pod_labels(),
        pod_cgroup_parent=pod_cgroup_parent(driver),
        container_envs=container_envs(),
    )


def sample_request(hook: str, driver: str = "cgroupfs") -> Message:
    """The sample request of a hook (registration name, e.g. "PreCreateContainer")."""
    if hook.endswith("PodSandbox"):
        return pod_request(driver)
    return container_request(driver, with_id=hook != "PreCreateContainer")
