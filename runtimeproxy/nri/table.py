"""The table of NRI adjustments: per ContainerAdjustment field, what CRI mode (containerd 1.6) and Docker mode
(dockerd) make of it, or why it is refused. docs/nri.md shows `markdown()`; tests hold the docs to it
(tests/nri/test_table.py), the table to the code's carried fields (nri.adjust with each frontend's
ContainerEdits.carries) and to both runtimes (tests/e2e/test_nri_fields.py tries each field for real).

A row's `fields` are ContainerAdjustment paths; a row with none is about values of a field another row names
(a mount of another type, a removal). A cell starting with "refused" says the field is refused there.
"""

from __future__ import annotations

from dataclasses import dataclass

REFUSED = "refused"
HEADER = ("field", "CRI mode (containerd 1.6)", "Docker mode (dockerd)")


@dataclass(frozen=True)
class Row:
    label: str
    cri: str
    docker: str
    fields: tuple[str, ...] = ()  # () : a row about some values of a field

    def refused(self, runtime: str) -> bool:
        return getattr(self, runtime).startswith(REFUSED)


_NO_CRI_FIELD = "refused: no CRI field (containerd 1.6 takes none from the request)"
ROWS: tuple[Row, ...] = (
    Row("annotations (set, `-key` removes)", "request annotations", "labels `annotation.<key>`",
        ("annotations",)),
    Row("env (set, `-NAME` removes)", "request envs", "`Env`", ("env",)),
    Row("linux.resources.cpu shares/quota/period, cpus/mems; memory limit, swap", "request's Linux resources",
        "`HostConfig` resources",
        ("linux.resources.cpu.shares", "linux.resources.cpu.quota", "linux.resources.cpu.period",
         "linux.resources.cpu.cpus", "linux.resources.cpu.mems", "linux.resources.memory.limit",
         "linux.resources.memory.swap")),
    Row("linux.resources.hugepage_limits, unified", "request's Linux resources",
        "refused: dockerd's API has no hugetlb limits nor cgroup v2 keys", ("linux.resources.hugepage_limits",
                                                                           "linux.resources.unified")),
    Row("linux.oom_score_adj", "request's Linux resources", "`HostConfig.OomScoreAdj`", ("linux.oom_score_adj",)),
    Row("args (the whole argv; a leading `\"\"` takes them over)",
        "`command` = argv, `args` empty (containerd then uses no image Entrypoint/Cmd)",
        "`Entrypoint` = argv, `Cmd` null (moby: an Entrypoint set drops the image's Cmd)", ("args",)),
    Row("mounts: a bind mount (type `bind`, or no type with `bind`/`rbind`)",
        "a CRI `Mount` (`ro` → readonly; `private`/`slave`/`shared`, recursive or not → `PROPAGATION_PRIVATE` / "
        "`HOST_TO_CONTAINER` / `BIDIRECTIONAL`: containerd always binds recursively); one at the same destination "
        "is replaced",
        "a `Binds` entry `src:dst:ro\\|rw,r<propagation>` (a path with `:`: a `Mounts` bind entry); one at the "
        "same destination is replaced", ("mounts",)),
    Row("mounts: another type (tmpfs, proc, …), another option (`nosuid`, `noexec`, …), a relative path",
        "refused: a CRI mount is a bind mount with readonly and propagation only", "refused (same)"),
    Row("mounts: `-/dest` removes",
        "a mount of the request (or of an earlier plugin); one containerd adds itself: refused",
        "a bind mount of `Binds`/`Mounts`; volumes, tmpfs and dockerd's own: refused"),
    Row("linux.devices: a device node",
        "a CRI `Device` (host path = container path, `rwm`); the host must have that node with the same type and "
        "major:minor, and a `file_mode`/`uid`/`gid` the plugin sets must be the host node's (the runtime copies "
        "the host node): else refused", "`HostConfig.Devices` entry (same checks)", ("linux.devices",)),
    Row("linux.devices: `-/path` removes", "a device of the request; one the runtime adds itself: refused",
        "a `HostConfig.Devices` entry; else refused"),
    Row("linux.resources.devices (cgroup rules)",
        "accepted when each rule only allows what a device of the container gets anyway (the runtime writes that "
        "rule itself); else refused: no CRI field", "same", ("linux.resources.devices",)),
    Row("linux.resources.rdt_class",
        "container annotation `io.kubernetes.cri.rdt-class`, which containerd's goresctrl reads before the pod "
        "annotations `rdt.resources.beta.kubernetes.io/container.<name>` and `…/pod` (containerd refuses the "
        "create on a node where RDT is not configured)", "refused: dockerd has no RDT class",
        ("linux.resources.rdt_class",)),
    Row("linux.resources.blockio_class",
        "refused: containerd 1.6 has no blockio classes (1.7 reads `io.kubernetes.cri.blockio-class`)",
        "refused: dockerd has none", ("linux.resources.blockio_class",)),
    Row("rlimits", _NO_CRI_FIELD + ": every container gets the base spec's",
        "`HostConfig.Ulimits` (`RLIMIT_NOFILE` → `nofile`); one of the same type is replaced", ("rlimits",)),
    Row("linux.resources.pids", _NO_CRI_FIELD + "; on cgroup v2 a plugin can set the `unified` key `pids.max`",
        "`HostConfig.PidsLimit`", ("linux.resources.pids",)),
    Row("linux.resources.memory.reservation", _NO_CRI_FIELD + "; on cgroup v2: `unified` `memory.low`",
        "`HostConfig.MemoryReservation`", ("linux.resources.memory.reservation",)),
    Row("linux.resources.memory.swappiness", _NO_CRI_FIELD, "`HostConfig.MemorySwappiness` (0–100)",
        ("linux.resources.memory.swappiness",)),
    Row("linux.resources.memory.disable_oom_killer", _NO_CRI_FIELD,
        "`HostConfig.OomKillDisable` (cgroup v1; dockerd drops it on cgroup v2 with a warning)",
        ("linux.resources.memory.disable_oom_killer",)),
    Row("linux.resources.memory.kernel, kernel_tcp", _NO_CRI_FIELD,
        "refused: dockerd 20.10's `KernelMemory`/`KernelMemoryTCP` are gone from API 1.42 (dockerd 23+), and "
        "runc ≥ 1.0 sets no kernel memory limit", ("linux.resources.memory.kernel",
                                                     "linux.resources.memory.kernel_tcp")),
    Row("linux.resources.memory.use_hierarchy", _NO_CRI_FIELD, "refused: dockerd has no field",
        ("linux.resources.memory.use_hierarchy",)),
    Row("linux.resources.cpu.realtime_runtime, realtime_period", _NO_CRI_FIELD,
        "`HostConfig.CpuRealtimeRuntime`/`CpuRealtimePeriod` (cgroup v1 with RT group scheduling; a runtime "
        "above 0 needs RT time in the parent cgroup, dockerd's `--cpu-rt-runtime`, else the start fails)",
        ("linux.resources.cpu.realtime_runtime", "linux.resources.cpu.realtime_period")),
    Row("linux.sysctl (set, `-name` removes)",
        "refused: containerd 1.6 applies sysctls to the pod's sandbox only (its `PodSandboxConfig`), a "
        "container's request has none", "`HostConfig.Sysctls` (dockerd refuses what the container's namespaces "
        "do not isolate)", ("linux.sysctl",)),
    Row("linux.seccomp_policy",
        "a `Localhost` profile: CRI names a profile, never a policy, so the policy (OCI's JSON) is written to a "
        "file of the proxy's (`<state dir>/seccomp/`, removed once the create returned: containerd reads it "
        "then) and `security_context.seccomp` points at it; refused for a privileged container (containerd "
        "applies no seccomp to one) and with no state directory",
        "`HostConfig.SecurityOpt` `seccomp=<the policy as JSON>`, in place of the kubelet's", (
            "linux.seccomp_policy",)),
    Row("hooks (OCI hooks)", "refused: a CRI request has no field for them", "refused: nor has dockerd's API",
        ("hooks",)),
    Row("CDI_devices", "refused on containerd 1.6 (it reads no CDI devices) and wherever the runtime's CDI is off; "
        "containerd 1.7 with `enable_cdi` and 2.x (CDI always on) get the request's `CDI_devices` and inject them "
        "(the proxy reads which from containerd's verbose `Status`)",
        "refused on dockerd 20.10 (no CDI) and wherever dockerd's CDI is off; dockerd 25+ with CDI on (`GET /info` "
        "lists its CDI spec directories) gets a `HostConfig.DeviceRequests` entry of the driver `cdi`, and "
        "injects them", ("CDI_devices",)),
    Row("linux.rdt (CLOS id, schemata, monitoring)", "refused: no CRI field (an RDT class goes through rdt_class)",
        "refused: no field", ("linux.rdt",)),
    Row("linux.cgroups_path", "refused: the runtime derives it from the pod's cgroup parent", "refused (same)",
        ("linux.cgroups_path",)),
    Row("linux.namespaces", "refused: CRI names namespaces by mode (pod, container, node, target), not by path",
        "refused: dockerd's modes (`container:<id>`, `host`) are not paths", ("linux.namespaces",)),
    Row("linux.io_priority, scheduler, net_devices, memory_policy", "refused: no CRI field",
        "refused: dockerd has no field", ("linux.io_priority", "linux.scheduler", "linux.net_devices",
                                          "linux.memory_policy")),
)


def markdown() -> str:
    """The table as docs/nri.md shows it."""
    lines = ["| " + " | ".join(HEADER) + " |", "|---|---|---|"]
    lines += [f"| {row.label} | {row.cri} | {row.docker} |" for row in ROWS]
    return "\n".join(lines) + "\n"
