"""A Docker create body <-> ContainerEdits (docker.edits): moby's Entrypoint/Cmd merge with the image, bind mounts
of Binds and Mounts, Devices; written back so that what the plugins kept (and what is not a bind mount) stays."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from runtimeproxy.docker.edits import apply_edits, container_edits, process_argv
from runtimeproxy.hooks.edits import BindMount, Device, Rlimit

BODY: dict[str, Any] = {
    "Image": "busybox", "Entrypoint": None, "Cmd": ["-x"],
    "HostConfig": {
        "Binds": ["/srv/data:/data:Z", "/srv/logs:/logs:ro,rslave", "named-volume:/vol"],
        "Mounts": [{"Type": "bind", "Source": "/srv/m", "Target": "/m", "ReadOnly": True,
                    "BindOptions": {"Propagation": "shared"}},
                   {"Type": "tmpfs", "Target": "/scratch"}],
        "Devices": [{"PathOnHost": "/dev/loop7", "PathInContainer": "/dev/xvdb", "CgroupPermissions": "r"}],
    },
}


def test_the_argv_follows_mobys_merge_with_the_image() -> None:
    body = copy.deepcopy(BODY)
    assert process_argv(body, ["/entry"], ["image-cmd"]) == ("/entry", "-x")  # null Entrypoint: the image's
    body["Cmd"] = None
    assert process_argv(body, ["/entry"], ["image-cmd"]) == ("/entry", "image-cmd")
    body["Entrypoint"] = []
    assert process_argv(body, ["/entry"], ["image-cmd"]) == ("image-cmd",)  # empty, not null: no image Entrypoint
    body["Entrypoint"] = "/bin/app"  # a string, as StrSlice reads it
    assert process_argv(body, ["/entry"], ["image-cmd"]) == ("/bin/app",)  # Entrypoint set: no image Cmd


def test_bind_mounts_and_devices_as_dockerd_reads_them_and_no_rdt_class() -> None:
    edits = container_edits(copy.deepcopy(BODY), ())
    assert edits.mounts == (BindMount("/data", "/srv/data"), BindMount("/logs", "/srv/logs", True, "rslave"),
                            BindMount("/m", "/srv/m", True, "rshared"))
    assert edits.devices == (Device("/dev/xvdb", "/dev/loop7", "r"),)
    assert edits.rdt_class is None and "rdt_class" not in edits.carries


def test_written_back_kept_entries_stay_and_new_ones_go_to_binds_or_to_mounts_when_a_path_has_a_colon() -> None:
    body = copy.deepcopy(BODY)
    seen = container_edits(body, ("/entry", "-x"))
    after = replace(seen, args=("/bin/sh", "-c", "true"),
                    mounts=(seen.mounts[0], seen.mounts[2], BindMount("/cache", "/srv/cache", True, "rslave"),
                            BindMount("/odd:name", "/srv/odd")),
                    devices=(*seen.devices, Device("/dev/fuse", "/dev/fuse")))
    apply_edits(body, after, after.changed_kinds(seen))
    assert (body["Entrypoint"], body["Cmd"]) == (["/bin/sh", "-c", "true"], None)
    host_config = body["HostConfig"]
    assert host_config["Binds"] == ["/srv/data:/data:Z", "named-volume:/vol", "/srv/cache:/cache:ro,rslave"]
    assert host_config["Mounts"] == [
        BODY["HostConfig"]["Mounts"][0], {"Type": "tmpfs", "Target": "/scratch"},
        {"Type": "bind", "Source": "/srv/odd", "Target": "/odd:name", "ReadOnly": False,
         "BindOptions": {"Propagation": "rprivate"}}]
    assert host_config["Devices"] == [
        BODY["HostConfig"]["Devices"][0],
        {"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}]


def test_kinds_that_did_not_change_are_not_touched() -> None:
    body = copy.deepcopy(BODY)
    seen = container_edits(body, ())
    apply_edits(body, seen, seen.changed_kinds(seen))
    assert body == BODY


def test_the_linux_settings_read_from_and_written_to_their_host_config_fields() -> None:
    body: dict[str, Any] = {"HostConfig": {"Ulimits": [{"Name": "core", "Soft": 0, "Hard": 0}], "PidsLimit": 0,
                                           "MemorySwappiness": -1, "SecurityOpt": ["seccomp=unconfined", "label=x"]}}
    seen = container_edits(body, ())
    assert seen.rlimits == (Rlimit("RLIMIT_CORE", 0, 0),) and seen.seccomp == "unconfined"
    assert (seen.pids_limit, seen.memory_swappiness) == (None, None)  # dockerd's "not set"
    after = replace(seen, rlimits=(*seen.rlimits, Rlimit("RLIMIT_NOFILE", 10, 20)), sysctls=(("kernel.x", "1"),),
                    pids_limit=5, memory_reservation=1 << 20, memory_swappiness=0, oom_kill_disable=True,
                    cpu_realtime_runtime=900, cpu_realtime_period=1000, seccomp='{"defaultAction":"SCMP_ACT_LOG"}')
    apply_edits(body, after, after.changed_kinds(seen))
    assert body["HostConfig"] == {
        "Ulimits": [{"Name": "core", "Soft": 0, "Hard": 0}, {"Name": "nofile", "Soft": 10, "Hard": 20}],
        "Sysctls": {"kernel.x": "1"}, "PidsLimit": 5, "MemoryReservation": 1 << 20, "MemorySwappiness": 0,
        "OomKillDisable": True, "CpuRealtimeRuntime": 900, "CpuRealtimePeriod": 1000,
        "SecurityOpt": ["label=x", 'seccomp={"defaultAction":"SCMP_ACT_LOG"}']}
    assert container_edits(body, ()) == after


def test_cdi_devices_are_device_requests_of_the_cdi_driver_carried_only_where_dockerds_cdi_is_on() -> None:
    gpu = {"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}
    body: dict[str, Any] = {"HostConfig": {"DeviceRequests": [gpu, {"Driver": "cdi", "DeviceIDs": ["v.example/c=a"]}]}}
    edits = container_edits(body, (), cdi=True)
    assert edits.cdi_devices == ("v.example/c=a",) and "cdi_devices" in edits.carries
    assert "cdi_devices" not in container_edits(body, ()).carries
    apply_edits(body, replace(edits, cdi_devices=("v.example/c=a", "v.example/c=b")), frozenset({"cdi_devices"}))
    assert body["HostConfig"]["DeviceRequests"] == [gpu, {"Driver": "cdi", "DeviceIDs": ["v.example/c=a", "v.example/c=b"]}]
