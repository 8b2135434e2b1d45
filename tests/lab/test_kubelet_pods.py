"""A node's worth of static pods and the two views of it, on /pods answers and CRI lists made up here."""

from __future__ import annotations

from typing import Any

from rplab.kubelet_node import NODE_NAME
from rplab.kubelet_pods import SETTLED, NodePorts, kubelet_view, node_pods, unsettled


def test_every_pod_is_host_network_and_never_pulls() -> None:
    pods = node_pods(NodePorts(8001, 8002))
    assert [pod["metadata"]["name"] for pod in pods] == list(SETTLED)
    for pod in pods:
        assert pod["spec"]["hostNetwork"] is True
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        assert all(container["imagePullPolicy"] == "Never" for container in containers)


def test_probe_settings_are_set_on_every_probe_only_when_given() -> None:
    probes = [container[probe] for pod in node_pods(NodePorts(8001, 8002), {"timeoutSeconds": 10, "periodSeconds": 5})
              for container in pod["spec"]["containers"] for probe in ("readinessProbe", "livenessProbe")
              if probe in container]
    assert len(probes) >= 8 and all(probe["timeoutSeconds"] == 10 and probe["periodSeconds"] == 5 for probe in probes)
    assert "timeoutSeconds" not in str(node_pods(NodePorts(8001, 8002)))


def status(name: str, phase: str, ready: bool, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": f"{name}-{NODE_NAME}"}, "status": {
        "phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}], "containerStatuses": containers}}


def test_the_kubelet_view_gives_states_as_words_and_a_crash_loop_restart_count_as_at_least_one() -> None:
    looping = {"name": "app", "ready": False, "restartCount": 3, "state": {"terminated": {"reason": "Error",
               "exitCode": 1}}, "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}
    running = {"name": "app", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "now"}}}
    view = kubelet_view({"crash-loop": status("crash-loop", "Running", False, [looping]),
                         "exec-probes": status("exec-probes", "Running", True, [running])})
    assert view["crash-loop"]["containers"]["app"] == {"ready": False, "restartCount": ">=1",
                                                       "state": "waiting:CrashLoopBackOff",
                                                       "lastState": "terminated:Error:1"}
    assert view["exec-probes"] == {"phase": "Running", "ready": True, "initContainers": {}, "containers": {
        "app": {"ready": True, "restartCount": 0, "state": "running", "lastState": "none"}}}
    # Caught between two crashes, it is in its loop all the same.
    assert "exec-probes" not in unsettled(view) and "crash-loop" not in unsettled(view)
    assert "readded" in unsettled(view)  # not there at all
