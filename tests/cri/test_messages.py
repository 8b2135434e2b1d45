"""Conversions between CRI requests and the core's model (cri.messages), field by field."""

from __future__ import annotations

from typing import TypeVar

import pytest
from google.protobuf.message import Message

from tests.kits.hooks import container_request, fill, full_resources, pod_request, resources, unset_fields, with_pod
from runtimeproxy.hooks.merge import apply_resource_update, merge_container_response, merge_pod_response
from runtimeproxy.hooks.hook_messages import resources_message, resources_of
from runtimeproxy.hooks.lifecycle import ResourceUpdate
from runtimeproxy.cri.messages import (
    align_sandbox_cgroup_parent,
    apply_to_container_config,
    apply_to_pod_config,
    apply_to_update_request,
    container_model,
    pod_model,
)
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks import hook_messages
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.cri.runtime.v1alpha2 import api_pb2 as v1alpha2
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

M = TypeVar("M", bound=Message)


# The frontend decodes into the core's model and writes back from it; these tests hold the conversions field by
# field through the model's hook projection (hooks.hook_messages), the message a hook plugin sees.


def convert(message: Message, target: type[M]) -> M:
    """Re-read a message as a wire-compatible type of the other protocol."""
    return target.FromString(message.SerializeToString())


def update_of(seen: hooks.ContainerResourceHookRequest, left: hooks.ContainerResourceHookRequest) -> ResourceUpdate:
    """PreUpdateContainerResources' outcome: the container the plugins saw and the one they left (as projections)."""
    return ResourceUpdate(ContainerValue(hook_messages.container_record("", seen), projected=seen),
                          ContainerValue(hook_messages.container_record("", left), projected=left))


def pod_hook_request(config: cri.PodSandboxConfig, runtime_handler: str) -> hooks.PodSandboxHookRequest:
    return hook_messages.pod_request(pod_model(config, runtime_handler))


def container_hook_request(config: cri.ContainerConfig, container_id: str = "") -> hooks.ContainerResourceHookRequest:
    return hook_messages.container_request(container_model("", config, container_id), None)


def apply_pod(config: cri.PodSandboxConfig, pod: hooks.PodSandboxHookRequest) -> None:
    apply_to_pod_config(config, hook_messages.pod_record(pod))


def apply_container(request: cri.CreateContainerRequest, container: hooks.ContainerResourceHookRequest,
                    env_order: list[str]) -> None:
    """As a creation's write-back does: the container, and its pod's cgroup parent (ContainerCreation.write_back)."""
    apply_to_container_config(request, hook_messages.container_record("", container), env_order)
    align_sandbox_cgroup_parent(request, container.pod_cgroup_parent)


# --- applying the result to CRI requests ------------------------------------------------------


def create_request(envs: list[tuple[str, str]]) -> cri.CreateContainerRequest:
    return cri.CreateContainerRequest(
        pod_sandbox_id="p-1",
        config=cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="app", attempt=1),
            envs=[cri.KeyValue(key=key, value=value.encode()) for key, value in envs],
            annotations={"c": "1"},
        ),
        sandbox_config=cri.PodSandboxConfig(linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/pod-u-1")),
    )


def test_apply_envs_keeps_original_order_appends_new_sorted_drops_removed() -> None:
    request = create_request([("Z", "1"), ("A", "2"), ("M", "3"), ("GONE", "x")])
    info = with_pod(container_hook_request(request.config), pod_request())
    response = hooks.ContainerResourceHookResponse(container_envs={"M": "30", "Z": "1", "A": "2", "NEW2": "b", "NEW1": "a"})
    changed = merge_container_response(info, response)
    apply_container(request, changed, [kv.key for kv in request.config.envs])
    assert [(kv.key, kv.value) for kv in request.config.envs] == [
        ("Z", b"1"), ("A", b"2"), ("M", b"30"), ("NEW1", b"a"), ("NEW2", b"b"),
    ]


def test_apply_envs_without_env_change_keeps_the_list() -> None:
    request = create_request([("Z", "1"), ("A", "2")])
    info = with_pod(container_hook_request(request.config), pod_request())
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(container_annotations={"x": "y"}))
    apply_container(request, changed, ["Z", "A"])
    assert [(kv.key, kv.value) for kv in request.config.envs] == [("Z", b"1"), ("A", b"2")]
    assert dict(request.config.annotations) == {"c": "1", "x": "y"}


