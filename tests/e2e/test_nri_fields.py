"""The adjustment table (runtimeproxy.nri.table, shown in docs/nri.md) tried for real: an NRI plugin
(rplab.nri_plugin) sets each ContainerAdjustment field, on containerd 1.6 and on dockerd. A field the table
says is carried lands (OCI spec from containerd's verbose status; `docker inspect`, and in the running
container its cgroup files, /proc limits, sysctl and seccomp mode); a field it says is refused fails the
create naming the field. One container per runtime carries every carried field at once; a separate one only
for what cannot run with them (a realtime CPU runtime needs RT time the test's cgroup parent has not).

CDI devices, refused on containerd 1.6 and dockerd 20.10 (no CDI), are carried where the runtime's CDI is on:
tried on the newest containerd and dockerd, each with CDI on and a private spec directory holding one device
whose edit is an environment variable, which the runtime injects into the container."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Collection
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.cridockerd_replay import CriDockerdReplay, ReplayError
from rplab.docker_images import build_docker_archives
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.loop import LoopThread
from rplab.runtimes import newest
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.table import ROWS
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.machine import IMAGE_CACHE
from tests.kits.nri import NriPlugin  # noqa: E402
from test_nri import nri_lab, run_pod, spec_of  # noqa: E402
from test_nri_docker import DockerNriLab, base, lab  # noqa: E402,F401 (base, lab: the fixtures)

KEEP_RUNNING = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
SECCOMP = nri.LinuxSeccomp(default_action="SCMP_ACT_ALLOW", syscalls=[
    nri.LinuxSyscall(names=["swapon"], action="SCMP_ACT_ERRNO", errno_ret=nri.OptionalUInt32(value=1))])
MIB = 1 << 20


def sample(path: str) -> nri.ContainerAdjustment:
    """An adjustment setting the one field `path` (a value each runtime can take)."""
    adjust = nri.ContainerAdjustment()
    linux, resources = adjust.linux, adjust.linux.resources
    setters = {
        "annotations": lambda: adjust.annotations.update({"nri.runtimeproxy.test/field": "yes"}),
        "env": lambda: adjust.env.add(key="NRI_FIELD", value="1"),
        "args": lambda: adjust.args.extend(KEEP_RUNNING),
        "mounts": lambda: adjust.mounts.add(destination="/nri-etc", source="/etc", type="bind",
                                            options=["rbind", "ro"]),
        "linux.devices": lambda: linux.devices.add(path="/dev/fuse", type="c", major=10, minor=229),
        "linux.resources.devices": lambda: resources.devices.add(allow=True, type="c", access="rwm",
                                                                 major=nri.OptionalInt64(value=10),
                                                                 minor=nri.OptionalInt64(value=229)),
        "linux.oom_score_adj": lambda: setattr(linux.oom_score_adj, "value", 500),
        "linux.resources.cpu.shares": lambda: setattr(resources.cpu.shares, "value", 300),
        "linux.resources.cpu.quota": lambda: setattr(resources.cpu.quota, "value", 40000),
        "linux.resources.cpu.period": lambda: setattr(resources.cpu.period, "value", 100000),
        "linux.resources.cpu.cpus": lambda: setattr(resources.cpu, "cpus", "0"),
        "linux.resources.cpu.mems": lambda: setattr(resources.cpu, "mems", "0"),
        "linux.resources.cpu.realtime_runtime": lambda: setattr(resources.cpu.realtime_runtime, "value", 1000),
        "linux.resources.cpu.realtime_period": lambda: setattr(resources.cpu.realtime_period, "value", 1000000),
        "linux.resources.memory.limit": lambda: setattr(resources.memory.limit, "value", 96 * MIB),
        "linux.resources.memory.swap": lambda: setattr(resources.memory.swap, "value", 192 * MIB),
        "linux.resources.memory.reservation": lambda: setattr(resources.memory.reservation, "value", 32 * MIB),
        "linux.resources.memory.swappiness": lambda: setattr(resources.memory.swappiness, "value", 10),
        "linux.resources.memory.disable_oom_killer": lambda: setattr(resources.memory.disable_oom_killer,
                                                                     "value", True),
        "linux.resources.memory.kernel": lambda: setattr(resources.memory.kernel, "value", 64 * MIB),
        "linux.resources.memory.kernel_tcp": lambda: setattr(resources.memory.kernel_tcp, "value", 16 * MIB),
        "linux.resources.memory.use_hierarchy": lambda: setattr(resources.memory.use_hierarchy, "value", True),
        "linux.resources.hugepage_limits": lambda: resources.hugepage_limits.add(page_size="2MB", limit=0),
        "linux.resources.unified": lambda: resources.unified.update({"memory.high": str(80 * MIB)}),
        "linux.resources.blockio_class": lambda: setattr(resources.blockio_class, "value", "slow"),
        "linux.resources.rdt_class": lambda: setattr(resources.rdt_class, "value", "gold"),
        "linux.resources.pids": lambda: setattr(resources.pids, "limit", 77),
        "rlimits": lambda: adjust.rlimits.add(type="RLIMIT_NOFILE", soft=1000, hard=2000),
        "linux.sysctl": lambda: linux.sysctl.update({"kernel.shm_rmid_forced": "1"}),
        "linux.seccomp_policy": lambda: linux.seccomp_policy.CopyFrom(SECCOMP),
        "hooks": lambda: adjust.hooks.prestart.add(path="/bin/true"),
        "CDI_devices": lambda: adjust.CDI_devices.add(name="vendor.com/device=one"),
        "linux.rdt": lambda: setattr(linux.rdt.clos_id, "value", "gold"),
        "linux.cgroups_path": lambda: setattr(linux, "cgroups_path", "/elsewhere"),
        "linux.namespaces": lambda: linux.namespaces.add(type="network", path="/proc/1/ns/net"),
        "linux.io_priority": lambda: setattr(linux.io_priority, "priority", 4),
        "linux.scheduler": lambda: setattr(linux.scheduler, "nice", 5),
        "linux.net_devices": lambda: linux.net_devices["eth9"].SetInParent(),
        "linux.memory_policy": lambda: setattr(linux.memory_policy, "nodes", "0"),
    }
    setters[path]()
    return adjust


def fields(runtime: str, refused: bool) -> list[str]:
    return [path for row in ROWS for path in row.fields if row.refused(runtime) == refused]


def merged(paths: list[str]) -> nri.ContainerAdjustment:
    adjust = nri.ContainerAdjustment()
    for path in paths:
        adjust.MergeFrom(sample(path))
    return adjust


def plugin_by_container(adjustments: dict[str, nri.ContainerAdjustment]) -> NriPlugin:
    """A plugin answering each container's CreateContainer with the adjustment named after it."""
    async def create(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(adjust=adjustments[request.container.name])  # type: ignore[attr-defined]
    return NriPlugin(name="fields", index="10", events=event_mask(nri.CREATE_CONTAINER),
                     methods={"CreateContainer": (nri.CreateContainerRequest, create)})


def container_name(path: str) -> str:
    return "f-" + path.replace(".", "-").replace("_", "-").lower()


# --- containerd 1.6 -----------------------------------------------------------------------------------

# What cannot be created on this node: containerd refuses an RDT class where RDT is not configured (its own
# error, after the proxy carried the class), a device the host lacks is refused by the proxy.
CRI_APART = ("linux.resources.rdt_class",)


def field_plan(runtime: str, apart: Collection[str]) -> tuple[list[str], list[str], dict[str, nri.ContainerAdjustment]]:
    """The fields `runtime` carries (one container "all" sets them together; the devices only where /dev/fuse is
    there to add), those it refuses, and what the plugin answers per container: each refused field and each field
    tried `apart` in a container of its own."""
    carried = [path for path in fields(runtime, refused=False) if path not in apart]
    if not Path("/dev/fuse").exists():
        carried.remove("linux.devices")
        carried.remove("linux.resources.devices")
    refused = fields(runtime, refused=True)
    adjustments = {"all": merged(carried), **{container_name(p): sample(p) for p in refused + list(apart)}}
    return carried, refused, adjustments


def test_each_field_on_containerd_lands_in_the_oci_spec_or_is_refused_naming_it(
        containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread, log_dir: Path,
        cleanup_pods: list[str]) -> None:
    carried, refused, adjustments = field_plan("cri", CRI_APART)
    with nri_lab(containerd.address, workdir / "nrifields", loop_thread) as lab:
        lab.attach(plugin_by_container(adjustments))
        client = lab.client
        pod_id, pod_config = run_pod(client, log_dir, cleanup_pods)
        container_id = client.create_container(pod_id, client.container_config("all"), pod_config)
        spec = spec_of(client, container_id)
        assert "NRI_FIELD=1" in spec["process"]["env"] and spec["process"]["args"] == KEEP_RUNNING
        assert client.container_status(container_id).status.annotations["nri.runtimeproxy.test/field"] == "yes"
        resources = spec["linux"]["resources"]
        assert resources["cpu"] == {"shares": 300, "quota": 40000, "period": 100000, "cpus": "0", "mems": "0"}
        assert (resources["memory"]["limit"], resources["memory"]["swap"]) == (96 * MIB, 192 * MIB)
        if Path("/sys/fs/cgroup/hugetlb").exists():  # else containerd drops them (tolerate_missing_hugetlb)
            assert resources["hugepageLimits"] == [{"pageSize": "2MB", "limit": 0}]
        assert resources["unified"] == {"memory.high": str(80 * MIB)}
        assert spec["process"]["oomScoreAdj"] == 500
        assert {"destination": "/nri-etc", "source": "/etc"}.items() <= \
            next(m for m in spec["mounts"] if m["destination"] == "/nri-etc").items()
        if "linux.devices" in carried:
            assert any(d["path"] == "/dev/fuse" for d in spec["linux"]["devices"])
        assert spec["linux"]["seccomp"]["syscalls"] == [{"names": ["swapon"], "action": "SCMP_ACT_ERRNO",
                                                          "errnoRet": 1}]
        assert not any((lab.proxy.listen_path.parent / "state" / "seccomp").iterdir())  # the file is gone
        for path in CRI_APART:  # carried to containerd, which has no RDT here
            with pytest.raises(grpc.RpcError) as failed:
                client.create_container(pod_id, client.container_config(container_name(path)), pod_config)
            assert "RDT" in str(failed.value.details()), failed.value.details()  # type: ignore[attr-defined]
        for path in refused:
            with pytest.raises(grpc.RpcError) as failed:
                client.create_container(pod_id, client.container_config(container_name(path)), pod_config)
            details = failed.value.details()  # type: ignore[attr-defined]
            assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (path, details)  # type: ignore[attr-defined]
            assert f"NRI plugin 10-fields set {path}" in details, (path, details)


# --- dockerd ------------------------------------------------------------------------------------------

# Created apart, not started: a realtime CPU runtime above 0 needs RT time in the cgroup parent.
DOCKER_APART = ("linux.resources.cpu.realtime_runtime",)


def test_each_field_on_dockerd_lands_in_docker_inspect_and_the_container_or_is_refused_naming_it(
        lab: DockerNriLab) -> None:  # noqa: F811 (lab: the fixture imported above)
    carried, refused, adjustments = field_plan("docker", DOCKER_APART)
    lab.attach(plugin_by_container(adjustments))
    pod = lab.run_pod()
    container_id = lab.create(pod, "all")
    lab.replay.start_container(container_id)
    inspected = lab.inspect(container_id)
    host_config, process = inspected["HostConfig"], Path("/proc", str(inspected["State"]["Pid"]))
    assert {"Name": "nofile", "Soft": 1000, "Hard": 2000} in host_config["Ulimits"]
    assert (host_config["PidsLimit"], host_config["MemoryReservation"], host_config["MemorySwappiness"],
            host_config["OomKillDisable"], host_config["CpuRealtimePeriod"]) == (77, 32 * MIB, 10, True, 1000000)
    assert host_config["Sysctls"] == {"kernel.shm_rmid_forced": "1"}
    (seccomp,) = [option for option in host_config["SecurityOpt"] if option.startswith("seccomp=")]
    assert json.loads(seccomp.removeprefix("seccomp="))["syscalls"][0]["names"] == ["swapon"]
    assert (host_config["CpuShares"], host_config["Memory"], host_config["OomScoreAdj"]) == (300, 96 * MIB, 500)

    def inside(*argv: str) -> str:
        return lab.dockerd.docker("exec", container_id, *argv).stdout.decode().strip()
    assert inside("cat", "/sys/fs/cgroup/pids/pids.max") == "77"
    assert inside("cat", "/sys/fs/cgroup/memory/memory.soft_limit_in_bytes") == str(32 * MIB)
    assert inside("cat", "/sys/fs/cgroup/memory/memory.swappiness") == "10"
    assert "oom_kill_disable 1" in inside("cat", "/sys/fs/cgroup/memory/memory.oom_control")
    assert inside("cat", "/proc/sys/kernel/shm_rmid_forced") == "1"
    limits = (process / "limits").read_text()  # the container's process, seen from the host
    assert any(line.startswith("Max open files") and line.split()[3:5] == ["1000", "2000"]
               for line in limits.splitlines()), limits
    assert "Seccomp:\t2" in (process / "status").read_text()  # a filter

    apart = lab.create(dataclasses.replace(pod, command=()), container_name(DOCKER_APART[0]))
    assert lab.inspect(apart)["HostConfig"]["CpuRealtimeRuntime"] == 1000
    for path in refused:
        with pytest.raises(ReplayError) as failed:
            lab.create(pod, container_name(path))
        assert "answered 500" in str(failed.value) and f"NRI plugin 10-fields set {path}" in str(failed.value), \
            (path, str(failed.value))


# --- CDI devices, where the runtime's CDI is on -------------------------------------------------------

CDI_KIND, CDI_NAME = "runtimeproxy.test/nri", "dev0"
CDI_ENV = "CDI_INJECTED=dev0"


def write_cdi_spec(directory: Path) -> None:
    """One CDI device whose only edit is an environment variable (no host device needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "runtimeproxy-test.json").write_text(json.dumps({
        "cdiVersion": "0.6.0", "kind": CDI_KIND,
        "devices": [{"name": CDI_NAME, "containerEdits": {"env": [CDI_ENV]}}]}))


def cdi_adjustments() -> dict[str, nri.ContainerAdjustment]:
    return {"cdi": nri.ContainerAdjustment(CDI_devices=[nri.CDIDevice(name=f"{CDI_KIND}={CDI_NAME}")]),
            "cdi-unknown": nri.ContainerAdjustment(CDI_devices=[nri.CDIDevice(name=f"{CDI_KIND}=nosuch")])}


def test_cdi_devices_reach_the_newest_containerd_with_its_cdi_on_which_injects_them(
        workdir: Path, loop_thread: LoopThread, log_dir: Path) -> None:
    runtime = newest("containerd")
    with lab_containerd(workdir / "cdictd", IMAGE_CACHE, runtime) as containerd:
        write_cdi_spec(containerd.cdi_spec_dir)
        with nri_lab(containerd.address, workdir / "nricdi", loop_thread) as lab:
            lab.attach(plugin_by_container(cdi_adjustments()))
            pods: list[str] = []
            try:
                pod_id, pod_config = run_pod(lab.client, log_dir, pods)
                container_id = lab.client.create_container(pod_id, lab.client.container_config("cdi"), pod_config)
                assert CDI_ENV in spec_of(lab.client, container_id)["process"]["env"]
                with pytest.raises(grpc.RpcError) as failed:  # containerd's own error: no such device
                    lab.client.create_container(pod_id, lab.client.container_config("cdi-unknown"), pod_config)
                assert "nosuch" in str(failed.value.details()), failed.value.details()  # type: ignore[attr-defined]
            finally:
                lab.client.discard_pods(pods)


def test_cdi_devices_reach_the_newest_dockerd_with_its_cdi_on_which_injects_them(
        workdir: Path, loop_thread: LoopThread) -> None:
    base = workdir / "dkcdi"
    write_cdi_spec(base / "cdi")
    dockerd = DockerdInstance(base / "d", newest("dockerd"),
                              {"features": {"cdi": True}, "cdi-spec-dirs": [str(base / "cdi")]})
    dockerd.start()
    try:
        dockerd.load_images(build_docker_archives(IMAGE_CACHE))
        proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=[
            f"--nri-socket={base / 'nri.sock'}", "--log-level=debug"])
        proxy.start()
        lab = DockerNriLab(dockerd, proxy, loop_thread, CriDockerdReplay(proxy.listen_path))
        try:
            lab.attach(plugin_by_container(cdi_adjustments()))
            pod = lab.run_pod()
            container_id = lab.create(pod, "cdi")
            requests = lab.inspect(container_id)["HostConfig"]["DeviceRequests"]
            assert {"Driver": "cdi", "DeviceIDs": [f"{CDI_KIND}={CDI_NAME}"]}.items() <= requests[0].items()
            lab.replay.start_container(container_id)
            # In the container's process (an exec gets the container's Config.Env, which CDI does not edit).
            pid = lab.inspect(container_id)["State"]["Pid"]
            environ = Path("/proc", str(pid), "environ").read_bytes().split(b"\0")
            assert CDI_ENV.encode() in environ, environ
        finally:
            lab.close()
            assert proxy.stop() == 0, proxy.log_tail()
    finally:
        dockerd.stop()
