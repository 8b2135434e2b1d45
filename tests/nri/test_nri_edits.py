"""NRI's args, mounts, devices and RDT class folded into the hook core's ContainerEdits (nri.adjust + nri.edits):
what is applied and how, what is refused naming the field, NRI's conflict rule, and the plugin's view
(nri.convert). Host device nodes come from a fake stat."""

from __future__ import annotations

import os
from dataclasses import replace
import stat

import pytest

from runtimeproxy.hooks.edits import ALL_KINDS, LINUX_KINDS, REQUEST_KINDS, BindMount, ContainerEdits, Device, Rlimit
from runtimeproxy.hooks.model import ContainerRecord
from runtimeproxy.nri import convert
from runtimeproxy.nri.adjust import AdjustmentConflict, AdjustmentRefused, Adjustments
from runtimeproxy.nri.edits import device_message
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

ACTION = "a CreateContainer"
DOCKER_KINDS = frozenset({"args", "mounts", "devices"})


def node(kind: int, major: int, minor: int, mode: int = 0o666, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((kind | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0), {"st_rdev": os.makedev(major, minor)})


HOST = {"/dev/fuse": node(stat.S_IFCHR, 10, 229), "/dev/loop7": node(stat.S_IFBLK, 7, 7, 0o660, 0, 6),
        "/dev/null": node(stat.S_IFCHR, 1, 3), "/etc/passwd": node(stat.S_IFREG, 0, 0, 0o644)}


def host_stat(path: str) -> os.stat_result:
    if path not in HOST:
        raise FileNotFoundError(2, "No such file or directory", path)
    return HOST[path]


REQUEST_EDITS = ContainerEdits(
    args=("/bin/app", "--serve"),
    mounts=(BindMount("/data", "/srv/data"), BindMount("/etc/hosts", "/var/lib/kubelet/hosts", True)),
    devices=(Device("/dev/null", "/dev/null", "rw"),), carries=ALL_KINDS)


def adjustments(edits: ContainerEdits | None = REQUEST_EDITS) -> Adjustments:
    return Adjustments(ContainerRecord("pod-1", edits=edits), host_stat)


def mount(destination: str, source: str = "/srv/x", type_: str = "bind", *options: str) -> nri.Mount:
    return nri.Mount(destination=destination, source=source, type=type_, options=list(options))


def device(path: str, kind: str = "c", major: int = 10, minor: int = 229, **optional: int) -> nri.LinuxDevice:
    message = nri.LinuxDevice(path=path, type=kind, major=major, minor=minor)
    for name, value in optional.items():
        getattr(message, name).value = value
    return message


def adjust(**fields: object) -> nri.ContainerAdjustment:
    linux = {key: fields.pop(key) for key in ("devices", "resources") if key in fields}
    return nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(**linux), **fields)  # type: ignore[arg-type]


def edits_after(*answers: tuple[str, nri.ContainerAdjustment], edits: ContainerEdits | None = REQUEST_EDITS
                ) -> ContainerEdits:
    folded = adjustments(edits)
    for plugin, answer in answers:
        folded.apply_adjustment(plugin, answer, ACTION)
    assert folded.edits is not None
    return folded.edits


def refused(answer: nri.ContainerAdjustment, edits: ContainerEdits | None = REQUEST_EDITS) -> AdjustmentRefused:
    with pytest.raises(AdjustmentRefused) as failure:
        adjustments(edits).apply_adjustment("10-p", answer, ACTION)
    return failure.value


# --- args ---------------------------------------------------------------------------------------------


def test_args_replace_the_whole_argv() -> None:
    assert edits_after(("10-p", adjust(args=["/bin/sh", "-c", "true"]))).args == ("/bin/sh", "-c", "true")


def test_a_second_plugin_setting_args_conflicts_unless_it_takes_them_over_with_a_leading_empty_string() -> None:
    with pytest.raises(AdjustmentConflict, match="plugins '10-a' and '20-b' both tried to set args"):
        edits_after(("10-a", adjust(args=["/a"])), ("20-b", adjust(args=["/b"])))
    assert edits_after(("10-a", adjust(args=["/a"])), ("20-b", adjust(args=["", "/b"]))).args == ("/b",)


# --- mounts -------------------------------------------------------------------------------------------


