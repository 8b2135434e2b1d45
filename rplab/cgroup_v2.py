"""The cgroup v2 + systemd node's cgroup layout (rplab.guest): where systemd puts the kubelet's pod slices and a
container's scope, runc's cgroup v1 -> v2 conversion of CPU shares, and a container's v2 files read through the
guest's shell. Owns no process: the callers' guest runs the reads.

With the systemd cgroup driver a container's OCI ``linux.cgroupsPath`` is ``slice:prefix:id``
(``kubepods-burstable-pod<uid>.slice:cri-containerd:<id>``); systemd nests a slice under each of its dash-separated
prefixes, and the container is the scope ``<prefix>-<id>.scope`` in its pod's slice.
"""

from __future__ import annotations

from typing import Protocol

CGROUP_ROOT = "/sys/fs/cgroup"
# A container's files the koordlet scenarios read: CFS quota and period, weight (shares), memory limit, CPUs.
CONTAINER_FILES = ("cpu.max", "cpu.weight", "memory.max", "cpuset.cpus")
MISSING = "-"  # a file the cgroup does not have (a controller not enabled in its parent's subtree_control)


class Shell(Protocol):
    def shell(self, script: str, timeout: float = 60.0, check: bool = True) -> str: ...


def pod_slice(qos: str, uid: str) -> str:
    """The kubelet's systemd-driver parent of a pod: `kubepods-<qos>-pod<uid, '-' as '_'>.slice`."""
    return f"kubepods-{qos}-pod{uid.replace('-', '_')}.slice"


def slice_path(name: str) -> str:
    """Where systemd puts slice `name`: each dash-separated prefix is a parent slice."""
    parts = name.removesuffix(".slice").split("-")
    return "/".join(CGROUP_ROOT if i < 0 else "-".join(parts[: i + 1]) + ".slice" for i in range(-1, len(parts)))


def scope_path(spec: dict) -> str:  # type: ignore[type-arg]
    """The cgroup directory of a container from its OCI spec's systemd cgroupsPath `slice:prefix:id`."""
    parent, prefix, name = spec["linux"]["cgroupsPath"].split(":")
    return f"{slice_path(parent)}/{prefix}-{name}.scope"


def cpu_weight(shares: int) -> int:
    """runc's cgroup v1 shares -> v2 weight conversion (runc 1.1, the guest's)."""
    return 1 + ((shares - 2) * 9999) // 262142


def from_v1(quota: int, period: int, shares: int, memory: int | None) -> dict[str, str]:
    """The cgroup v2 files runc writes for what cgroup v1 would have: ``cpu.max`` from the CFS quota and period
    (a quota of -1: ``max``), ``cpu.weight`` from the shares, ``memory.max`` (None: unlimited, ``max``)."""
    return {"cpu.max": f"{'max' if quota < 0 else quota} {period}", "cpu.weight": str(cpu_weight(shares)),
            "memory.max": "max" if memory is None else str(memory)}


def read_files_script(directory: str, names: tuple[str, ...] = CONTAINER_FILES) -> str:
    """A shell script printing `name=content` for each file of `directory` (MISSING where there is none)."""
    return "; ".join(f"printf '%s=' {name}; cat '{directory}/{name}' 2>/dev/null || echo '{MISSING}'"
                     for name in names)


def parse_files(output: str, names: tuple[str, ...] = CONTAINER_FILES) -> dict[str, str]:
    """read_files_script's output as {name: content}; a file with empty content (an unset cpuset) reads ''."""
    found = {}
    for line in output.splitlines():
        name, equals, value = line.partition("=")
        if equals and name in names:
            found[name] = value.strip()
    return found


def container_files(guest: Shell, directory: str, names: tuple[str, ...] = CONTAINER_FILES) -> dict[str, str]:
    """The cgroup v2 files `names` of the cgroup `directory` in the guest."""
    return parse_files(guest.shell(read_files_script(directory, names)), names)
