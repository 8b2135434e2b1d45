"""The core's container model (hooks.model) and the store's writes of its state: created, started, stopped."""

from __future__ import annotations

from runtimeproxy.hooks.hook_messages import pod_record
from runtimeproxy.hooks.model import ContainerRecord, ContainerState
from runtimeproxy.hooks.store import Store
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def test_a_record_starts_unknown_and_keeps_its_times_through_start_and_stop() -> None:
    record = ContainerRecord("p1")
    assert (record.state, record.pid, record.created_ns, record.started_ns, record.finished_ns) == \
        (ContainerState.UNKNOWN, 0, 0, 0, 0)
    assert record.edits is None and record.labels == {}  # not known, not "none"
    record.started(pid=4242)
    assert record.state is ContainerState.RUNNING and record.pid == 4242 and record.started_ns > 0
    record.stopped()
    finished = record.finished_ns
    # Its process is gone: containerd's NRI shows pid 0 from then on (RemoveContainer).
    assert record.state is ContainerState.STOPPED and finished >= record.started_ns and record.pid == 0
    record.stopped()  # a second stop (an eviction after the kubelet's) keeps the first time
    assert record.finished_ns == finished


def test_a_start_without_a_pid_keeps_the_one_known() -> None:
    record = ContainerRecord("p1", pid=7)
    record.started()
    assert record.pid == 7


def test_the_store_writes_state_only_to_records_it_holds() -> None:
    store = Store()
    store.put_pod("p1", pod_record(hooks.PodSandboxHookRequest()))
    store.put_container("c1", ContainerRecord("p1", state=ContainerState.CREATED))
    store.container_started("c1", 99)
    record = store.container("c1")
    assert record is not None and (record.state, record.pid) == (ContainerState.RUNNING, 99)
    store.container_stopped("c1")
    assert record.state is ContainerState.STOPPED
    pod = store.pod("p1")
    assert pod is not None and pod.ready
    store.pod_stopped("p1")
    assert not pod.ready
    for unknown in ("nope", ""):  # unknown IDs are no error (a miss is filled from the runtime later)
        store.container_started(unknown)
        store.container_stopped(unknown)
        store.pod_stopped(unknown)


def test_a_pod_s_labels_are_the_runtime_s_with_the_kubelet_s_over_them() -> None:
    pod = pod_record(hooks.PodSandboxHookRequest(labels={"app": "web", "kind": "kubelet"}),
                    runtime_labels={"kind": "runtime", "io.cri-containerd.kind": "sandbox"})
    assert pod.all_labels() == {"app": "web", "kind": "kubelet", "io.cri-containerd.kind": "sandbox"}
    assert pod.labels == {"app": "web", "kind": "kubelet"}  # what the hook projection shows: the kubelet's only
