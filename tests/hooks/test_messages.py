"""Conversions between CRI and hook messages, and koordlet's merge rules, field by field."""

from __future__ import annotations

import pytest

from hookkit import fill, unset_fields
from runtimeproxy.hooks.messages import (
    apply_resource_update,
    apply_to_container_config,
    apply_to_pod_config,
    apply_to_update_request,
    container_hook_request,
    convert,
    merge_container_response,
    merge_pod_response,
    merge_resources,
    merged_envs,
    pod_hook_request,
    with_pod,
)
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.cri.runtime.v1alpha2 import api_pb2 as v1alpha2
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

Resources = hooks.LinuxContainerResources


def resources(**fields: object) -> hooks.LinuxContainerResources:
    return Resources(**fields)  # type: ignore[arg-type]


def full_resources() -> hooks.LinuxContainerResources:
    return Resources(
        cpu_period=100_000, cpu_quota=50_000, cpu_shares=1024, memory_limit_in_bytes=256 << 20,
        oom_score_adj=500, cpuset_cpus="0-3", cpuset_mems="0",
        hugepage_limits=[hooks.HugepageLimit(page_size="2MB", limit=4 << 20)],
        unified={"memory.high": "200M", "cpu.weight": "100"}, memory_swap_limit_in_bytes=512 << 20,
    )


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


# --- pod responses ------------------------------------------------------------------------


def pod_request() -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns", attempt=2),
        runtime_handler="runc",
        labels={"app": "web", "tier": "front"},
        annotations={"a": "1", "b": "2"},
        cgroup_parent="/kubepods/pod-u-1",
        overhead=resources(cpu_shares=10),
        resources=full_resources(),
    )


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


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=pod_request().pod_meta,
        container_meta=hooks.ContainerMetadata(name="app", attempt=1, id="c-1"),
        container_annotations={"c": "1", "d": "2"},
        container_resources=full_resources(),
        pod_resources=resources(cpu_shares=2048),
        pod_annotations={"a": "1"},
        pod_labels={"app": "web"},
        pod_cgroup_parent="/kubepods/pod-u-1",
        container_envs={"PATH": "/bin", "HOME": "/root"},
    )


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


# --- applying the result to CRI requests ------------------------------------------------------


def create_request(envs: list[tuple[str, str]]) -> cri.CreateContainerRequest:
    return cri.CreateContainerRequest(
        pod_sandbox_id="p-1",
        config=cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="app", attempt=1),
            envs=[cri.KeyValue(key=key, value=value) for key, value in envs],
            annotations={"c": "1"},
        ),
        sandbox_config=cri.PodSandboxConfig(linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/pod-u-1")),
    )


def test_apply_envs_keeps_original_order_appends_new_sorted_drops_removed() -> None:
    request = create_request([("Z", "1"), ("A", "2"), ("M", "3"), ("GONE", "x")])
    info = container_hook_request(pod_request(), request.config)
    response = hooks.ContainerResourceHookResponse(container_envs={"M": "30", "Z": "1", "A": "2", "NEW2": "b", "NEW1": "a"})
    changed = merge_container_response(info, response)
    apply_to_container_config(request, changed, [kv.key for kv in request.config.envs])
    assert [(kv.key, kv.value) for kv in request.config.envs] == [
        ("Z", "1"), ("A", "2"), ("M", "30"), ("NEW1", "a"), ("NEW2", "b"),
    ]


def test_apply_envs_without_env_change_keeps_the_list() -> None:
    request = create_request([("Z", "1"), ("A", "2")])
    info = container_hook_request(pod_request(), request.config)
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(container_annotations={"x": "y"}))
    apply_to_container_config(request, changed, ["Z", "A"])
    assert [(kv.key, kv.value) for kv in request.config.envs] == [("Z", "1"), ("A", "2")]
    assert dict(request.config.annotations) == {"c": "1", "x": "y"}


def test_apply_container_resources_and_pod_cgroup_parent() -> None:
    request = create_request([])
    info = container_hook_request(pod_request(), request.config)
    response = hooks.ContainerResourceHookResponse(container_resources=resources(cpu_shares=512), pod_cgroup_parent="/koord/be")
    changed = merge_container_response(info, response)
    apply_to_container_config(request, changed, [])
    assert request.config.linux.resources.cpu_shares == 512
    assert request.sandbox_config.linux.cgroup_parent == "/koord/be"