def test_apply_container_resources_and_pod_cgroup_parent() -> None:
    request = create_request([])
    info = with_pod(container_hook_request(request.config), pod_request())
    response = hooks.ContainerResourceHookResponse(container_resources=resources(cpu_shares=512), pod_cgroup_parent="/koord/be")
    changed = merge_container_response(info, response)
    apply_container(request, changed, [])
    assert request.config.linux.resources.cpu_shares == 512
    assert request.sandbox_config.linux.cgroup_parent == "/koord/be"


def test_apply_container_does_not_invent_a_sandbox_config() -> None:
    request = create_request([])
    request.ClearField("sandbox_config")
    info = with_pod(container_hook_request(request.config), pod_request())
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(pod_cgroup_parent="/koord/be"))
    apply_container(request, changed, [])
    assert not request.HasField("sandbox_config")


def test_apply_to_pod_config() -> None:
    config = cri.PodSandboxConfig(labels={"app": "web"}, annotations={"a": "1"},
                                  linux=cri.LinuxPodSandboxConfig(cgroup_parent="/old", sysctls={"k": "v"}))
    info = pod_hook_request(config, "runc")
    response = hooks.PodSandboxHookResponse(annotations={"b": "2"}, cgroup_parent="/new", resources=resources(cpu_shares=7))
    apply_pod(config, merge_pod_response(info, response))
    assert dict(config.labels) == {"app": "web"}
    assert dict(config.annotations) == {"a": "1", "b": "2"}
    assert config.linux.cgroup_parent == "/new"
    assert config.linux.resources.cpu_shares == 7
    assert dict(config.linux.sysctls) == {"k": "v"}


def update_hook_request(request: cri.UpdateContainerResourcesRequest,
                        recorded: hooks.LinuxContainerResources) -> hooks.ContainerResourceHookRequest:
    """What PreUpdateContainerResources plugins see: the recorded resources with the update applied."""
    info = container_request()
    info.container_resources.CopyFrom(
        resources_message(apply_resource_update(resources_of(recorded), resources_of(request.linux))))
    info.container_annotations.update(request.annotations)
    return info


def test_apply_to_update_request_sends_only_the_plugins_changes() -> None:
    request = cri.UpdateContainerResourcesRequest(container_id="c-1", linux=cri.LinuxContainerResources(cpu_shares=2),
                                                  annotations={"u": "1"})
    info = update_hook_request(request, full_resources())
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(
        container_resources=resources(cpu_shares=4, memory_limit_in_bytes=64 << 20, cpuset_cpus="0-3",
                                      oom_score_adj=500, unified={"memory.high": "300M"}),
        container_annotations={"v": "2"}))
    apply_to_update_request(request, update_of(info, changed))
    # cpuset and oom_score_adj were echoed, cpu.weight not answered: none of them is sent. Swap followed the
    # new memory limit (256 MiB of allowance kept) and is sent with it.
    assert request.linux == cri.LinuxContainerResources(
        cpu_shares=4, memory_limit_in_bytes=64 << 20, memory_swap_limit_in_bytes=320 << 20,
        unified={"memory.high": "300M"})
    assert dict(request.annotations) == {"u": "1", "v": "2"}


def test_apply_to_update_request_echo_changes_nothing() -> None:
    request = cri.UpdateContainerResourcesRequest(container_id="c-1", linux=cri.LinuxContainerResources(cpu_shares=2))
    info = update_hook_request(request, full_resources())
    echo = hooks.ContainerResourceHookResponse(container_resources=info.container_resources,
                                               container_annotations=info.container_annotations)
    apply_to_update_request(request, update_of(info, merge_container_response(info, echo)))
    assert request == cri.UpdateContainerResourcesRequest(container_id="c-1",
                                                          linux=cri.LinuxContainerResources(cpu_shares=2))


def test_a_plugins_zero_does_not_cancel_the_kubelets_value() -> None:
    """cpusets are always taken from an answer; an empty one cannot clear anything in an update."""
    request = cri.UpdateContainerResourcesRequest(container_id="c-1",
                                                  linux=cri.LinuxContainerResources(cpuset_cpus="4-7"))
    info = update_hook_request(request, full_resources())
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(
        container_resources=resources(cpu_shares=8)))
    assert changed.container_resources.cpuset_cpus == ""
    apply_to_update_request(request, update_of(info, changed))
    assert request.linux == cri.LinuxContainerResources(cpuset_cpus="4-7", cpu_shares=8)


