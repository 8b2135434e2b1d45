"""Docker body <-> hook message conversions (docker.messages), one call at a time, on bodies shaped like
cri-dockerd's (see the lab notes)."""

from __future__ import annotations

import json

import pytest

from runtimeproxy.docker.messages import (
    Body,
    BodyError,
    KubeName,
    apply_resources,
    apply_cgroup_parent,
    apply_to_container_body,
    apply_to_sandbox_body,
    apply_to_update_body,
    container_from_inspect,
    container_of_create,
    create_name,
    envs_of,
    inspected,
    parse_kube_name,
    pod_from_inspect,
    sandbox_of_create,
    update_config,
    update_resources,
)
from runtimeproxy.hooks.merge import merge_container_response, merge_pod_response
from tests.kits.hooks import with_pod
from runtimeproxy.hooks.lifecycle import ResourceUpdate
from runtimeproxy.hooks import hook_messages
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.model import ContainerRecord, HugepageLimit, Resources
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


# The frontend decodes into the core's model and writes back from it; these tests hold the conversions through
# the model's hook projection (hooks.hook_messages), the message a hook plugin sees.


def sandbox_create_request(name: KubeName, body: Body) -> hooks.PodSandboxHookRequest:
    return hook_messages.pod_request(sandbox_of_create(name, body))


def container_create_request(name: KubeName, body: Body) -> hooks.ContainerResourceHookRequest:
    return hook_messages.container_request(container_of_create(name, body), None)


def apply_sandbox(body: Body, pod: hooks.PodSandboxHookRequest) -> None:
    apply_to_sandbox_body(body, hook_messages.pod_record(pod))


def apply_container(body: Body, container: hooks.ContainerResourceHookRequest) -> None:
    """As a creation's write-back does: the container, and its pod's cgroup parent (ContainerCreation.write_back)."""
    apply_to_container_body(body, hook_messages.container_record("", container))
    apply_cgroup_parent(body, container.pod_cgroup_parent)

SANDBOX_NAME = KubeName("POD", "web", "ns", "u-1", 2)
CONTAINER_NAME = KubeName("app", "web", "ns", "u-1", 1)
MiB = 1024 * 1024


def sandbox_body() -> dict:
    return {
        "Image": "pause",
        "Labels": {"app": "web", "annotation.team": "a", "io.kubernetes.docker.type": "podsandbox",
                   "io.kubernetes.container.name": "POD"},
        "HostConfig": {"CgroupParent": "/kubepods/pod-u-1", "CpuShares": 2, "OomScoreAdj": -998,
                       "NetworkMode": "host"},
    }


def container_body() -> dict:
    return {
        "Image": "busybox",
        "Env": ["PATH=/bin", "KEEP=me", "BARE"],
        "Labels": {"io.kubernetes.container.name": "app", "annotation.c": "1",
                   "io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": "s-1"},
        "HostConfig": {"CgroupParent": "/kubepods/pod-u-1", "CpuShares": 1024, "CpuPeriod": 100_000,
                       "CpuQuota": 50_000, "Memory": 256 * MiB, "MemorySwap": 256 * MiB, "CpusetCpus": "0-1",
                       "OomScoreAdj": 500, "NetworkMode": "container:s-1"},
    }


# --- names and bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("k8s_POD_web_ns_u-1_2", SANDBOX_NAME),
    ("/k8s_app_web_ns_u-1_1", CONTAINER_NAME),  # inspect's Name starts with "/"
    ("k8s_app_web_ns_u-1_1_8f3a", CONTAINER_NAME),  # cri-dockerd's suffix after a name clash
    ("k8s_app_web_ns_u-1_x", None),
    ("my-container", None),
    ("", None),
])
def test_parse_kube_name(name: str, expected: KubeName | None) -> None:
    assert parse_kube_name(name) == expected


def test_create_name_reads_the_query() -> None:
    assert create_name("name=k8s_POD_web_ns_u-1_2&platform=") == "k8s_POD_web_ns_u-1_2"
    assert create_name("") == ""


def test_envs_of_keeps_order_and_leaves_out_bare_names() -> None:
    assert list(envs_of(["B=2", "A=1=x", "BARE"]).items()) == [("B", "2"), ("A", "1=x")]
    with pytest.raises(BodyError):
        envs_of("A=1")


# --- create ----------------------------------------------------------------------------------------


