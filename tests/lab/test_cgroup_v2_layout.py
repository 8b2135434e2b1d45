"""rplab.cgroup_v2: the systemd driver's cgroup layout, runc's v1 -> v2 conversion, the files' read (no guest)."""

from __future__ import annotations

from rplab.cgroup_v2 import (
    CGROUP_ROOT, MISSING, container_files, cpu_weight, from_v1, parse_files, pod_slice, read_files_script, scope_path,
    slice_path,
)


def test_a_containers_scope_is_under_its_pods_slice_nested_by_systemd() -> None:
    assert pod_slice("besteffort", "a-b") == "kubepods-besteffort-poda_b.slice"
    assert slice_path("kubepods-besteffort-poda_b.slice") == (
        f"{CGROUP_ROOT}/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice")
    spec = {"linux": {"cgroupsPath": "kubepods-besteffort-poda_b.slice:cri-containerd:abc"}}
    assert scope_path(spec) == f"{slice_path('kubepods-besteffort-poda_b.slice')}/cri-containerd-abc.scope"


def test_runc_turns_v1_values_into_v2_files() -> None:
    assert [cpu_weight(shares) for shares in (2, 512, 1024, 1536, 262144)] == [1, 20, 39, 59, 10000]
    assert from_v1(50_000, 100_000, 512, 256 * 1024 * 1024) == {
        "cpu.max": "50000 100000", "cpu.weight": "20", "memory.max": "268435456"}
    assert from_v1(-1, 100_000, 2, None) == {"cpu.max": "max 100000", "cpu.weight": "1", "memory.max": "max"}


class Answering:
    def __init__(self, output: str) -> None:
        self.output = output
        self.scripts: list[str] = []

    def shell(self, script: str, timeout: float = 60.0, check: bool = True) -> str:
        self.scripts.append(script)
        return self.output


def test_a_containers_files_are_read_in_one_script_an_unset_cpuset_empty_a_missing_file_marked() -> None:
    script = read_files_script("/sys/fs/cgroup/x.scope", ("cpu.max", "cpuset.cpus"))
    assert "cat '/sys/fs/cgroup/x.scope/cpu.max'" in script and f"echo '{MISSING}'" in script
    output = "cpu.max=max 100000\ncpu.weight=1\nmemory.max=max\ncpuset.cpus=\n"
    assert parse_files(output) == {"cpu.max": "max 100000", "cpu.weight": "1", "memory.max": "max",
                                   "cpuset.cpus": ""}
    guest = Answering(f"cpu.max=50000 100000\ncpuset.cpus={MISSING}\nnoise\n")
    assert container_files(guest, "/d", ("cpu.max", "cpuset.cpus")) == {"cpu.max": "50000 100000",
                                                                         "cpuset.cpus": MISSING}
    assert guest.scripts == [read_files_script("/d", ("cpu.max", "cpuset.cpus"))]
