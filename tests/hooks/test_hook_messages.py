"""The core's records as koordinator's hook messages and back (hooks.hook_messages): value for value, presence kept."""

from __future__ import annotations

import pytest

from runtimeproxy.hooks.hook_messages import (
    container_record,
    container_request,
    pod_record,
    pod_request,
    resources_message,
    resources_of,
    with_request,
)
from runtimeproxy.hooks.model import ContainerState, Resources
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from tests.kits.hooks import container_request as sample_container, fill, full_resources, pod_request as sample_pod
from tests.kits.hooks import resources, unset_fields, with_pod


def test_every_resource_field_goes_to_the_model_and_back() -> None:
    message = fill(hooks.LinuxContainerResources())
    assert unset_fields(message) == []
    model = resources_of(message)
    assert isinstance(model, Resources) and resources_message(model) == message
    assert resources_message(resources_of(hooks.LinuxContainerResources())) == hooks.LinuxContainerResources()


def test_a_pods_request_goes_to_its_record_and_back_whole() -> None:
    request = fill(hooks.PodSandboxHookRequest())
    assert unset_fields(request) == []
    record = pod_record(request, skip_hooks=True, runtime_labels={"io.cri-containerd.kind": "sandbox"})
    assert pod_request(record) == request
    assert record.skip_hooks and record.all_labels() == {"io.cri-containerd.kind": "sandbox", **request.labels}


@pytest.mark.parametrize("absent", ["resources", "overhead"])
def test_a_pods_resources_absent_stay_absent(absent: str) -> None:
    request = sample_pod()
    request.ClearField(absent)
    assert getattr(pod_record(request), absent) is None
    assert not pod_request(pod_record(request)).HasField(absent)


def test_a_containers_part_goes_to_its_record_and_back_and_its_pods_part_is_its_pods() -> None:
    request = fill(hooks.ContainerResourceHookRequest())
    record = container_record("p1", request, {"io.kubernetes.pod.name": "web"}, state=ContainerState.CREATED,
                              created_ns=5)
    pod = hooks.PodSandboxHookRequest(
        pod_meta=request.pod_meta, labels=request.pod_labels, annotations=request.pod_annotations,
        cgroup_parent=request.pod_cgroup_parent, resources=request.pod_resources)
    assert container_request(record, pod_record(pod)) == request
    assert (record.pod_id, record.labels, record.state, record.created_ns) == \
        ("p1", {"io.kubernetes.pod.name": "web"}, ContainerState.CREATED, 5)
    alone = container_request(record, None)
    for name in ("pod_meta", "pod_resources"):
        assert not alone.HasField(name)
    assert not alone.pod_labels and not alone.pod_annotations and not alone.pod_cgroup_parent


def test_a_containers_request_takes_its_pods_part_as_the_pod_is_now() -> None:
    container = sample_container()
    pod = hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="new", uid="u-2", namespace="other", attempt=9),
        labels={"only": "this"}, annotations={"fresh": "1"}, cgroup_parent="/koord/be",
        resources=resources(cpu_shares=99),
    )
    result = container_request(container_record("p1", container), pod_record(pod))
    assert result.pod_meta == pod.pod_meta
    assert dict(result.pod_labels) == {"only": "this"}  # replaced, not merged
    assert dict(result.pod_annotations) == {"fresh": "1"}
    assert result.pod_cgroup_parent == "/koord/be"
    assert result.pod_resources == resources(cpu_shares=99)
    for name in ("container_meta", "container_annotations", "container_resources", "container_envs"):
        assert getattr(result, name) == getattr(container, name)
    assert with_pod(container, pod) == result and container == sample_container()  # the tests' helper agrees


def test_with_request_takes_what_the_plugins_left_and_keeps_the_rest() -> None:
    record = container_record("p1", sample_container(), {"k": "v"}, state=ContainerState.RUNNING, pid=7)
    left = sample_container()
    left.container_annotations["added"] = "yes"
    left.container_resources.cpu_shares = 4
    changed = with_request(record, left)
    assert changed.annotations["added"] == "yes" and changed.resources is not None
    assert changed.resources.cpu_shares == 4 and record.resources == resources_of(full_resources())
    assert (changed.labels, changed.state, changed.pid) == ({"k": "v"}, ContainerState.RUNNING, 7)