def test_a_bind_mount_is_added_with_its_readonly_and_recursive_propagation() -> None:
    after = edits_after(("10-p", adjust(mounts=[mount("/cache", "/srv/cache", "bind", "bind", "ro", "slave"),
                                                mount("/logs", "/srv/logs", "", "rbind", "rshared")])))
    assert after.mounts[2:] == (BindMount("/cache", "/srv/cache", True, "rslave"),
                                BindMount("/logs", "/srv/logs", False, "rshared"))


def test_a_mount_replaces_the_one_at_its_destination_and_removal_drops_one_the_request_carries() -> None:
    after = edits_after(("10-p", adjust(mounts=[mount("/data", "/srv/other"), mount("-/etc/hosts")])))
    assert after.mounts == (BindMount("/data", "/srv/other"),)


@pytest.mark.parametrize(("answer", "says"), [
    (mount("/tmp", "tmpfs", "tmpfs", "nosuid"), "has type 'tmpfs': a CRI or Docker create request carries only bind"),
    (mount("/x", "/srv/x", "", "ro"), "has type '(none)'"),
    (mount("/x", "/srv/x", "bind", "rbind", "nosuid"), "has option 'nosuid'"),
    (mount("/x", "relative", "bind", "rbind"), "must be absolute paths"),
    (mount("-/etc/hostname"), "the request has no mount at /etc/hostname; a mount the runtime adds itself"),
])
def test_what_a_request_mount_cannot_say_is_refused_naming_the_field(answer: nri.Mount, says: str) -> None:
    failure = refused(adjust(mounts=[answer]))
    assert failure.field == "mounts" and failure.plugin == "10-p"
    assert says in str(failure) and "NRI plugin 10-p" in str(failure)


def test_two_plugins_on_one_mount_destination_conflict() -> None:
    with pytest.raises(AdjustmentConflict, match="both tried to set mount '/data'"):
        edits_after(("10-a", adjust(mounts=[mount("/data")])), ("20-b", adjust(mounts=[mount("-/data")])))


# --- devices ------------------------------------------------------------------------------------------


def test_a_host_device_node_is_added_at_its_path_and_one_the_request_carries_can_be_removed() -> None:
    after = edits_after(("10-p", adjust(devices=[device("/dev/fuse", file_mode=0o666, uid=0),
                                                 device("-/dev/null")])))
    assert after.devices == (Device("/dev/fuse", "/dev/fuse", "rwm"),)


@pytest.mark.parametrize(("answer", "says"), [
    (device("/dev/nope"), "no device node on the host"),
    (device("/etc/passwd"), "is not a device node"),
    (device("/dev/fuse", "b"), "the plugin asks for b 10:229, the host node is c 10:229"),
    (device("/dev/fuse", "c", 10, 200), "the host node is c 10:229"),
    (device("/dev/loop7", "b", 7, 7, file_mode=0o666), "file_mode 0o666 differs from the host node's (0o660)"),
    (device("/dev/loop7", "b", 7, 7, gid=0), "gid 0 differs from the host node's (6)"),
    (device("-/dev/kmsg"), "the request has no device at /dev/kmsg"),
])
def test_a_device_the_runtime_would_not_create_as_asked_is_refused(answer: nri.LinuxDevice, says: str) -> None:
    failure = refused(adjust(devices=[answer]))
    assert failure.field == "linux.devices" and says in str(failure)


def test_device_cgroup_rules_are_accepted_only_for_what_a_device_of_the_container_gets() -> None:
    allow_fuse = nri.LinuxDeviceCgroup(allow=True, type="c", major=nri.OptionalInt64(value=10),
                                       minor=nri.OptionalInt64(value=229), access="rw")
    resources = nri.LinuxResources(devices=[allow_fuse])
    assert edits_after(("10-p", adjust(devices=[device("/dev/fuse")], resources=resources))).devices[-1].path == \
        "/dev/fuse"
    failure = refused(adjust(resources=resources))  # no such device in the container
    assert failure.field == "linux.resources.devices" and "allow c 10:229 rw" in str(failure)
    null_rwm = nri.LinuxDeviceCgroup(allow=True, type="c", major=nri.OptionalInt64(value=1),
                                     minor=nri.OptionalInt64(value=3), access="rwm")
    assert "allow c 1:3 rwm" in str(refused(adjust(resources=nri.LinuxResources(devices=[null_rwm]))))  # only rw
    everything = nri.LinuxDeviceCgroup(allow=True, access="rwm")
    assert "allow a *:* rwm" in str(refused(adjust(devices=[device("/dev/fuse")],
                                                   resources=nri.LinuxResources(devices=[everything]))))


