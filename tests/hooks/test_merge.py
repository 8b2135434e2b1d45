"""koordlet's merge rules (hooks.merge), field by field: plugin answers, resource updates."""

from __future__ import annotations

import pytest

from runtimeproxy.hooks import merge
from runtimeproxy.hooks.hook_messages import resources_message, resources_of
from runtimeproxy.hooks.merge import (
    merge_container_response,
    merge_pod_response,
    merge_resources,
    merged_envs,
)
from tests.kits.hooks import container_request, full_resources, pod_request, resources
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

Resources = hooks.LinuxContainerResources

def merged(into: hooks.LinuxContainerResources, update: hooks.LinuxContainerResources) -> hooks.LinuxContainerResources:
    result = Resources()
    result.CopyFrom(into)
    merge_resources(result, update)
    return result


# --- merge_resources, one rule at a time -----------------------------------------------------


@pytest.mark.parametrize("name", ["cpu_period", "cpu_shares", "memory_limit_in_bytes", "memory_swap_limit_in_bytes"])
def test_positive_only_fields_are_taken_when_positive(name: str) -> None:
    base = full_resources()
    assert getattr(merged(base, resources(**{name: 7})), name) == 7
    assert getattr(merged(base, resources(**{name: 0})), name) == getattr(base, name)
    assert getattr(merged(base, resources(**{name: -5})), name) == getattr(base, name)


def test_cpu_quota_is_taken_when_nonzero_even_negative() -> None:
    base = full_resources()
    assert merged(base, resources(cpu_quota=20_000)).cpu_quota == 20_000
    assert merged(base, resources(cpu_quota=-1)).cpu_quota == -1  # unlimited
    assert merged(base, resources(cpu_quota=0)).cpu_quota == 50_000


def test_oom_score_adj_is_always_taken() -> None:
    base = full_resources()
    assert merged(base, resources(oom_score_adj=-998)).oom_score_adj == -998
    assert merged(base, resources(oom_score_adj=0)).oom_score_adj == 0


def test_cpusets_are_always_taken_even_empty() -> None:
    base = full_resources()
    assert merged(base, resources(cpuset_cpus="4-7", cpuset_mems="1")).cpuset_cpus == "4-7"
    assert merged(base, resources(cpuset_cpus="4-7", cpuset_mems="1")).cpuset_mems == "1"
    emptied = merged(base, resources())
    assert emptied.cpuset_cpus == "" and emptied.cpuset_mems == ""


def test_unified_is_merged_response_keys_win() -> None:
    result = merged(full_resources(), resources(unified={"memory.high": "300M", "memory.max": "1G"}))
    assert dict(result.unified) == {"memory.high": "300M", "cpu.weight": "100", "memory.max": "1G"}
    assert dict(merged(full_resources(), resources()).unified) == dict(full_resources().unified)


def test_hugepage_limits_are_kept_from_the_request() -> None:
    update = resources(hugepage_limits=[hooks.HugepageLimit(page_size="1GB", limit=1 << 30)])
    assert list(merged(full_resources(), update).hugepage_limits) == list(full_resources().hugepage_limits)
    assert list(merged(resources(), update).hugepage_limits) == []
    assert list(merged(full_resources(), resources()).hugepage_limits) == list(full_resources().hugepage_limits)


def test_an_all_default_resources_message_resets_only_the_always_taken_fields() -> None:
    result = merged(full_resources(), resources())
    expected = full_resources()
    expected.oom_score_adj = 0
    expected.cpuset_cpus = ""
    expected.cpuset_mems = ""
    assert result == expected


def test_echoing_the_resources_changes_nothing() -> None:
    assert merged(full_resources(), full_resources()) == full_resources()


# --- swap follows a plugin's memory limit -----------------------------------------------------

MiB = 1 << 20


def memory_swap(request: tuple[int, int], answer: tuple[int, int]) -> tuple[int, int]:
    result = merged(resources(memory_limit_in_bytes=request[0], memory_swap_limit_in_bytes=request[1]),
                    resources(memory_limit_in_bytes=answer[0], memory_swap_limit_in_bytes=answer[1]))
    return result.memory_limit_in_bytes, result.memory_swap_limit_in_bytes


