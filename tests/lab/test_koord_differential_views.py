"""rplab.koord_differential: a run's view (hooks in order, each request, the driver's views) with what each run
chose replaced by placeholders, compared leaf by leaf."""

from __future__ import annotations

from rplab.koord_differential import HookedRun, differences, observed


def run(container_id: str, pod_name: str, envs: dict[str, str]) -> HookedRun:
    meta = {"name": "app", "id": container_id}
    requests = [("PreRunPodSandbox", {"pod_meta": {"name": pod_name}}),
                ("PreCreateContainer", {"container_meta": {"name": "app"}, "container_envs": envs}),
                ("PreStartContainer", {"container_meta": meta}),
                ("PostStopContainer", {"container_meta": meta})]
    state = {"container": {"status": {"id": container_id, "pid": 12},
                           "info": {"runtimeSpec": {"linux": {"cgroupsPath": f"/parent/{container_id}"}}}}}
    return HookedRun(requests, state, {pod_name: "<pod-name>"})


def test_ids_names_and_pids_become_placeholders_and_a_hook_called_twice_is_numbered() -> None:
    view = observed(HookedRun([("PostStartContainer", {}), ("PostStartContainer", {"a": "b"})], {}))
    assert list(view) == ["hooks", "PostStartContainer", "PostStartContainer#2"]
    view = observed(run("c1", "pod-1", {"A": "1"}))
    assert view["hooks"] == ["PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStopContainer"]
    assert view["PreRunPodSandbox"] == {"pod_meta": {"name": "<pod-name>"}}
    assert view["PreStartContainer"]["container_meta"]["id"] == "<container-id>"
    assert view["container"]["status"] == {"id": "<container-id>", "pid": "<pid>"}
    assert view["container"]["info"]["runtimeSpec"]["linux"]["cgroupsPath"] == "/parent/<container-id>"


def test_only_what_the_runs_did_differently_is_a_difference() -> None:
    assert differences(run("c1", "pod-1", {"A": "1"}), run("c2", "pod-2", {"A": "1"})) == {}
    assert differences(run("c1", "pod-1", {"A": "1"}), run("c2", "pod-2", {})) == {
        "PreCreateContainer.container_envs.A": ("1", "<absent>")}