# --- RDT class, and kinds a frontend does not carry ---------------------------------------------------


def test_the_rdt_class_is_set_once() -> None:
    gold = adjust(resources=nri.LinuxResources(rdt_class=nri.OptionalString(value="gold")))
    assert edits_after(("10-p", gold)).rdt_class == "gold"
    with pytest.raises(AdjustmentConflict, match="rdt class"):
        edits_after(("10-a", gold), ("20-b", gold))


@pytest.mark.parametrize(("answer", "edits", "field"), [
    (adjust(resources=nri.LinuxResources(rdt_class=nri.OptionalString(value="gold"))),
     ContainerEdits(carries=DOCKER_KINDS), "linux.resources.rdt_class"),  # Docker mode
    (adjust(resources=nri.LinuxResources(blockio_class=nri.OptionalString(value="slow"))), REQUEST_EDITS,
     "linux.resources.blockio_class"),  # containerd 1.6 has no blockio classes
    (adjust(args=["/bin/true"]), None, "args"),  # a frontend that carries no edits
    (adjust(mounts=[mount("/x")]), ContainerEdits(), "mounts"),
    (adjust(devices=[device("/dev/fuse")]), None, "linux.devices"),
    (nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(rdt=nri.LinuxRdt())), REQUEST_EDITS, "linux.rdt"),
])
def test_a_kind_the_frontends_request_does_not_carry_is_refused(
        answer: nri.ContainerAdjustment, edits: ContainerEdits | None, field: str) -> None:
    failure = refused(answer, edits)
    assert failure.field == field and f"NRI plugin 10-p set {field}" in str(failure)


# --- the plugin's view --------------------------------------------------------------------------------


def test_the_container_shows_argv_bind_mounts_host_devices_and_the_rdt_class() -> None:
    message = convert.container("", ContainerRecord("pod-1", edits=ContainerEdits(
        ("/bin/app",), (BindMount("/data", "/srv", True, "rslave"),), (), "gold")))
    assert list(message.args) == ["/bin/app"] and message.linux.resources.rdt_class.value == "gold"
    (shown,) = message.mounts
    assert (shown.destination, shown.type, shown.source, list(shown.options)) == \
        ("/data", "bind", "/srv", ["rbind", "rslave", "ro"])
    loop = device_message(Device("/dev/xvdb", "/dev/loop7"), host_stat)
    assert (loop.path, loop.type, loop.major, loop.minor, loop.file_mode.value, loop.gid.value) == \
        ("/dev/xvdb", "b", 7, 7, 0o660, 6)
    assert device_message(Device("/dev/gone", "/dev/gone"), host_stat) == nri.LinuxDevice(path="/dev/gone")


def test_removals_come_before_additions_so_remove_and_add_replaces_even_what_the_request_lacks() -> None:
    after = edits_after(("10-p", adjust(mounts=[mount("/data", "/srv/new"), mount("-/data"), mount("/opt", "/srv/o"),
                                                mount("-/opt")],
                                        devices=[device("/dev/fuse"), device("-/dev/fuse")])))
    assert after.mounts == (BindMount("/etc/hosts", "/var/lib/kubelet/hosts", True), BindMount("/data", "/srv/new"),
                            BindMount("/opt", "/srv/o"))  # order is free: the runtimes sort mounts by depth
    assert after.devices[-1] == Device("/dev/fuse", "/dev/fuse")


# --- the Linux settings (Docker mode carries them, CRI mode refuses them) --------------------------------


