"""The node as most clusters run it: cgroup v2 and containerd's systemd cgroup driver (`SystemdCgroup = true`).

These machines are cgroup v1 without systemd, so the node is a qemu guest (rplab.guest: Debian 12, systemd as PID
1, containerd 1.6 with the systemd driver) whose containerd socket is forwarded here; the proxy and the plugins run
on this machine in front of it, and the guest's cgroup files are read from its shell. Pods get the kubelet's
systemd-driver parents (`kubepods-burstable-pod<uid>.slice`, which systemd nests as
`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`), and runc turns the OCI resources
into cgroup v2 files: memory limit -> memory.max, memory+swap -> memory.swap.max (their difference), cpu shares ->
cpu.weight, cpu quota/period -> cpu.max.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rplab.cgroup_v2 import CGROUP_ROOT, cpu_weight, pod_slice, scope_path, slice_path
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ExampleSettings, echoed
from rplab.guest import Guest
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from test_hooks import Lab, hook_lab, spec_of, update_resources
from test_nri import NriLab, nri_lab
from tests.kits.nri import NriPlugin, adjusting

_serial = itertools.count()
MiB = 1024 * 1024
LOG_DIR = Path("/var/log/rplab-pods")  # in the guest: containerd writes container logs there


class GuestPods:
    """Pods and containers on the guest through one CRI client (the proxy's or the guest's own socket)."""

    def __init__(self, client: CriClient, cleanup: list[str]) -> None:
        self.client = client
        self.cleanup = cleanup

    def run(self, *, qos: str = "burstable", resources: Any | None = None,
            parent: str | None = None) -> tuple[str, str, Any]:
        """A pod under the kubelet's slice for `qos` (or `parent`) with one started container: (pod id,
        container id, the pod's uid)."""
        client = self.client
        name = f"cg{next(_serial)}"
        uid = str(uuid.uuid4())
        pod_config = client.pod_config(name, LOG_DIR / name, uid=uid, cgroup_parent=parent or pod_slice(qos, uid))
        pod_id = client.run_pod(pod_config)
        self.cleanup.append(pod_id)
        container_id = client.create_container(pod_id, client.container_config("app", resources=resources),
                                               pod_config)
        client.start_container(container_id)
        return pod_id, container_id, uid


@pytest.fixture
def guest_pods_cleanup(guest_containerd: Guest) -> Iterator[list[str]]:
    """Pods a test registers here are stopped and removed on the guest (directly) whatever the outcome."""
    pods: list[str] = []
    yield pods
    with open_channel(guest_containerd.address) as channel:
        CriClient(channel).discard_pods(pods)


@pytest.fixture
def guest_lab(guest_containerd: Guest, workdir: Path, loop_thread: LoopThread) -> Iterator[Lab]:
    """The proxy (with a hook config dir for the tests' plugins) in front of the guest's containerd."""
    with hook_lab(guest_containerd.address, workdir / f"cg{next(_serial)}", loop_thread) as lab:
        yield lab


@pytest.fixture
def guest_direct(guest_containerd: Guest) -> Iterator[CriClient]:
    channel = open_channel(guest_containerd.address)
    yield CriClient(channel)
    channel.close()


def kubelet_resources(client: CriClient, memory: int = 64 * MiB, shares: int = 256, quota: int = 20000) -> Any:
    """What the kubelet sends for a burstable container with swap off: swap == memory."""
    return client.api.LinuxContainerResources(memory_limit_in_bytes=memory, memory_swap_limit_in_bytes=memory,
                                              cpu_shares=shares, cpu_period=100000, cpu_quota=quota)


def cgroup_files(guest: Guest, directory: str) -> dict[str, str]:
    names = ("memory.max", "memory.swap.max", "cpu.weight", "cpu.max")
    values = guest.shell(" ; ".join(f"cat {directory}/{name}" for name in names)).split()
    return dict(zip(names, [values[0], values[1], values[2], " ".join(values[3:5])]))


def koordlet_like(request: hooks.ContainerResourceHookRequest, _: Any) -> hooks.ContainerResourceHookResponse:
    """Echo the request, with more memory (swap echoed: the proxy makes it follow), shares and a quota."""
    response = echoed(request, hooks.ContainerResourceHookResponse)
    resources = response.container_resources
    resources.memory_limit_in_bytes, resources.cpu_shares, resources.cpu_quota = 128 * MiB, 512, 50000
    return response


