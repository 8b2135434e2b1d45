"""The kit's answers: changes laid over the echoed request, as the proxy's merge rules expect."""

from __future__ import annotations

import pytest

from tests.kits.hooks import container_request, pod_request, resources
from runtimeproxy.hooks.changes import field_changes
from runtimeproxy.hooks.merge import merge_container_response, merge_pod_response
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.plugin import Whole, answer, echoed

Container = hooks.ContainerResourceHookResponse


def merged_changes(request: hooks.ContainerResourceHookRequest, result: object) -> list[str]:
    """What the proxy would change for a hook `result`, as "field: before -> after" lines."""
    merged = merge_container_response(request, answer(request, result, Container))  # type: ignore[arg-type]
    return [str(change) for change in field_changes(request, merged)]


def test_none_answers_the_echo_which_changes_nothing() -> None:
    request = container_request()
    assert answer(request, None, Container) == echoed(request, Container)
    assert merged_changes(request, None) == []


def test_an_env_var_is_added_not_a_replacement() -> None:
    request = container_request()
    assert merged_changes(request, Container(container_envs={"MY_VAR": "x"})) == [
        'container_envs["MY_VAR"]: (unset) -> "x"']


def test_one_resource_field_changes_only_that_field() -> None:
    request = container_request()
    result = Container(container_resources=resources(cpu_shares=512))
    assert merged_changes(request, result) == ["container_resources.cpu_shares: 1024 -> 512"]


def test_a_new_memory_limit_keeps_the_swap_allowance() -> None:
    request = container_request()  # 256 MiB memory, 512 MiB memory + swap
    result = Container(container_resources=resources(memory_limit_in_bytes=300 << 20))
    assert merged_changes(request, result) == [
        f"container_resources.memory_limit_in_bytes: {256 << 20} -> {300 << 20}",
        f"container_resources.memory_swap_limit_in_bytes: {512 << 20} -> {556 << 20}"]


def test_annotations_and_cgroup_parent_and_unified() -> None:
    request = container_request()
    result = Container(container_annotations={"c": "9"}, pod_cgroup_parent="/kubepods/besteffort/pod-u-1",
                       container_resources=resources(unified={"memory.high": "100M"}))
    assert merged_changes(request, result) == [
        'container_annotations["c"]: "1" -> "9"',
        'container_resources.unified["memory.high"]: "200M" -> "100M"',
        'pod_cgroup_parent: "/kubepods/pod-u-1" -> "/kubepods/besteffort/pod-u-1"']


def test_pod_answers_too() -> None:
    request = pod_request()
    response = answer(request, hooks.PodSandboxHookResponse(labels={"team": "a"}), hooks.PodSandboxHookResponse)
    merged = merge_pod_response(request, response)
    assert [str(c) for c in field_changes(request, merged)] == ['labels["team"]: (unset) -> "a"']


def test_whole_is_sent_as_is_the_plain_protocol() -> None:
    request = container_request()
    exact = Container(container_envs={"ONLY": "1"})
    assert answer(request, Whole(exact), Container) is exact
    assert 'container_envs["PATH"]: "/bin" -> (unset)' in merged_changes(request, Whole(exact))


def test_a_wrong_answer_type_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="must return a ContainerResourceHookResponse"):
        answer(container_request(), hooks.PodSandboxHookResponse(), Container)
