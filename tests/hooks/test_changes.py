"""field_changes: every differing leaf, named like validation names response fields."""

from __future__ import annotations

from tests.kits.hooks import container_request, pod_request, resources
from runtimeproxy.hooks.changes import UNSET, FieldChange, describe, dropped_env_names, field_changes
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def test_identical_messages_have_no_changes() -> None:
    assert field_changes(container_request(), container_request()) == []
    assert describe([]) == "nothing"


def test_map_entries_are_changes_one_by_one() -> None:
    before = container_request()
    after = container_request()
    after.container_envs["MY_VAR"] = "x"
    after.container_envs["PATH"] = "/usr/bin"
    del after.container_envs["HOME"]
    assert field_changes(before, after) == [
        FieldChange('container_envs["HOME"]', "/root", UNSET),
        FieldChange('container_envs["MY_VAR"]', UNSET, "x"),
        FieldChange('container_envs["PATH"]', "/bin", "/usr/bin"),
    ]
    assert str(field_changes(before, after)[1]) == 'container_envs["MY_VAR"]: (unset) -> "x"'


def test_nested_scalars_repeated_fields_and_strings() -> None:
    before, after = pod_request(), pod_request()
    after.resources.memory_limit_in_bytes = 96 << 20
    after.resources.hugepage_limits[0].limit = 1
    after.cgroup_parent = "/kubepods/besteffort/pod-u-1"
    changes = field_changes(before, after)
    assert [change.field for change in changes] == [
        "cgroup_parent", "resources.memory_limit_in_bytes", "resources.hugepage_limits"]
    assert str(changes[0]) == 'cgroup_parent: "/kubepods/pod-u-1" -> "/kubepods/besteffort/pod-u-1"'
    assert changes[1].before == 256 << 20 and changes[1].after == 96 << 20


def test_a_message_that_appears_shows_its_fields_or_itself_when_empty() -> None:
    before = hooks.ContainerResourceHookRequest()
    after = hooks.ContainerResourceHookRequest(container_resources=resources(cpu_shares=512))
    assert field_changes(before, after) == [FieldChange("container_resources.cpu_shares", 0, 512)]
    empty = hooks.ContainerResourceHookRequest()
    empty.container_resources.SetInParent()
    [change] = field_changes(before, empty)
    assert change.field == "container_resources" and change.before is UNSET


def test_dropped_env_names() -> None:
    request = {"PATH": "/bin", "HOME": "/root", "A": "1"}
    assert dropped_env_names(request, {"MY_VAR": "x"}) == ["A", "HOME", "PATH"]
    assert dropped_env_names(request, {**request, "MY_VAR": "x"}) == []
    assert dropped_env_names(request, {}) == []  # an empty map changes nothing