def test_apply_to_update_request_adds_linux_only_when_a_plugin_changed_resources() -> None:
    request = cri.UpdateContainerResourcesRequest(container_id="c-1", annotations={"u": "1"})
    info = update_hook_request(request, full_resources())
    apply_to_update_request(request, update_of(info, merge_container_response(
        info, hooks.ContainerResourceHookResponse(container_annotations={"v": "2"}))))
    assert not request.HasField("linux")
    apply_to_update_request(request, update_of(info, merge_container_response(
        info, hooks.ContainerResourceHookResponse(container_resources=resources(cpu_quota=-1, cpuset_cpus="0-3")))))
    assert request.linux == cri.LinuxContainerResources(cpu_quota=-1)


# --- CRI -> hook requests, field-exact --------------------------------------------------------


def cri_resources(seed: int) -> cri.LinuxContainerResources:
    return cri.LinuxContainerResources(
        cpu_period=seed + 1, cpu_quota=-(seed + 2), cpu_shares=seed + 3, memory_limit_in_bytes=seed + 4,
        oom_score_adj=-(seed + 5), cpuset_cpus=f"cpus{seed}", cpuset_mems=f"mems{seed}",
        hugepage_limits=[cri.HugepageLimit(page_size=f"{seed}MB", limit=(1 << 63) + seed)],
        unified={f"k{seed}": f"v{seed}"}, memory_swap_limit_in_bytes=seed + 6,
    )


def expected_hook_resources(seed: int) -> hooks.LinuxContainerResources:
    return hooks.LinuxContainerResources(
        cpu_period=seed + 1, cpu_quota=-(seed + 2), cpu_shares=seed + 3, memory_limit_in_bytes=seed + 4,
        oom_score_adj=-(seed + 5), cpuset_cpus=f"cpus{seed}", cpuset_mems=f"mems{seed}",
        hugepage_limits=[hooks.HugepageLimit(page_size=f"{seed}MB", limit=(1 << 63) + seed)],
        unified={f"k{seed}": f"v{seed}"}, memory_swap_limit_in_bytes=seed + 6,
    )


def cri_pod_config() -> cri.PodSandboxConfig:
    return cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="web", uid="u-1", namespace="ns", attempt=4_000_000_000),
        hostname="ignored", log_directory="/var/log/pods/x",
        labels={"app": "web"}, annotations={"a": "1"},
        linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/pod-u-1", overhead=cri_resources(10),
                                        resources=cri_resources(20), sysctls={"net.x": "1"}),
    )


def test_pod_hook_request_is_field_exact() -> None:
    request = pod_hook_request(cri_pod_config(), "kata")
    assert request == hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns", attempt=4_000_000_000),
        runtime_handler="kata", labels={"app": "web"}, annotations={"a": "1"},
        cgroup_parent="/kubepods/pod-u-1", overhead=expected_hook_resources(10),
        resources=expected_hook_resources(20),
    )


def test_pod_hook_request_without_linux_resources_has_none() -> None:
    request = pod_hook_request(cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="x")), "")
    assert not request.HasField("overhead") and not request.HasField("resources")
    assert request.pod_meta == hooks.PodSandboxMetadata(name="x")


def test_container_hook_request_is_field_exact() -> None:
    pod = pod_hook_request(cri_pod_config(), "runc")
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app", attempt=3),
        envs=[cri.KeyValue(key="A", value=b"1"), cri.KeyValue(key="B", value=b"2")],
        annotations={"c": "1"}, labels={"not": "sent"},
        linux=cri.LinuxContainerConfig(resources=cri_resources(30)),
    )
    request = with_pod(container_hook_request(config, "c-9"), pod)
    assert request == hooks.ContainerResourceHookRequest(
        pod_meta=pod.pod_meta,
        container_meta=hooks.ContainerMetadata(name="app", attempt=3, id="c-9"),
        container_annotations={"c": "1"},
        container_resources=expected_hook_resources(30),
        pod_resources=expected_hook_resources(20),
        pod_annotations={"a": "1"}, pod_labels={"app": "web"},
        pod_cgroup_parent="/kubepods/pod-u-1",
        container_envs={"A": "1", "B": "2"},
    )


def test_container_hook_request_without_resources() -> None:
    pod = hooks.PodSandboxHookRequest(labels={"a": "b"})
    request = with_pod(container_hook_request(cri.ContainerConfig(metadata=cri.ContainerMetadata(name="x"))), pod)
    assert not request.HasField("container_resources") and not request.HasField("pod_resources")
    assert request.container_meta == hooks.ContainerMetadata(name="x")