def linux_settings() -> nri.ContainerAdjustment:
    answer = nri.ContainerAdjustment(rlimits=[nri.POSIXRlimit(type="RLIMIT_NOFILE", soft=10, hard=20)])
    linux = answer.linux
    linux.sysctl.update({"kernel.shm_rmid_forced": "1"})
    linux.resources.pids.limit = 7
    linux.resources.memory.reservation.value = 1 << 20
    linux.resources.memory.swappiness.value = 5
    linux.resources.cpu.realtime_period.value = 1000
    linux.seccomp_policy.CopyFrom(nri.LinuxSeccomp(default_action="SCMP_ACT_ALLOW", syscalls=[
        nri.LinuxSyscall(names=["swapon"], action="SCMP_ACT_ERRNO", errno_ret=nri.OptionalUInt32(value=1))]))
    return answer


def test_the_linux_settings_are_folded_where_the_request_carries_them_and_shown_back() -> None:
    edits = edits_after(("10-p", linux_settings()), edits=ContainerEdits(carries=LINUX_KINDS))
    assert edits.rlimits == (Rlimit("RLIMIT_NOFILE", 10, 20),) and edits.sysctls == (("kernel.shm_rmid_forced", "1"),)
    assert (edits.pids_limit, edits.memory_reservation, edits.memory_swappiness, edits.cpu_realtime_period) == \
        (7, 1 << 20, 5, 1000)
    assert edits.seccomp == ('{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["swapon"],'
                             '"action":"SCMP_ACT_ERRNO","errnoRet":1}]}')
    shown = convert.container("", ContainerRecord("pod-1", edits=edits))
    assert shown.linux.seccomp_policy == linux_settings().linux.seccomp_policy
    assert list(shown.rlimits) == list(linux_settings().rlimits) and shown.linux.resources.pids.limit == 7


def test_the_linux_settings_are_refused_in_cri_mode_and_checked_and_owned_in_docker_mode() -> None:
    cri = ContainerEdits(carries=REQUEST_KINDS)
    assert "set linux.resources.memory.reservation" in str(refused(linux_settings(), cri))
    docker = ContainerEdits(carries=LINUX_KINDS)
    bad = nri.ContainerAdjustment(rlimits=[nri.POSIXRlimit(type="RLIMIT_NOFILE", soft=30, hard=20)])
    assert "soft 30 above hard 20" in str(refused(bad, docker))
    bad.rlimits[0].type = "NOFILE"
    assert refused(bad, docker).field == "rlimits"
    folded = adjustments(docker)
    folded.apply_adjustment("10-a", linux_settings(), ACTION)
    with pytest.raises(AdjustmentConflict, match="both tried to set sysctl 'kernel.shm_rmid_forced'"):
        folded.apply_adjustment("20-b", nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(
            sysctl={"-kernel.shm_rmid_forced": ""})), ACTION)


# --- CDI devices ------------------------------------------------------------------------------------------

CDI_GPU, CDI_NIC = "vendor.example/gpu=0", "vendor.example/nic=eth1"


def cdi(*names: str) -> nri.ContainerAdjustment:
    return nri.ContainerAdjustment(CDI_devices=[nri.CDIDevice(name=name) for name in names])


def test_cdi_devices_are_added_once_in_order_after_the_requests_own() -> None:
    edits = edits_after(("10-a", cdi(CDI_GPU, CDI_GPU)), ("20-b", cdi(CDI_NIC)),
                        edits=replace(REQUEST_EDITS, cdi_devices=("vendor.example/fpga=x",)))
    assert edits.cdi_devices == ("vendor.example/fpga=x", CDI_GPU, CDI_NIC)


def test_two_plugins_adding_one_cdi_device_conflict() -> None:
    folded = adjustments()
    folded.apply_adjustment("10-a", cdi(CDI_GPU), ACTION)
    with pytest.raises(AdjustmentConflict, match="CDI device"):
        folded.apply_adjustment("20-b", cdi(CDI_GPU), ACTION)


@pytest.mark.parametrize("name", ["gpu0", "vendor.example=gpu0", "vendor.example/gpu", "/gpu=0", "v/c=", "v/c=a b"])
def test_a_cdi_name_that_is_not_fully_qualified_is_refused(name: str) -> None:
    assert "not a fully qualified CDI device name" in str(refused(cdi(name)))


def test_cdi_devices_are_refused_where_the_runtimes_cdi_is_off() -> None:
    failure = refused(cdi(CDI_GPU), replace(REQUEST_EDITS, carries=ALL_KINDS - {"cdi_devices"}))
    assert failure.field == "CDI_devices"