@pytest.mark.parametrize("request_, answer, expected", [
    # the reproduction: the kubelet's "no swap" (swap == memory), koordlet raises memory, echoes swap
    ((64 * MiB, 64 * MiB), (96 * MiB, 64 * MiB), (96 * MiB, 96 * MiB)),
    ((64 * MiB, 64 * MiB), (96 * MiB, 0), (96 * MiB, 96 * MiB)),  # a plugin that leaves swap unset
    ((64 * MiB, 64 * MiB), (32 * MiB, 64 * MiB), (32 * MiB, 32 * MiB)),  # lowered: still no swap
    ((64 * MiB, 0), (96 * MiB, 0), (96 * MiB, 0)),  # no swap limit: none added (the runtime's default)
    ((64 * MiB, -1), (96 * MiB, -1), (96 * MiB, -1)),  # unlimited stays unlimited
    ((64 * MiB, 100 * MiB), (96 * MiB, 100 * MiB), (96 * MiB, 132 * MiB)),  # a real allowance keeps its size
    ((0, 0), (96 * MiB, 0), (96 * MiB, 0)),  # no memory limit before: nothing to follow
    ((64 * MiB, 64 * MiB), (64 * MiB, 64 * MiB), (64 * MiB, 64 * MiB)),  # an echo changes nothing
])
def test_swap_follows_a_new_memory_limit_keeping_the_requests_meaning(
    request_: tuple[int, int], answer: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert memory_swap(request_, answer) == expected


@pytest.mark.parametrize("answer, expected", [
    ((96 * MiB, 200 * MiB), (96 * MiB, 200 * MiB)),  # the plugin set swap: its value, not the rule's
    ((0, 200 * MiB), (64 * MiB, 200 * MiB)),
    ((96 * MiB, 32 * MiB), (96 * MiB, 32 * MiB)),  # taken as answered; validation refuses it first
])
def test_a_swap_limit_the_plugin_set_is_taken(answer: tuple[int, int], expected: tuple[int, int]) -> None:
    assert memory_swap((64 * MiB, 64 * MiB), answer) == expected


def test_a_container_response_follows_the_same_rule() -> None:
    request = container_request()
    request.container_resources.memory_limit_in_bytes = 64 * MiB
    request.container_resources.memory_swap_limit_in_bytes = 64 * MiB
    response = hooks.ContainerResourceHookResponse(container_resources=request.container_resources)
    response.container_resources.memory_limit_in_bytes = 96 * MiB
    result = merge_container_response(request, response).container_resources
    assert (result.memory_limit_in_bytes, result.memory_swap_limit_in_bytes) == (96 * MiB, 96 * MiB)


# --- pod responses ------------------------------------------------------------------------


def test_pod_labels_and_annotations_are_merged_nothing_deleted() -> None:
    response = hooks.PodSandboxHookResponse(labels={"tier": "back", "new": "x"}, annotations={"b": "20"})
    result = merge_pod_response(pod_request(), response)
    assert dict(result.labels) == {"app": "web", "tier": "back", "new": "x"}
    assert dict(result.annotations) == {"a": "1", "b": "20"}


def test_pod_cgroup_parent_replaced_only_when_non_empty() -> None:
    assert merge_pod_response(pod_request(), hooks.PodSandboxHookResponse(cgroup_parent="/koord/be")).cgroup_parent == "/koord/be"
    assert merge_pod_response(pod_request(), hooks.PodSandboxHookResponse()).cgroup_parent == "/kubepods/pod-u-1"


def test_pod_response_without_resources_changes_no_resources() -> None:
    request = pod_request()
    result = merge_pod_response(request, hooks.PodSandboxHookResponse(annotations={"x": "y"}))
    assert result.resources == request.resources
    assert result.overhead == request.overhead
    bare = hooks.PodSandboxHookRequest(labels={"a": "b"})
    assert not merge_pod_response(bare, hooks.PodSandboxHookResponse()).HasField("resources")


def test_pod_response_resources_follow_the_field_rules() -> None:
    response = hooks.PodSandboxHookResponse(resources=resources(cpu_shares=2, cpu_quota=-1, cpuset_cpus="1"))
    result = merge_pod_response(pod_request(), response)
    assert result.resources == merged(full_resources(), response.resources)
    assert result.resources.cpu_shares == 2 and result.resources.cpu_quota == -1
    assert result.resources.memory_limit_in_bytes == 256 << 20 and result.resources.oom_score_adj == 0
    assert result.overhead == pod_request().overhead  # never touched by a response


def test_pod_merge_leaves_the_request_alone_and_echo_is_identity() -> None:
    request = pod_request()
    echo = hooks.PodSandboxHookResponse(labels=request.labels, annotations=request.annotations,
                                        cgroup_parent=request.cgroup_parent, resources=request.resources)
    assert merge_pod_response(request, echo) == request
    merge_pod_response(request, hooks.PodSandboxHookResponse(labels={"z": "z"}, cgroup_parent="/x"))
    assert request == pod_request()  # merged into a copy


# --- container responses --------------------------------------------------------------------


def test_container_annotations_are_merged_nothing_deleted() -> None:
    response = hooks.ContainerResourceHookResponse(container_annotations={"d": "20", "e": "3"})
    result = merge_container_response(container_request(), response)
    assert dict(result.container_annotations) == {"c": "1", "d": "20", "e": "3"}


def test_container_pod_cgroup_parent_replaced_only_when_non_empty() -> None:
    response = hooks.ContainerResourceHookResponse(pod_cgroup_parent="/koord/ls")
    assert merge_container_response(container_request(), response).pod_cgroup_parent == "/koord/ls"
    assert merge_container_response(container_request(), hooks.ContainerResourceHookResponse()).pod_cgroup_parent == "/kubepods/pod-u-1"


def test_container_response_without_resources_changes_no_resources() -> None:
    result = merge_container_response(container_request(), hooks.ContainerResourceHookResponse(container_annotations={"x": "y"}))
    assert result.container_resources == full_resources()
    bare = hooks.ContainerResourceHookRequest(container_envs={"A": "1"})
    assert not merge_container_response(bare, hooks.ContainerResourceHookResponse()).HasField("container_resources")


def test_container_response_resources_follow_the_field_rules() -> None:
    update = resources(cpu_period=50_000, cpu_quota=-1, memory_limit_in_bytes=0, oom_score_adj=0,
                       cpuset_cpus="", cpuset_mems="1", unified={"memory.max": "1G"},
                       hugepage_limits=[hooks.HugepageLimit(page_size="1GB", limit=1)])
    result = merge_container_response(container_request(), hooks.ContainerResourceHookResponse(container_resources=update))
    expected = full_resources()
    expected.cpu_period = 50_000
    expected.cpu_quota = -1
    expected.oom_score_adj = 0
    expected.cpuset_cpus = ""
    expected.cpuset_mems = "1"
    expected.unified["memory.max"] = "1G"
    assert result.container_resources == expected
    assert result.pod_resources == container_request().pod_resources  # responses cannot change it


def test_container_envs_non_empty_map_replaces_the_set() -> None:
    response = hooks.ContainerResourceHookResponse(container_envs={"PATH": "/usr/bin", "NEW": "1"})
    result = merge_container_response(container_request(), response)
    assert dict(result.container_envs) == {"PATH": "/usr/bin", "NEW": "1"}  # HOME dropped


def test_container_envs_empty_map_changes_nothing() -> None:
    result = merge_container_response(container_request(), hooks.ContainerResourceHookResponse())
    assert dict(result.container_envs) == {"PATH": "/bin", "HOME": "/root"}


def test_container_echo_is_identity() -> None:
    request = container_request()
    echo = hooks.ContainerResourceHookResponse(
        container_annotations=request.container_annotations, container_resources=request.container_resources,
        pod_cgroup_parent=request.pod_cgroup_parent, container_envs=request.container_envs,
    )
    assert merge_container_response(request, echo) == request


def test_merged_envs_keeps_existing_order_and_appends_new_sorted() -> None:
    current = {"Z": "1", "A": "2", "M": "3"}
    result = merged_envs(current, {"M": "30", "Z": "10", "C": "new", "B": "new"})
    assert list(result.items()) == [("Z", "10"), ("M", "30"), ("B", "new"), ("C", "new")]
    assert merged_envs(current, {}) == current


# --- apply_resource_update: containerd's field-by-field update --------------------------------


def apply_resource_update(current: hooks.LinuxContainerResources,
                          update: hooks.LinuxContainerResources) -> hooks.LinuxContainerResources:
    """hooks.merge's, over the model, read and shown as the hook protocol's messages (field-exact both ways)."""
    return resources_message(merge.apply_resource_update(resources_of(current), resources_of(update)))


def _with(base: hooks.LinuxContainerResources, **fields: object) -> hooks.LinuxContainerResources:
    result = Resources()
    result.CopyFrom(base)
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def test_a_shares_only_update_keeps_everything_else() -> None:
    assert apply_resource_update(full_resources(), resources(cpu_shares=300)) == _with(full_resources(), cpu_shares=300)


@pytest.mark.parametrize("name, value", [
    ("cpu_period", 50_000), ("cpu_quota", -1), ("cpu_shares", 2),
    ("cpuset_cpus", "7"), ("cpuset_mems", "1"), ("memory_swap_limit_in_bytes", 1 << 30),
])
def test_each_non_zero_field_is_applied_alone(name: str, value: object) -> None:
    assert apply_resource_update(full_resources(), resources(**{name: value})) == _with(full_resources(), **{name: value})


def test_an_all_zero_update_changes_nothing() -> None:
    assert apply_resource_update(full_resources(), Resources()) == full_resources()


def test_oom_score_adj_is_never_updated() -> None:
    assert apply_resource_update(full_resources(), resources(oom_score_adj=-5)) == full_resources()


def test_unified_keys_merge_and_hugepages_replace_per_page_size() -> None:
    update = resources(unified={"memory.high": "1G", "pids.max": "10"},
                       hugepage_limits=[hooks.HugepageLimit(page_size="2MB", limit=8 << 20),
                                        hooks.HugepageLimit(page_size="1GB", limit=1 << 30)])
    result = apply_resource_update(full_resources(), update)
    assert dict(result.unified) == {"memory.high": "1G", "cpu.weight": "100", "pids.max": "10"}
    assert list(result.hugepage_limits) == [hooks.HugepageLimit(page_size="2MB", limit=8 << 20),
                                            hooks.HugepageLimit(page_size="1GB", limit=1 << 30)]


@pytest.mark.parametrize("swap", [96 << 20, 200 << 20, -1, 0])
def test_a_memory_only_update_sets_swap_to_the_memory_limit(swap: int) -> None:
    # containerd 1.6.20 on cgroup v1 (probed): whatever swap was, an allowance and -1 included.
    current = resources(memory_limit_in_bytes=96 << 20, memory_swap_limit_in_bytes=swap)
    assert apply_resource_update(current, resources(memory_limit_in_bytes=128 << 20)) == \
        resources(memory_limit_in_bytes=128 << 20, memory_swap_limit_in_bytes=128 << 20)


def test_an_update_with_swap_takes_it() -> None:
    current = resources(memory_limit_in_bytes=96 << 20, memory_swap_limit_in_bytes=96 << 20)
    assert apply_resource_update(current, resources(memory_limit_in_bytes=128 << 20,
                                                    memory_swap_limit_in_bytes=-1)) == \
        resources(memory_limit_in_bytes=128 << 20, memory_swap_limit_in_bytes=-1)


def test_apply_resource_update_leaves_its_inputs_alone() -> None:
    current, update = full_resources(), resources(cpu_shares=3, unified={"x": "1"})
    apply_resource_update(current, update)
    assert current == full_resources() and update == resources(cpu_shares=3, unified={"x": "1"})