def test_resource_conversion_round_trips_every_field() -> None:
    source = fill(cri.LinuxContainerResources())
    assert unset_fields(source) == []
    there = convert(source, hooks.LinuxContainerResources)
    assert unset_fields(there) == []
    assert convert(there, cri.LinuxContainerResources) == source
    assert there.SerializeToString(deterministic=True) == source.SerializeToString(deterministic=True)


# --- runtime.v1alpha2 requests decoded with v1 classes -----------------------------------------


def test_v1alpha2_run_pod_sandbox_survives_v1_decode_change_encode() -> None:
    original = fill(v1alpha2.RunPodSandboxRequest())
    assert unset_fields(original) == []
    request = cri.RunPodSandboxRequest.FromString(original.SerializeToString())
    info = pod_hook_request(request.config, request.runtime_handler)
    changed = merge_pod_response(info, hooks.PodSandboxHookResponse(annotations={"added": "yes"}))
    apply_pod(request.config, changed)
    again = v1alpha2.RunPodSandboxRequest.FromString(request.SerializeToString())
    expected = v1alpha2.RunPodSandboxRequest()
    expected.CopyFrom(original)
    expected.config.annotations["added"] = "yes"
    assert again == expected
    assert unset_fields(again) == []


def test_v1alpha2_run_pod_sandbox_echo_reencodes_to_an_equal_message() -> None:
    original = fill(v1alpha2.RunPodSandboxRequest())
    request = cri.RunPodSandboxRequest.FromString(original.SerializeToString())
    info = pod_hook_request(request.config, request.runtime_handler)
    echo = hooks.PodSandboxHookResponse(labels=info.labels, annotations=info.annotations,
                                        cgroup_parent=info.cgroup_parent, resources=info.resources)
    changed = merge_pod_response(info, echo)
    assert changed == info
    apply_pod(request.config, changed)
    assert v1alpha2.RunPodSandboxRequest.FromString(request.SerializeToString()) == original


def test_v1alpha2_create_container_survives_v1_decode_change_encode() -> None:
    original = fill(v1alpha2.CreateContainerRequest())
    # One env per name, as the kubelet sends (the hook protocol carries envs as a map).
    assert len({kv.key for kv in original.config.envs}) == len(original.config.envs)
    request = cri.CreateContainerRequest.FromString(original.SerializeToString())
    info = with_pod(container_hook_request(request.config), pod_hook_request(request.sandbox_config, ""))
    response = hooks.ContainerResourceHookResponse(container_annotations={"added": "yes"},
                                                   container_resources=resources(cpu_shares=4321))
    changed = merge_container_response(info, response)
    apply_container(request, changed, [kv.key for kv in request.config.envs])
    again = v1alpha2.CreateContainerRequest.FromString(request.SerializeToString())
    expected = v1alpha2.CreateContainerRequest()
    expected.CopyFrom(original)
    expected.config.annotations["added"] = "yes"
    expected.config.linux.resources.cpu_shares = 4321
    # The always-taken fields come from the response (koordlet echoes them; this one does not).
    expected.config.linux.resources.oom_score_adj = 0
    expected.config.linux.resources.cpuset_cpus = ""
    expected.config.linux.resources.cpuset_mems = ""
    assert again == expected


def test_v1alpha2_update_container_resources_survives_v1_decode_change_encode() -> None:
    original = fill(v1alpha2.UpdateContainerResourcesRequest())
    request = cri.UpdateContainerResourcesRequest.FromString(original.SerializeToString())
    info = hooks.ContainerResourceHookRequest(container_resources=convert(request.linux, hooks.LinuxContainerResources),
                                              container_annotations=request.annotations)
    echo = hooks.ContainerResourceHookResponse(container_resources=info.container_resources,
                                               container_annotations={**info.container_annotations, "added": "yes"})
    apply_to_update_request(request, update_of(info, merge_container_response(info, echo)))
    again = v1alpha2.UpdateContainerResourcesRequest.FromString(request.SerializeToString())
    expected = v1alpha2.UpdateContainerResourcesRequest()
    expected.CopyFrom(original)
    expected.annotations["added"] = "yes"
    assert again == expected


@pytest.mark.parametrize("name", ["RunPodSandboxRequest", "CreateContainerRequest", "UpdateContainerResourcesRequest",
                                  "StopPodSandboxRequest", "StartContainerRequest", "StopContainerRequest"])
def test_v1alpha2_hooked_requests_round_trip_through_v1_unchanged(name: str) -> None:
    original = fill(getattr(v1alpha2, name)())
    data = original.SerializeToString()
    through_v1 = getattr(cri, name).FromString(data).SerializeToString()
    assert getattr(v1alpha2, name).FromString(through_v1) == original
