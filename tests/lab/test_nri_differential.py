"""rplab.nri_differential: what differs by nature is masked, the rest is found leaf by leaf, and a table of known
differences is checked both ways (a new difference, and one gone)."""

from __future__ import annotations

from rplab.nri_differential import NriRun, differences, observed, unexplained


def run(pod_id: str, ctr_id: str, root: str, *, labels: dict[str, str], pid: int) -> NriRun:
    pod = {"id": pod_id, "name": "p", "pid": pid, "linux": {"cgroups_path": f"{root}/{pod_id}"}}
    ctr = {"id": ctr_id, "name": "c", "labels": labels, "created_at": pid * 7,
           "linux": {"namespaces": [{"type": "network", "path": f"/proc/{pid}/ns/net"}]}}
    records = [{"event": "Configure", "runtime": "x", "version": str(pid), "config": ""},
               {"event": "Synchronize", "pods": ["p"], "containers": ["c"], "pods_full": [pod],
                "containers_full": [ctr]},
               {"event": "CreateContainer", "pod_full": pod, "container_full": ctr, "env": ["A=1"]}]
    spec = {"steps": [{"step": "ContainerStatus", "label": "running, verbose",
                       "answer": {"info": {"info": {"runtimeSpec": {"root": root}}}}}]}
    return NriRun(records, spec, (root,))


def test_ids_pids_times_and_roots_are_masked_and_the_rest_compares_leaf_by_leaf() -> None:
    native = run("aaa", "bbb", "/tmp/one", labels={"io.kubernetes.pod.name": "p"}, pid=10)
    hosted = run("ccc", "ddd", "/tmp/two", labels={}, pid=20)
    assert differences(native, hosted) == {
        "CreateContainer.container.labels[io.kubernetes.pod.name]": ("p", "<absent>"),
        "Synchronize(c).container.labels[io.kubernetes.pod.name]": ("p", "<absent>")}
    views = observed(native)
    assert views["events"] == ["Configure", "Synchronize", "CreateContainer"]
    assert views["Synchronize"] == {"pods": ["p"], "containers": ["c"]}
    assert views["CreateContainer"]["pod"]["linux"]["cgroups_path"] == "<root>/<pod-id p>"
    assert views["CreateContainer"]["container"]["linux"]["namespaces"][0]["path"] == "/proc/<pid>/ns/net"
    assert views["OCI spec (running)"] == {"root": "<root>"}
    assert views["OCI spec (resized)"] == "<absent>"


def test_a_table_is_checked_both_ways_with_only_the_star_special() -> None:
    found = ["CreateContainer.container.labels[io.kubernetes.pod.name]", "StopContainer.container.state"]
    table = {"*.container.labels[*]": "why", "RemoveContainer.container.state": "gone"}
    assert unexplained(found, table) == (["StopContainer.container.state"], ["RemoveContainer.container.state"])