def test_the_node_is_cgroup_v2_with_systemd(guest_containerd: Guest) -> None:
    assert guest_containerd.shell("stat -fc %T /sys/fs/cgroup; cat /proc/1/comm").split() == ["cgroup2fs", "systemd"]
    assert "SystemdCgroup = true" in guest_containerd.read("/etc/containerd/config.toml")


def test_a_hooked_pod_lands_in_its_slice_with_the_plugin_resources_in_cgroup_v2_files(
        guest_lab: Lab, guest_direct: CriClient, guest_containerd: Guest, guest_pods_cleanup: list[str]) -> None:
    _, socket = guest_lab.plugin(ExampleSettings(answers={"PreCreateContainer": koordlet_like}))
    guest_lab.register("10-koordlet-like.json", socket, ["PreCreateContainer"])
    pods = GuestPods(guest_lab.client, guest_pods_cleanup)
    _, container_id, uid = pods.run(resources=kubelet_resources(guest_lab.client))

    spec = spec_of(guest_lab.client, container_id)
    assert spec["linux"]["cgroupsPath"] == f"{pod_slice('burstable', uid)}:cri-containerd:{container_id}"
    scope = scope_path(spec)
    assert scope.startswith(f"{CGROUP_ROOT}/kubepods.slice/kubepods-burstable.slice/{pod_slice('burstable', uid)}/")
    # The plugin's memory, its shares as a weight, its quota; swap followed memory: no swap (swap.max 0).
    assert spec["linux"]["resources"]["memory"] == {"limit": 128 * MiB, "swap": 128 * MiB}
    assert cgroup_files(guest_containerd, scope) == {
        "memory.max": str(128 * MiB), "memory.swap.max": "0", "cpu.weight": str(cpu_weight(512)),
        "cpu.max": "50000 100000"}

    # Direct, the kubelet's own values land as they are.
    _, direct_id, _ = GuestPods(guest_direct, guest_pods_cleanup).run(resources=kubelet_resources(guest_direct))
    assert cgroup_files(guest_containerd, scope_path(spec_of(guest_direct, direct_id))) == {
        "memory.max": str(64 * MiB), "memory.swap.max": "0", "cpu.weight": str(cpu_weight(256)),
        "cpu.max": "20000 100000"}


def test_without_the_follow_swap_below_memory_fails_in_runc_direct(
        guest_direct: CriClient, guest_pods_cleanup: list[str]) -> None:
    """What the plugin's answer would be if swap stayed as the kubelet sent it: runc refuses it on cgroup v2."""
    resources = kubelet_resources(guest_direct, memory=128 * MiB)
    resources.memory_swap_limit_in_bytes = 64 * MiB
    with pytest.raises(grpc.RpcError) as raised:
        GuestPods(guest_direct, guest_pods_cleanup).run(resources=resources)
    assert "memory+swap limit should be >= memory limit" in raised.value.details()  # StartContainer, from runc


def test_an_update_raised_by_a_plugin_moves_memory_max_and_swap_follows(
        guest_lab: Lab, guest_containerd: Guest, guest_pods_cleanup: list[str]) -> None:
    _, socket = guest_lab.plugin(ExampleSettings(update_memory_limit_in_bytes=160 * MiB))
    guest_lab.register("10-resize.json", socket, ["PreUpdateContainerResources"])
    pods = GuestPods(guest_lab.client, guest_pods_cleanup)
    _, container_id, _ = pods.run(resources=kubelet_resources(guest_lab.client))
    scope = scope_path(spec_of(guest_lab.client, container_id))
    assert cgroup_files(guest_containerd, scope)["memory.max"] == str(64 * MiB)

    update_resources(guest_lab.client, container_id, memory_limit_in_bytes=64 * MiB,
                     memory_swap_limit_in_bytes=64 * MiB, cpu_shares=1024)
    files = cgroup_files(guest_containerd, scope)
    assert (files["memory.max"], files["memory.swap.max"], files["cpu.weight"]) == (
        str(160 * MiB), "0", str(cpu_weight(1024)))


