"""docker.recovery: a container's model from dockerd's inspect (labels, argv, mounts, devices, state, pid,
times)."""

from __future__ import annotations

from runtimeproxy.docker.messages import inspected
from runtimeproxy.docker.recovery import container_record, unix_ns
from runtimeproxy.hooks.model import ContainerState

INSPECT = {
    "Id": "c1",
    "Name": "/k8s_app_web_default_uid-1_0",
    "Created": "2026-11-26T04:42:47.123456789Z",
    "Path": "/bin/app",
    "Args": ["-v"],
    "State": {"Status": "running", "Pid": 4242, "StartedAt": "2026-11-26T04:42:48Z",
              "FinishedAt": "0001-01-01T00:00:00Z"},
    "Config": {"Labels": {"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": "s1",
                          "io.kubernetes.container.logpath": "/var/log/x.log", "io.kubernetes.pod.name": "web",
                          "annotation.a": "1"},
               "Env": ["PATH=/bin"]},
    "HostConfig": {"Binds": ["/srv:/data:ro"], "Devices": [{"PathOnHost": "/dev/fuse",
                                                            "PathInContainer": "/dev/fuse",
                                                            "CgroupPermissions": "rwm"}],
                   "CpuShares": 512},
}


def test_a_container_s_model_comes_from_its_inspect() -> None:
    found = inspected(INSPECT)
    assert found is not None
    record = container_record(found)
    assert (record.pod_id, record.state, record.pid) == ("s1", ContainerState.RUNNING, 4242)
    assert record.labels == {"io.kubernetes.pod.name": "web"}  # as cri-dockerd reports a container's labels
    assert record.annotations == {"a": "1"} and record.resources is not None and record.resources.cpu_shares == 512
    assert record.edits is not None and record.edits.args == ("/bin/app", "-v")
    assert [(m.destination, m.source, m.readonly) for m in record.edits.mounts] == [("/data", "/srv", True)]
    assert [d.path for d in record.edits.devices] == ["/dev/fuse"]
    assert record.created_ns == 1795668167_123456789 and record.started_ns == 1795668168_000000000
    assert record.finished_ns == 0


def test_dockerd_s_states_and_times() -> None:
    for status, state in (("created", ContainerState.CREATED), ("exited", ContainerState.STOPPED),
                          ("paused", ContainerState.RUNNING), ("", ContainerState.UNKNOWN)):
        found = inspected({**INSPECT, "State": {"Status": status}})
        assert found is not None and container_record(found).state is state
    assert unix_ns("1970-01-01T00:00:01.5+00:00") == 1_500_000_000
    assert unix_ns("1970-01-01T01:00:01+01:00") == 1_000_000_000
    assert [unix_ns(text) for text in ("0001-01-01T00:00:00Z", "", "yesterday", "2026-13-01T00:00:00Z")] == \
        [0, 0, 0, 0]