def test_sandbox_create_request() -> None:
    request = sandbox_create_request(SANDBOX_NAME, sandbox_body())
    assert request.pod_meta == hooks.PodSandboxMetadata(name="web", namespace="ns", uid="u-1", attempt=2)
    assert dict(request.labels) == {"app": "web"}  # cri-dockerd's own labels are not pod labels
    assert dict(request.annotations) == {"team": "a"}
    assert request.cgroup_parent == "/kubepods/pod-u-1"
    assert request.resources == hooks.LinuxContainerResources(cpu_shares=2, oom_score_adj=-998)


def test_container_create_request() -> None:
    pod = sandbox_create_request(SANDBOX_NAME, sandbox_body())
    request = with_pod(container_create_request(CONTAINER_NAME, container_body()), pod)
    assert request.container_meta == hooks.ContainerMetadata(name="app", attempt=1)
    assert request.pod_meta == pod.pod_meta and dict(request.pod_labels) == {"app": "web"}
    assert dict(request.container_annotations) == {"c": "1"}
    assert dict(request.container_envs) == {"PATH": "/bin", "KEEP": "me"}
    assert request.pod_cgroup_parent == "/kubepods/pod-u-1"
    assert request.container_resources == hooks.LinuxContainerResources(
        cpu_shares=1024, cpu_period=100_000, cpu_quota=50_000, memory_limit_in_bytes=256 * MiB,
        memory_swap_limit_in_bytes=256 * MiB, cpuset_cpus="0-1", oom_score_adj=500)
    assert request.pod_resources == pod.resources


def test_a_resource_of_the_wrong_type_is_a_body_error() -> None:
    body = container_body()
    body["HostConfig"]["Memory"] = "lots"
    with pytest.raises(BodyError, match="Memory"):
        container_create_request(CONTAINER_NAME, body)


def test_apply_to_sandbox_body() -> None:
    body = sandbox_body()
    request = sandbox_create_request(SANDBOX_NAME, body)
    changed = merge_pod_response(request, hooks.PodSandboxHookResponse(
        labels={"tier": "be"}, annotations={"hooked": "yes"}, cgroup_parent="/kubepods/be/pod-u-1"))
    apply_sandbox(body, changed)
    assert body["Labels"] == {"io.kubernetes.docker.type": "podsandbox", "io.kubernetes.container.name": "POD",
                              "app": "web", "tier": "be", "annotation.team": "a", "annotation.hooked": "yes"}
    assert body["HostConfig"]["CgroupParent"] == "/kubepods/be/pod-u-1"
    assert body["HostConfig"]["NetworkMode"] == "host"  # untouched


def test_apply_to_container_body_keeps_env_order_and_bare_names() -> None:
    body = container_body()
    request = container_create_request(CONTAINER_NAME, body)
    changed = merge_container_response(request, hooks.ContainerResourceHookResponse(
        container_envs={"KEEP": "me", "PATH": "/usr/bin", "NEW": "1"}, container_annotations={"hooked": "yes"},
        container_resources=hooks.LinuxContainerResources(cpu_shares=512), pod_cgroup_parent="/kubepods/be"))
    apply_container(body, changed)
    assert body["Env"] == ["PATH=/usr/bin", "KEEP=me", "NEW=1", "BARE"]
    assert body["Labels"]["annotation.hooked"] == "yes" and body["Labels"]["annotation.c"] == "1"
    assert body["Labels"]["io.kubernetes.sandbox.id"] == "s-1"
    host_config = body["HostConfig"]
    assert host_config["CgroupParent"] == "/kubepods/be"
    assert host_config["CpuShares"] == 512
    assert host_config["Memory"] == 256 * MiB  # the answer's zero did not overwrite it


def test_apply_resources_never_writes_a_zero_or_an_empty_value() -> None:
    host_config = {"Memory": 64 * MiB, "CpusetCpus": "0-1", "OomScoreAdj": 500}
    apply_resources(host_config, Resources(cpu_quota=-1))
    assert host_config == {"Memory": 64 * MiB, "CpusetCpus": "0-1", "OomScoreAdj": 500, "CpuQuota": -1}


# --- update ----------------------------------------------------------------------------------------


def test_update_resources_reads_the_update_config() -> None:
    body = {"CpuShares": 0, "Memory": 64 * MiB, "CpusetCpus": "", "RestartPolicy": {"Name": ""}}
    assert update_resources(body) == Resources(memory_limit_in_bytes=64 * MiB)


