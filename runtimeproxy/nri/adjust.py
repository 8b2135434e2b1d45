"""NRI plugins' answers applied to a container as the hook core knows it: what a CRI or Docker request carries.

A ContainerAdjustment (CreateContainer) and a ContainerUpdate's resources (UpdateContainer, or an update of
another container) are folded into the container as the core's model has it (hooks.model.ContainerRecord), which
the chain's value takes (hooks.chain_value) and the frontend writes back into its request.
Applied: annotations and environment (a key "-name" removes,
NRI's removal marker), CPU shares/quota/period, cpuset cpus/mems, memory limit and swap, hugepage limits,
unified (cgroup v2) keys, and at creation the OOM score adjustment. At creation, what the hook model lacks
is folded into hooks.edits.ContainerEdits (nri.edits: args, bind mounts, devices and their cgroup rules, the
RDT class; rlimits, sysctls, the pids limit, memory reservation/swappiness/OOM killer, CPU realtime, the
seccomp policy; CDI devices where the runtime's CDI is on), for the kinds the frontend's request carries
(ContainerEdits.carries). Anything else an answer sets (OCI hooks, a cgroups path, blockio class, kernel memory, namespaces, scheduler, I/O
priority, linux.rdt, ...; nri.table says why for each) is refused: the request the proxy forwards has no
place for it, and dropping it silently would lie to the plugin. `AdjustmentRefused` names the field.

NRI's conflict rule: within one call, every field (each annotation, each variable, each resource, each
hugepage size and unified key, each mount destination, each device path, the args, the RDT class) is owned
by the first plugin that sets or removes it; another plugin touching it fails the call (`AdjustmentConflict`),
as containerd/nri's result collection does (args starting with "" take them over, as there).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from google.protobuf.message import Message

from runtimeproxy.hooks import edits as kinds
from runtimeproxy.hooks.edits import ContainerEdits
from runtimeproxy.hooks.model import ContainerRecord, HugepageLimit, Resources
from runtimeproxy.nri import edits as nri_edits
from runtimeproxy.nri.edits import EditRefused, Stat
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

# Adjustment fields the proxy applies (message paths from ContainerAdjustment / LinuxContainerUpdate).
_RESOURCES = frozenset({
    "linux.resources.cpu.shares", "linux.resources.cpu.quota", "linux.resources.cpu.period",
    "linux.resources.cpu.cpus", "linux.resources.cpu.mems",
    "linux.resources.memory.limit", "linux.resources.memory.swap",
})
# Hook-model resources only some requests carry (ContainerEdits.carries; dockerd has no field for them).
_MODEL_RESOURCES = {kinds.HUGEPAGE_LIMITS: frozenset({"linux.resources.hugepage_limits"}),
                    kinds.UNIFIED: frozenset({"linux.resources.unified"})}
APPLIED_AT_CREATION = _RESOURCES | {"annotations", "env", "linux.oom_score_adj"}
APPLIED_IN_UPDATES = _RESOURCES.union(*_MODEL_RESOURCES.values())
# The adjustment fields of each kind of hooks.edits, applied when the frontend's request carries that kind.
EDIT_FIELDS = {
    kinds.ARGS: frozenset({"args"}),
    kinds.MOUNTS: frozenset({"mounts"}),
    kinds.DEVICES: frozenset({"linux.devices", "linux.resources.devices"}),
    kinds.RDT_CLASS: frozenset({"linux.resources.rdt_class"}),
    kinds.RLIMITS: frozenset({"rlimits"}),
    kinds.SYSCTLS: frozenset({"linux.sysctl"}),
    kinds.PIDS_LIMIT: frozenset({"linux.resources.pids"}),
    kinds.MEMORY_RESERVATION: frozenset({"linux.resources.memory.reservation"}),
    kinds.MEMORY_SWAPPINESS: frozenset({"linux.resources.memory.swappiness"}),
    kinds.OOM_KILL_DISABLE: frozenset({"linux.resources.memory.disable_oom_killer"}),
    kinds.CPU_REALTIME_RUNTIME: frozenset({"linux.resources.cpu.realtime_runtime"}),
    kinds.CPU_REALTIME_PERIOD: frozenset({"linux.resources.cpu.realtime_period"}),
    kinds.SECCOMP: frozenset({"linux.seccomp_policy"}),
    kinds.CDI_DEVICES: frozenset({"CDI_devices"}),
    **_MODEL_RESOURCES,
}
MAX_SWAPPINESS = 100  # the kernel's vm.swappiness range

# Where a refused field is explained (the docs page of NRI, "Adjustments").
_TABLE = "the table of adjustments in docs/nri.md"


def applied_at_creation(edits: ContainerEdits | None) -> frozenset[str]:
    """None: the request's edits were not read; the hook model's own resources are applied as it holds them."""
    carried = edits.carries if edits is not None else kinds.MODEL_KINDS
    return APPLIED_AT_CREATION.union(*(EDIT_FIELDS[kind] for kind in carried))


class AdjustmentError(Exception):
    def __init__(self, plugin: str, field: str, message: str) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.field = field


class AdjustmentRefused(AdjustmentError):
    """The answer sets a field the forwarded request cannot carry."""


class AdjustmentConflict(AdjustmentError):
    """Two plugins set the same field in one call."""


def unsupported_fields(message: Message, applied: frozenset[str], prefix: str = "") -> list[str]:
    """The set fields of `message` (paths) that are not applied."""
    found: list[str] = []
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if path in applied:
            continue
        nested = field.message_type is not None and not field.is_repeated
        if nested and any(name.startswith(path + ".") for name in applied):
            found.extend(unsupported_fields(value, applied, path + "."))
        else:
            found.append(path)
    return found


class Adjustments:
    """One call's answers, plugin after plugin, folded into `container`: a copy of the container as the core's model
    has it (hooks.model.ContainerRecord; its `edits`: what the hook model lacks, None: the frontend carries none)."""

    def __init__(self, container: ContainerRecord, stat_path: Stat = os.stat) -> None:
        self.container = working_copy(container)
        self._stat = stat_path  # host device nodes (a fake in unit tests)
        self._owners: dict[str, str] = {}

    @property
    def edits(self) -> ContainerEdits | None:
        return self.container.edits

    def shadow_copy(self) -> Adjustments:
        """A private fold from the container as it is now, owning nothing (a plugin in shadow's)."""
        return Adjustments(self.container, self._stat)

    def _claim(self, plugin: str, what: str) -> None:
        owner = self._owners.setdefault(what, plugin)
        if owner != plugin:
            raise AdjustmentConflict(plugin, what, f"plugins {owner!r} and {plugin!r} both tried to set {what}")

    def apply_adjustment(self, plugin: str, adjust: nri.ContainerAdjustment, action: str) -> None:
        refused = unsupported_fields(adjust, applied_at_creation(self.edits))
        if refused:
            raise AdjustmentRefused(plugin, refused[0], _refusal(plugin, refused, action))
        if self.container.edits is not None:
            try:
                self.container.edits = self._apply_edits(plugin, adjust, self.container.edits)
            except EditRefused as error:
                raise AdjustmentRefused(plugin, error.field, f"NRI plugin {plugin}: {error} (see {_TABLE})") from None
        for key, value in adjust.annotations.items():
            self._set_or_remove(plugin, "annotation", self.container.annotations, key, value)
        for entry in adjust.env:
            self._set_or_remove(plugin, "environment variable", self.container.env, entry.key, entry.value)
        linux = adjust.linux
        if linux.HasField("oom_score_adj"):
            self._claim(plugin, "oom score adj")
            self._resources().oom_score_adj = linux.oom_score_adj.value
        if linux.HasField("resources"):
            self.apply_resources(plugin, linux.resources)

    def _apply_edits(self, plugin: str, adjust: nri.ContainerAdjustment, edits: ContainerEdits) -> ContainerEdits:
        if adjust.args:
            if adjust.args[0] == "":
                self._owners.pop("args", None)
            self._claim(plugin, "args")
            edits = nri_edits.apply_args(edits, list(adjust.args))
        for mount in adjust.mounts:
            self._claim(plugin, f"mount {nri_edits.marked(mount.destination)[0]!r}")
        edits = nri_edits.apply_mounts(edits, list(adjust.mounts))
        for device in adjust.linux.devices:
            self._claim(plugin, f"device {nri_edits.marked(device.path)[0]!r}")
        edits = nri_edits.apply_devices(edits, list(adjust.linux.devices), self._stat)
        resources = adjust.linux.resources
        if resources.devices:
            nri_edits.check_device_rules(edits, list(resources.devices), self._stat)
        if resources.HasField("rdt_class"):
            self._claim(plugin, "rdt class")
            edits = replace(edits, rdt_class=resources.rdt_class.value)
        for cdi_device in adjust.CDI_devices:
            self._claim(plugin, f"CDI device {cdi_device.name!r}")
        edits = nri_edits.apply_cdi_devices(edits, [cdi_device.name for cdi_device in adjust.CDI_devices])
        return self._apply_linux_settings(plugin, adjust, edits)

    def _apply_linux_settings(self, plugin: str, adjust: nri.ContainerAdjustment,
                              edits: ContainerEdits) -> ContainerEdits:
        """rlimits, sysctls, pids, memory reservation/swappiness/OOM killer, CPU realtime, seccomp."""
        for rlimit in adjust.rlimits:
            self._claim(plugin, f"rlimit {rlimit.type}")
        edits = nri_edits.apply_rlimits(edits, list(adjust.rlimits))
        linux = adjust.linux
        for key in linux.sysctl:
            self._claim(plugin, f"sysctl {nri_edits.marked(key)[0]!r}")
        edits = nri_edits.apply_sysctls(edits, dict(linux.sysctl))
        resources = linux.resources
        settings: dict[str, Any] = {}  # ContainerEdits field -> value (int, bool or str)
        if resources.HasField("pids"):
            settings["pids_limit"] = resources.pids.limit
        for wrapper, present, kind in (
            (resources.memory, "reservation", kinds.MEMORY_RESERVATION),
            (resources.memory, "swappiness", kinds.MEMORY_SWAPPINESS),
            (resources.memory, "disable_oom_killer", kinds.OOM_KILL_DISABLE),
            (resources.cpu, "realtime_runtime", kinds.CPU_REALTIME_RUNTIME),
            (resources.cpu, "realtime_period", kinds.CPU_REALTIME_PERIOD),
        ):
            if wrapper.HasField(present):
                settings[kind] = getattr(wrapper, present).value
        if settings.get(kinds.MEMORY_SWAPPINESS, 0) > MAX_SWAPPINESS:
            raise EditRefused("linux.resources.memory.swappiness", "linux.resources.memory.swappiness: "
                                                                   f"{settings[kinds.MEMORY_SWAPPINESS]} is above "
                                                                   f"{MAX_SWAPPINESS}")
        if linux.HasField("seccomp_policy"):
            settings[kinds.SECCOMP] = nri_edits.seccomp_json(linux.seccomp_policy)
        for kind in settings:
            self._claim(plugin, kind.replace("_", " "))
        return replace(edits, **settings)

    def apply_update(self, plugin: str, update: nri.ContainerUpdate, action: str) -> None:
        refused = unsupported_fields(update.linux, APPLIED_IN_UPDATES, "linux.")
        if refused:
            raise AdjustmentRefused(plugin, refused[0], _refusal(plugin, refused, action))
        self.apply_resources(plugin, update.linux.resources)

    def _set_or_remove(self, plugin: str, kind: str, entries: dict[str, str], key: str, value: str) -> None:
        name, removal = nri_edits.marked(key)
        self._claim(plugin, f"{kind} {name!r}")
        if removal:
            entries.pop(name, None)
        else:
            entries[name] = value

    def _resources(self) -> Resources:
        """The container's resources, made present (a record without them: unset, all zero)."""
        if self.container.resources is None:
            self.container.resources = Resources()
        return self.container.resources

    def apply_resources(self, plugin: str, resources: nri.LinuxResources) -> None:
        cpu, memory = resources.cpu, resources.memory
        settings: dict[str, Any] = {}  # Resources field -> value
        for name, present, value, field in (
            ("cpu shares", cpu.HasField("shares"), cpu.shares.value, "cpu_shares"),
            ("cpu quota", cpu.HasField("quota"), cpu.quota.value, "cpu_quota"),
            ("cpu period", cpu.HasField("period"), cpu.period.value, "cpu_period"),
            ("memory limit", memory.HasField("limit"), memory.limit.value, "memory_limit_in_bytes"),
            ("memory swap limit", memory.HasField("swap"), memory.swap.value, "memory_swap_limit_in_bytes"),
        ):
            if present:
                self._claim(plugin, name)
                settings[field] = value
        if cpu.cpus:
            self._claim(plugin, "cpuset cpus")
            settings["cpuset_cpus"] = cpu.cpus
        if cpu.mems:
            self._claim(plugin, "cpuset mems")
            settings["cpuset_mems"] = cpu.mems
        if not (settings or resources.hugepage_limits or resources.unified):
            return  # a record without resources keeps none
        target = self._resources()
        for field, value in settings.items():
            setattr(target, field, value)
        if resources.hugepage_limits:
            pages = {limit.page_size: limit.limit for limit in target.hugepage_limits}
            for limit in resources.hugepage_limits:
                self._claim(plugin, f"hugepage limit {limit.page_size!r}")
                pages[limit.page_size] = limit.limit
            target.hugepage_limits = tuple(HugepageLimit(size, limit) for size, limit in pages.items())
        for key, setting in resources.unified.items():
            self._claim(plugin, f"unified resource {key!r}")
            target.unified[key] = setting


def working_copy(container: ContainerRecord) -> ContainerRecord:
    """A record whose maps and resources a fold may change in place (edits are replaced whole, never changed)."""
    resources = container.resources
    return replace(container, annotations=dict(container.annotations), env=dict(container.env),
                   resources=replace(resources, unified=dict(resources.unified)) if resources is not None else None)


def _refusal(plugin: str, fields: list[str], action: str) -> str:
    return (f"NRI plugin {plugin} set {', '.join(fields)}, which {action} through the proxy cannot carry "
            f"(see {_TABLE})")
