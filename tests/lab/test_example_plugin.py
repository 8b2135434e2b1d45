"""The example plugin's echo mode: the whole request comes back, field by field, nothing edited."""

from __future__ import annotations

from rplab.example_plugin import echoed
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def test_pod_request_echoed() -> None:
    request = hooks.PodSandboxHookRequest(labels={"app": "a"}, annotations={"k": "v"}, cgroup_parent="/kubepods",
                                          resources=hooks.LinuxContainerResources(cpu_shares=512, cpuset_cpus="0"))
    response = echoed(request, hooks.PodSandboxHookResponse)
    assert response == hooks.PodSandboxHookResponse(labels={"app": "a"}, annotations={"k": "v"},
                                                    cgroup_parent="/kubepods", resources=request.resources)


def test_container_request_echoed_without_inventing_fields() -> None:
    request = hooks.ContainerResourceHookRequest(container_annotations={"a": "1"}, pod_cgroup_parent="/p",
                                                 container_envs={"X": "1"})
    response = echoed(request, hooks.ContainerResourceHookResponse)
    assert dict(response.container_annotations) == {"a": "1"} and dict(response.container_envs) == {"X": "1"}
    assert response.pod_cgroup_parent == "/p"
    assert not response.HasField("container_resources")  # absent in the request: absent in the answer