@pytest.mark.parametrize("form", ["bare", "path"])
def test_a_pod_moved_to_another_slice_takes_its_containers_along(
        guest_lab: Lab, guest_containerd: Guest, guest_pods_cleanup: list[str], form: str) -> None:
    """cgroup-follow: PreRunPodSandbox moves the pod from burstable to besteffort; no PreCreateContainer plugin,
    and the container is created under the moved pod's slice all the same."""
    def besteffort(request: hooks.PodSandboxHookRequest, _: Any) -> hooks.PodSandboxHookResponse:
        name = pod_slice("besteffort", request.pod_meta.uid)
        moved = name if form == "bare" else slice_path(name).removeprefix(CGROUP_ROOT)
        return hooks.PodSandboxHookResponse(cgroup_parent=moved)

    _, socket = guest_lab.plugin(ExampleSettings(answers={"PreRunPodSandbox": besteffort}))
    guest_lab.register("10-mover.json", socket, ["PreRunPodSandbox"])
    pod_id, container_id, uid = GuestPods(guest_lab.client, guest_pods_cleanup).run()

    moved = slice_path(pod_slice("besteffort", uid))
    scope = scope_path(spec_of(guest_lab.client, container_id))
    assert scope == f"{moved}/cri-containerd-{container_id}.scope"
    listing = guest_containerd.shell(f"ls {moved}; ls -d {slice_path(pod_slice('burstable', uid))} || true").split()
    assert f"cri-containerd-{container_id}.scope" in listing and f"cri-containerd-{pod_id}.scope" in listing
    assert not any(entry.endswith(pod_slice("burstable", uid)) for entry in listing)


OTHER_UID = "0b7a7c9e-1111-4222-8333-944455556666"


@pytest.mark.parametrize("answer, problem", [
    ("system-x.slice", "outside"),
    (pod_slice("besteffort", OTHER_UID), "another pod"),
    ("/kubepods/besteffort/pod{uid}", "different cgroup drivers"),
    ("kubepods-besteffort.slice:cri-containerd:abc", "containerd's to build"),
    ("kubepods/besteffort", "neither an absolute path nor a systemd slice name"),
])
def test_bad_slice_parents_are_refused_before_the_node_sees_them(
        guest_lab: Lab, guest_containerd: Guest, guest_pods_cleanup: list[str], answer: str, problem: str) -> None:
    def bad(request: hooks.PodSandboxHookRequest, _: Any) -> hooks.PodSandboxHookResponse:
        return hooks.PodSandboxHookResponse(cgroup_parent=answer.format(uid=request.pod_meta.uid))

    _, socket = guest_lab.plugin(ExampleSettings(answers={"PreRunPodSandbox": bad}))
    guest_lab.register("10-bad.json", socket, ["PreRunPodSandbox"], policy="Fail")
    pods_before = set(guest_lab.client.pod_ids())
    slices_before = guest_containerd.shell(f"ls {CGROUP_ROOT}/kubepods.slice/*/")
    with pytest.raises(grpc.RpcError) as raised:
        GuestPods(guest_lab.client, guest_pods_cleanup).run()
    assert "invalid answer" in raised.value.details() and "cgroup_parent" in raised.value.details()
    assert problem in raised.value.details()
    assert set(guest_lab.client.pod_ids()) == pods_before
    assert guest_containerd.shell(f"ls {CGROUP_ROOT}/kubepods.slice/*/") == slices_before


@pytest.fixture
def guest_nri_lab(guest_containerd: Guest, workdir: Path, loop_thread: LoopThread) -> Iterator[NriLab]:
    """The proxy hosting NRI plugins in front of the guest's containerd."""
    with nri_lab(guest_containerd.address, workdir / f"cgnri{next(_serial)}", loop_thread) as lab:
        yield lab


def test_an_nri_plugin_adjustment_lands_in_cgroup_v2_files(
        guest_nri_lab: NriLab, guest_containerd: Guest, guest_pods_cleanup: list[str]) -> None:
    resources = nri.LinuxResources(
        memory=nri.LinuxMemory(limit=nri.OptionalInt64(value=96 * MiB)),
        cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=700), quota=nri.OptionalInt64(value=30000),
                         period=nri.OptionalUInt64(value=100000)),
        unified={"memory.high": str(80 * MiB)})
    adjustment = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=resources))
    guest_nri_lab.attach(NriPlugin(name="v2", index="10", every_event=True,
                             methods={"CreateContainer": adjusting(adjustment)}))
    _, container_id, uid = GuestPods(guest_nri_lab.client, guest_pods_cleanup).run()

    scope = scope_path(spec_of(guest_nri_lab.client, container_id))
    assert scope.startswith(slice_path(pod_slice("burstable", uid)))
    files = cgroup_files(guest_containerd, scope)
    assert (files["memory.max"], files["cpu.weight"], files["cpu.max"]) == (
        str(96 * MiB), str(cpu_weight(700)), "30000 100000")
    assert guest_containerd.read(f"{scope}/memory.high") == str(80 * MiB)
