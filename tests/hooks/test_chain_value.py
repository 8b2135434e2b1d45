"""A chain's values: the model and its hook projection always describe one pod or container."""

from __future__ import annotations

from dataclasses import replace

from runtimeproxy.hooks.chain_value import ContainerValue, PodValue, RequestValue
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.model import Resources
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

from tests.kits.nrihost import container_info, pod_info


def value() -> ContainerValue:
    record = container_record("pod-1", container_info(), {"l": "1"}, ContainerEdits(("/bin/app",)))
    return ContainerValue(record, pod_record(pod_info()))


def test_a_hook_answer_s_request_becomes_the_model_and_the_rest_of_the_record_stays() -> None:
    start = value()
    merged = hooks.ContainerResourceHookRequest()
    merged.CopyFrom(start.request)
    merged.container_envs["FROM_HOOK"] = "1"
    merged.container_resources.cpu_shares = 1024
    merged.pod_cgroup_parent = "/kubepods/besteffort/poduid-web"
    moved = start.with_request(merged)
    assert moved.request is merged and moved.container.env == {"PATH": "/bin", "FROM_HOOK": "1"}
    assert moved.container.resources is not None and moved.container.resources.cpu_shares == 1024
    assert moved.container.labels == {"l": "1"} and moved.container.edits == ContainerEdits(("/bin/app",))
    assert start.with_request(start.request) is start  # nothing merged: the same value


def test_an_nri_fold_s_record_becomes_the_projection_and_the_pod_part_stays() -> None:
    start = value()
    resources = replace(start.container.resources or Resources(), cpu_shares=2, unified={"memory.high": "max"})
    folded = start.with_container(replace(start.container, annotations={"b": "2"}, resources=resources))
    assert dict(folded.request.container_annotations) == {"b": "2"}
    assert folded.request.container_resources.cpu_shares == 2
    assert dict(folded.request.container_resources.unified) == {"memory.high": "max"}
    assert folded.request.pod_meta == start.request.pod_meta
    assert folded.request.pod_cgroup_parent == start.request.pod_cgroup_parent
    assert start.request.container_resources.cpu_shares == 512  # the value it came from is unchanged
    again = hooks.ContainerResourceHookRequest()
    again.CopyFrom(folded.request)
    assert folded.with_request(again).container == folded.container  # the two sides agree


def test_a_record_without_resources_projects_none() -> None:
    start = value()
    bare = start.with_container(replace(start.container, resources=None))
    assert not bare.request.HasField("container_resources") and bare.container.resources is None


def test_a_pod_s_record_takes_what_its_merged_request_says_and_keeps_the_skip_verdict_and_runtime_labels() -> None:
    record = pod_record(pod_info(), skip_hooks=True, runtime_labels={"io.cri-containerd.kind": "sandbox"})
    start = PodValue(record, projected=pod_info())
    merged = hooks.PodSandboxHookRequest()
    merged.CopyFrom(start.request)
    merged.labels["from-hook"] = "1"
    merged.cgroup_parent = "/kubepods/besteffort/poduid-web"
    merged.resources.cpu_shares = 2
    moved = start.with_request(merged)
    assert moved.pod.labels == {"app": "web", "from-hook": "1"} and moved.pod.cgroup_parent == merged.cgroup_parent
    assert moved.pod.resources == Resources(cpu_shares=2)
    assert moved.pod.skip_hooks and moved.pod.runtime_labels == {"io.cri-containerd.kind": "sandbox"}
    assert start.pod.labels == {"app": "web"}  # the value it came from is unchanged
    assert start.with_request(start.request) is start


def test_a_request_value_is_its_request() -> None:
    start = RequestValue(pod_info())
    assert start.with_request(start.request) is start and start.with_request(pod_info("db")).request == pod_info("db")
