"""nri.convert: the core's model as NRI's PodSandbox and Container, and what a Synchronize lists."""

from __future__ import annotations

from dataclasses import replace

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.edits import BindMount, ContainerEdits, ImageIdentity
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.model import ContainerRecord, ContainerState, Resources
from runtimeproxy.nri import convert
from runtimeproxy.nri.events import WIRE
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.nrihost import container_info, pod_info, pod_model

LABELS = {"io.kubernetes.container.name": "app", "io.kubernetes.pod.name": "web"}


def model(state: ContainerState = ContainerState.RUNNING, pod_id: str = "pod-1") -> ContainerRecord:
    return container_record(pod_id, container_info(), dict(LABELS), ContainerEdits(
        ("/bin/app", "-v"), (BindMount("/data", "/srv"),)), state, 4242, 10, 20, 0)


def test_a_container_shows_its_model_labels_state_pid_times_and_edits() -> None:
    message = convert.container("ctr-1", model())
    assert (message.id, message.pod_sandbox_id, message.name, message.state, message.pid) == \
        ("ctr-1", "pod-1", "app", nri.CONTAINER_RUNNING, 4242)
    assert dict(message.labels) == LABELS and dict(message.annotations) == {"a": "1"}
    assert (message.created_at, message.started_at, message.finished_at) == (10, 20, 0)
    assert list(message.args) == ["/bin/app", "-v"] and [m.destination for m in message.mounts] == ["/data"]
    assert list(message.env) == ["PATH=/bin"] and message.linux.resources.cpu.shares.value == 512


def test_a_container_shows_its_image_when_it_was_read() -> None:
    record = model()
    assert not convert.container("c", record).HasField("image")
    assert record.edits is not None
    record.edits = replace(record.edits, image=ImageIdentity("busybox:1.36", "sha256:index", "sha256:cfg"))
    image = convert.container("c", record).image
    assert (image.name, image.digest, image.config_digest) == ("busybox:1.36", "sha256:index", "sha256:cfg")


def test_each_state_is_nri_s() -> None:
    assert [convert.container("c", model(state)).state for state in ContainerState] == [
        nri.CONTAINER_UNKNOWN, nri.CONTAINER_CREATED, nri.CONTAINER_RUNNING, nri.CONTAINER_STOPPED]


def test_a_container_whose_edits_are_not_known_shows_none() -> None:
    message = convert.container("c", container_record("pod-1", container_info()))
    assert not message.args and not message.mounts and not message.linux.devices
    assert message.state == nri.CONTAINER_UNKNOWN and message.pid == 0


def test_create_shows_the_container_as_the_plugins_before_left_it_update_as_it_is_now() -> None:
    asked = container_record("pod-1", container_info(), dict(LABELS), ContainerEdits(("/x",)))
    assert asked.resources is not None
    asked.resources.cpu_shares = 2048  # the update applied; the plugins before left it so
    updated = convert.event_container(WIRE[nri_events.UPDATE_CONTAINER], Subject("pod-1", pod_model(), "ctr-1",
                                                                                  model()), asked)
    assert updated.linux.resources.cpu.shares.value == 512 and updated.state == nri.CONTAINER_RUNNING
    creating = Subject("pod-1", pod_model(), "", container_record("pod-1", container_info(), dict(LABELS)))
    created = convert.event_container(WIRE[nri_events.CREATE_CONTAINER], creating, asked)
    assert created.linux.resources.cpu.shares.value == 2048 and list(created.args) == ["/x"]
    assert created.state == nri.CONTAINER_UNKNOWN and dict(created.labels) == LABELS


def test_synchronize_lists_every_pod_and_the_containers_not_stopped() -> None:
    stopped = pod_record(pod_info("n"))
    stopped.ready = False
    pods = [("pod-1", pod_record(pod_info())), ("pod-stopped", stopped)]
    containers = [("running", model()), ("created", model(ContainerState.CREATED)),
                  ("stopped", model(ContainerState.STOPPED)), ("orphan", model(pod_id="pod-gone"))]
    shown_pods, shown_containers = convert.synchronized(pods, containers)
    assert [pod.id for pod in shown_pods] == ["pod-1", "pod-stopped"]  # containerd lists NOTREADY pods too
    assert [(c.id, c.state) for c in shown_containers] == [
        ("running", nri.CONTAINER_RUNNING), ("created", nri.CONTAINER_CREATED), ("orphan", nri.CONTAINER_RUNNING)]


def test_linux_resources_leave_zero_unset_as_cri_means_it() -> None:
    shown = convert.linux_resources(Resources(cpu_quota=0, cpu_shares=2))
    assert shown.cpu.shares.value == 2 and not shown.cpu.HasField("quota")


def test_an_update_shows_cpu_and_memory_as_containerd_sends_them_zero_too() -> None:
    shown = convert.update_resources(Resources(cpu_shares=1024, memory_limit_in_bytes=1 << 28,
                                               memory_swap_limit_in_bytes=1 << 29, cpuset_cpus="0-1"))
    assert shown.cpu.HasField("quota") and shown.cpu.quota.value == 0 and shown.cpu.HasField("period")
    assert (shown.cpu.shares.value, shown.memory.limit.value, shown.cpu.cpus) == (1024, 1 << 28, "0-1")
    assert not shown.memory.HasField("swap")  # containerd's conversion of a CRI update has none


def test_a_pod_shows_the_runtime_s_labels_beside_the_kubelet_s() -> None:
    record = pod_record(pod_info(), runtime_labels={"io.cri-containerd.kind": "sandbox"})
    shown = convert.subject_pod(Subject("pod-1", record))
    assert dict(shown.labels) == {"app": "web", "io.cri-containerd.kind": "sandbox"}
    assert shown.linux.cgroup_parent == "/kubepods/burstable/poduid-web"
    assert convert.subject_pod(Subject("pod-x", None)) == nri.PodSandbox(id="pod-x")