def test_apply_container_does_not_invent_a_sandbox_config() -> None:
    request = create_request([])
    request.ClearField("sandbox_config")
    info = container_hook_request(pod_request(), request.config)
    changed = merge_container_response(info, hooks.ContainerResourceHookResponse(pod_cgroup_parent="/koord/be"))
    apply_to_container_config(request, changed, [])
    assert not request.HasField("sandbox_config")


def test_apply_to_pod_config() -> None:
    config = cri.PodSandboxConfig(labels={"app": "web"}, annotations={"a": "1"},
                                  linux=cri.LinuxPodSandboxConfig(cgroup_parent="/old", sysctls={"k": "v"}))
    info = pod_hook_request(config, "runc")
    response = hooks.PodSandboxHookResponse(annotations={"b": "2"}, cgroup_parent="/new", resources=resources(cpu_shares=7))
    apply_to_pod_config(config, merge_pod_response(info, response))
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
        apply_resource_update(recorded, convert(request.linux, hooks.LinuxContainerResources)))
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
    apply_to_update_request(request, info, changed)
    # cpuset and oom_score_adj were echoed, cpu.weight not answered: none of them is sent.
    assert request.linux == cri.LinuxContainerResources(
        cpu_shares=4, memory_limit_in_bytes=64 << 20, unified={"memory.high": "300M"})
    assert dict(request.annotations) == {"u": "1", "v": "2"}


def test_apply_to_update_request_echo_changes_nothing() -> None:
    request = cri.UpdateContainerResourcesRequest(container_id="c-1", linux=cri.LinuxContainerResources(cpu_shares=2))
    info = update_hook_request(request, full_resources())
    echo = hooks.ContainerResourceHookResponse(container_resources=info.container_resources,
                                               container_annotations=info.container_annotations)
    apply_to_update_request(request, info, merge_container_response(info, echo))
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
    apply_to_update_request(request, info, changed)
    assert request.linux == cri.LinuxContainerResources(cpuset_cpus="4-7", cpu_shares=8)


def test_apply_to_update_request_adds_linux_only_when_a_plugin_changed_resources() -> None:
    request = cri.UpdateContainerResourcesRequest(container_id="c-1", annotations={"u": "1"})
    info = update_hook_request(request, full_resources())
    apply_to_update_request(request, info, merge_container_response(
        info, hooks.ContainerResourceHookResponse(container_annotations={"v": "2"})))
    assert not request.HasField("linux")
    apply_to_update_request(request, info, merge_container_response(
        info, hooks.ContainerResourceHookResponse(container_resources=resources(cpu_quota=-1, cpuset_cpus="0-3"))))
    assert request.linux == cri.LinuxContainerResources(cpu_quota=-1)


# --- apply_resource_update: containerd's field-by-field update --------------------------------


def _with(base: hooks.LinuxContainerResources, **fields: object) -> hooks.LinuxContainerResources:
    result = Resources()
    result.CopyFrom(base)
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def test_a_shares_only_update_keeps_everything_else() -> None:
    assert apply_resource_update(full_resources(), resources(cpu_shares=300)) == _with(full_resources(), cpu_shares=300)