def test_apply_to_update_body_sends_only_what_plugins_changed_and_never_a_zero() -> None:
    body = {"CpuShares": 0, "Memory": 64 * MiB}
    seen = ContainerValue(ContainerRecord("s-1", resources=Resources(
        cpu_shares=1024, memory_limit_in_bytes=64 * MiB, cpuset_cpus="0-1", oom_score_adj=500)))
    changed = ContainerValue(ContainerRecord("s-1", resources=Resources(
        cpu_shares=700, memory_limit_in_bytes=64 * MiB, oom_score_adj=-1)))
    apply_to_update_body(body, ResourceUpdate(seen, changed))
    assert body == {"CpuShares": 700, "Memory": 64 * MiB}  # no OomScoreAdj: dockerd cannot update it


# --- inspect (recovery) ----------------------------------------------------------------------------


def _inspect(body: dict, container_id: str, name: str) -> dict:
    return {"Id": container_id, "Name": name, "Config": {"Labels": body["Labels"], "Env": body.get("Env", [])},
            "HostConfig": body["HostConfig"]}


def test_the_proxys_own_update_sends_only_the_non_zero_docker_fields() -> None:
    changes = Resources(cpu_shares=300, memory_limit_in_bytes=64 << 20, cpuset_cpus="0")
    assert update_config(changes) == {"CpuShares": 300, "Memory": 64 << 20, "CpusetCpus": "0"}


@pytest.mark.parametrize("changes", [
    Resources(unified={"memory.high": "1"}),
    Resources(hugepage_limits=(HugepageLimit("2MB", 1),)),
    Resources(oom_score_adj=5),
])
def test_the_proxys_own_update_refuses_what_dockerd_cannot_update(changes: Resources) -> None:
    with pytest.raises(BodyError, match="dockerd cannot update"):
        update_config(changes)


def test_inspect_reads_back_what_create_sent() -> None:
    sandbox = inspected(_inspect(sandbox_body(), "s-1", "/k8s_POD_web_ns_u-1_2"))
    assert sandbox is not None and sandbox.kind == "podsandbox"
    pod = hook_messages.pod_request(pod_from_inspect(sandbox))
    assert pod == sandbox_create_request(SANDBOX_NAME, sandbox_body())
    container = inspected(json.loads(json.dumps(_inspect(container_body(), "c-1", "/k8s_app_web_ns_u-1_1"))))
    assert container is not None and container.sandbox_id == "s-1"
    request = with_pod(hook_messages.container_request(container_from_inspect(container), None), pod)
    expected = with_pod(container_create_request(CONTAINER_NAME, container_body()), pod)
    expected.container_meta.id = "c-1"
    assert request == expected


@pytest.mark.parametrize("data", [
    None, [], {"Id": "x", "Name": "/someones-container", "Config": {"Labels": {}}, "HostConfig": {}},
    {"Id": "x", "Name": "/k8s_app_web_ns_u-1_1", "Config": {"Labels": {}}, "HostConfig": {}},  # no type label
    {"Id": "x", "Name": "/k8s_app_web_ns_u-1_1", "Config": {"Labels": "bad"}, "HostConfig": {}},
])
def test_inspect_of_a_container_kubernetes_did_not_create_is_none(data: object) -> None:
    assert inspected(data) is None


def test_a_plugin_raising_the_memory_limit_takes_cri_dockerds_no_swap_along() -> None:
    """cri-dockerd sends MemorySwap = Memory (no swap); dockerd refuses a Memory above MemorySwap, so a plugin
    that only raises the memory limit (as koordlet does) must raise the swap limit with it."""
    body = {"Labels": {"io.kubernetes.sandbox.id": "s-1"}, "HostConfig": {"Memory": 64 * MiB, "MemorySwap": 64 * MiB}}
    request = container_create_request(CONTAINER_NAME, body)
    raised = hooks.LinuxContainerResources()
    raised.CopyFrom(request.container_resources)
    raised.memory_limit_in_bytes = 128 * MiB
    changed = merge_container_response(request, hooks.ContainerResourceHookResponse(container_resources=raised))
    apply_container(body, changed)
    assert (body["HostConfig"]["Memory"], body["HostConfig"]["MemorySwap"]) == (128 * MiB, 128 * MiB)
    assert changed.container_resources.memory_swap_limit_in_bytes == 128 * MiB  # what the store records