@pytest.mark.parametrize("name, value", [
    ("cpu_period", 50_000), ("cpu_quota", -1), ("cpu_shares", 2), ("memory_limit_in_bytes", 96 << 20),
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


def test_swap_that_followed_the_memory_limit_keeps_following_it() -> None:
    following = resources(memory_limit_in_bytes=96 << 20, memory_swap_limit_in_bytes=96 << 20)
    assert apply_resource_update(following, resources(memory_limit_in_bytes=128 << 20)) == \
        resources(memory_limit_in_bytes=128 << 20, memory_swap_limit_in_bytes=128 << 20)
    own = resources(memory_limit_in_bytes=96 << 20, memory_swap_limit_in_bytes=200 << 20)
    assert apply_resource_update(own, resources(memory_limit_in_bytes=128 << 20)) == \
        resources(memory_limit_in_bytes=128 << 20, memory_swap_limit_in_bytes=200 << 20)
    unset = resources(memory_limit_in_bytes=96 << 20)
    assert apply_resource_update(unset, resources(memory_limit_in_bytes=128 << 20)) == \
        resources(memory_limit_in_bytes=128 << 20)


def test_apply_resource_update_leaves_its_inputs_alone() -> None:
    current, update = full_resources(), resources(cpu_shares=3, unified={"x": "1"})
    apply_resource_update(current, update)
    assert current == full_resources() and update == resources(cpu_shares=3, unified={"x": "1"})


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
        envs=[cri.KeyValue(key="A", value="1"), cri.KeyValue(key="B", value="2")],
        annotations={"c": "1"}, labels={"not": "sent"},
        linux=cri.LinuxContainerConfig(resources=cri_resources(30)),
    )
    request = container_hook_request(pod, config, "c-9")
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
    request = container_hook_request(pod, cri.ContainerConfig(metadata=cri.ContainerMetadata(name="x")))
    assert not request.HasField("container_resources") and not request.HasField("pod_resources")
    assert request.container_meta == hooks.ContainerMetadata(name="x")


def test_resource_conversion_round_trips_every_field() -> None:
    source = fill(cri.LinuxContainerResources())
    assert unset_fields(source) == []
    there = convert(source, hooks.LinuxContainerResources)
    assert unset_fields(there) == []
    assert convert(there, cri.LinuxContainerResources) == source
    assert there.SerializeToString(deterministic=True) == source.SerializeToString(deterministic=True)


# --- with_pod --------------------------------------------------------------------------------


def test_with_pod_refreshes_the_pod_context_on_a_copy() -> None:
    container = container_request()
    pod = hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="new", uid="u-2", namespace="other", attempt=9),
        labels={"only": "this"}, annotations={"fresh": "1"}, cgroup_parent="/koord/be",
        resources=resources(cpu_shares=99),
    )
    result = with_pod(container, pod)
    assert result.pod_meta == pod.pod_meta
    assert dict(result.pod_labels) == {"only": "this"}  # replaced, not merged
    assert dict(result.pod_annotations) == {"fresh": "1"}
    assert result.pod_cgroup_parent == "/koord/be"
    assert result.pod_resources == resources(cpu_shares=99)
    for name in ("container_meta", "container_annotations", "container_resources", "container_envs"):
        assert getattr(result, name) == getattr(container, name)
    assert container == container_request()  # the stored record is not touched


def test_with_pod_none_is_a_plain_copy() -> None:
    container = container_request()
    result = with_pod(container, None)
    assert result == container and result is not container


# --- runtime.v1alpha2 requests decoded with v1 classes -----------------------------------------


def test_v1alpha2_run_pod_sandbox_survives_v1_decode_change_encode() -> None:
    original = fill(v1alpha2.RunPodSandboxRequest())
    assert unset_fields(original) == []
    request = cri.RunPodSandboxRequest.FromString(original.SerializeToString())
    info = pod_hook_request(request.config, request.runtime_handler)
    changed = merge_pod_response(info, hooks.PodSandboxHookResponse(annotations={"added": "yes"}))
    apply_to_pod_config(request.config, changed)
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
    apply_to_pod_config(request.config, changed)
    assert v1alpha2.RunPodSandboxRequest.FromString(request.SerializeToString()) == original


def test_v1alpha2_create_container_survives_v1_decode_change_encode() -> None:
    original = fill(v1alpha2.CreateContainerRequest())
    # One env per name, as the kubelet sends (the hook protocol carries envs as a map).
    assert len({kv.key for kv in original.config.envs}) == len(original.config.envs)
    request = cri.CreateContainerRequest.FromString(original.SerializeToString())
    info = container_hook_request(pod_hook_request(request.sandbox_config, ""), request.config)
    response = hooks.ContainerResourceHookResponse(container_annotations={"added": "yes"},
                                                   container_resources=resources(cpu_shares=4321))
    changed = merge_container_response(info, response)
    apply_to_container_config(request, changed, [kv.key for kv in request.config.envs])
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
    apply_to_update_request(request, info, merge_container_response(info, echo))
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
