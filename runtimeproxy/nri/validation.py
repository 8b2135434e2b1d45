"""ValidateContainerAdjustment as containerd/nri v0.12.5 delivers it (adaptation.go validateContainerAdjustment,
result.go's owners): after every adjusting plugin of CreateContainer, each validator gets the pod, the container as
it was before the plugins adjusted it, the whole adjustment and updates as containerd/nri collects them, their
owners (field -> plugin, "-plugin" for a removal's marker, hooks accumulated "a,b") and every plugin that took part.

`Collected` replays each plugin's raw answer in order, as result.go's collection builds its reply and owners (the
proxy's own folding, nri.adjust, decides what is applied and refused; this is only what a validator is shown).
A rejection, an error or a timeout of any validator fails the CreateContainer whatever its failure policy, as in
containerd/nri (a timeout detaches it unless its policy keeps it connected).
"""

from __future__ import annotations

from typing import Any

from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

F = nri.Field


def _marked(key: str) -> tuple[str, bool]:
    return (key[1:], True) if key.startswith("-") else (key, False)


class Collected:
    """One CreateContainer's adjustment, updates and owners, as containerd/nri's result collects them."""

    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        self.adjust = nri.ContainerAdjustment()
        # result.go starts from empty nested messages: a validator reads adjust.hooks, adjust.linux... as set.
        self.adjust.hooks.SetInParent()
        self.adjust.linux.resources.memory.SetInParent()
        self.adjust.linux.resources.cpu.SetInParent()
        self.updates: list[nri.ContainerUpdate] = []
        self.owners = nri.OwningPlugins()
        self.plugins: list[nri.PluginInstance] = []

    # -- owners (api/owners.go) --------------------------------------------------------------------------

    def _fields(self, container_id: str | None = None) -> nri.FieldOwners:
        return self.owners.owners[self.container_id if container_id is None else container_id]

    def claim(self, field: int, plugin: str, key: str | None = None, container_id: str | None = None) -> None:
        fields = self._fields(container_id)
        if key is None:
            fields.simple[field] = plugin
        else:
            fields.compound[field].owners[key] = plugin

    def clear(self, field: int, plugin: str, key: str | None = None) -> None:
        self.claim(field, "-" + plugin, key)

    # -- answers -----------------------------------------------------------------------------------------

    def took_part(self, name: str, index: str) -> None:
        self.plugins.append(nri.PluginInstance(name=name, index=index))

    def add(self, plugin: str, adjust: nri.ContainerAdjustment, updates: list[nri.ContainerUpdate]) -> None:
        """One plugin's CreateContainer answer, after the plugins before it (result.go's adjust and update)."""
        self._keyed(plugin, F.Annotations, dict(adjust.annotations), self.adjust.annotations)
        self._mounts(plugin, list(adjust.mounts))
        self._env(plugin, list(adjust.env))
        if adjust.args:
            args = list(adjust.args)
            if args[0] == "":
                self.clear(F.Args, plugin)
                args = args[1:]
            self.claim(F.Args, plugin)
            self.adjust.args[:] = args
        self._hooks(plugin, adjust.hooks)
        linux, reply = adjust.linux, self.adjust.linux
        self._devices(plugin, list(linux.devices))
        self._resources(plugin, linux.resources, reply.resources, self.container_id)
        for name, field in (("cgroups_path", F.CgroupsPath),):
            if getattr(linux, name):
                self.claim(field, plugin)
                setattr(reply, name, getattr(linux, name))
        for name, field in (("oom_score_adj", F.OomScoreAdj), ("io_priority", F.IoPriority),
                            ("seccomp_policy", F.SeccompPolicy), ("scheduler", F.LinuxSched),
                            ("memory_policy", F.MemoryPolicy)):
            if linux.HasField(name):
                self.claim(field, plugin)
                getattr(reply, name).CopyFrom(getattr(linux, name))
        for namespace in linux.namespaces:
            self.claim(F.Namespace, plugin, _marked(namespace.type)[0])
            reply.namespaces.append(namespace)
        self._keyed(plugin, F.Sysctl, dict(linux.sysctl), reply.sysctl)
        self._net_devices(plugin, linux)
        if linux.HasField("rdt"):
            self._rdt(plugin, linux.rdt)
        for rlimit in adjust.rlimits:
            self.claim(F.Rlimits, plugin, rlimit.type)
            self.adjust.rlimits.append(rlimit)
        for device in adjust.CDI_devices:
            self.claim(F.CdiDevices, plugin, device.name)
            self.adjust.CDI_devices.append(device)
        for update in updates:
            self._update(plugin, update)

    def _keyed(self, plugin: str, field: int, entries: dict[str, str], reply: object) -> None:
        """Annotations and sysctls: "-key" removes (a removal alone claims nothing, as result.go)."""
        target: dict[str, str] = reply  # type: ignore[assignment]  # a protobuf map
        removed = {_marked(key)[0] for key in entries if _marked(key)[1]}
        for key, value in entries.items():
            if _marked(key)[1]:
                continue
            if key in removed:
                self.clear(field, plugin, key)
                target["-" + key] = ""
                removed.discard(key)
            self.claim(field, plugin, key)
            target[key] = value
        for key in removed:
            target["-" + key] = ""

    def _mounts(self, plugin: str, mounts: list[nri.Mount]) -> None:
        removed = {_marked(m.destination)[0]: m for m in mounts if _marked(m.destination)[1]}
        added = [m for m in mounts if not _marked(m.destination)[1]]
        self._drop(F.Mounts, plugin, self.adjust.mounts, set(removed), "destination")
        for mount in added:
            self.claim(F.Mounts, plugin, mount.destination)
            self.adjust.mounts.append(mount)
        modified = {m.destination for m in added}
        self.adjust.mounts.extend(m for key, m in removed.items() if key not in modified)

    def _drop(self, field: int, plugin: str, reply: Any, removed: set[str], key: str) -> None:
        """Entries earlier plugins added that this one removes: out of the reply, their owner marked cleared."""
        kept = []
        for entry in reply:
            if getattr(entry, key) in removed:
                self.clear(field, plugin, getattr(entry, key))
            else:
                kept.append(entry)
        del reply[:]
        reply.extend(kept)

    def _env(self, plugin: str, env: list[nri.KeyValue]) -> None:
        removed = {_marked(e.key)[0] for e in env if _marked(e.key)[1]}
        self._drop(F.Env, plugin, self.adjust.env, removed, "key")
        for entry in env:
            if not _marked(entry.key)[1]:
                self.claim(F.Env, plugin, entry.key)
                self.adjust.env.append(entry)

    def _hooks(self, plugin: str, hooks: nri.Hooks) -> None:
        claimed = False
        for name in ("prestart", "poststart", "poststop", "create_runtime", "create_container", "start_container"):
            added = getattr(hooks, name)
            if added:
                getattr(self.adjust.hooks, name).extend(added)
                claimed = True
        if claimed:  # hooks accumulate their owners: "10-a,20-b"
            fields = self._fields()
            old = fields.simple.get(F.OciHooks)
            fields.simple[F.OciHooks] = f"{old},{plugin}" if old else plugin

    def _devices(self, plugin: str, devices: list[nri.LinuxDevice]) -> None:
        removed = {_marked(d.path)[0] for d in devices if _marked(d.path)[1]}
        reply = self.adjust.linux.devices
        self._drop(F.Devices, plugin, reply, removed, "path")
        for device in devices:
            if not _marked(device.path)[1]:
                self.claim(F.Devices, plugin, device.path)
                reply.append(device)

    def _resources(self, plugin: str, resources: nri.LinuxResources, reply: nri.LinuxResources,
                   container_id: str) -> None:
        def claim(field: int, key: str | None = None) -> None:
            self.claim(field, plugin, key, container_id)

        for group, fields in (
            ("memory", (("limit", F.MemLimit), ("reservation", F.MemReservation), ("swap", F.MemSwapLimit),
                        ("kernel", F.MemKernelLimit), ("kernel_tcp", F.MemTCPLimit),
                        ("swappiness", F.MemSwappiness), ("disable_oom_killer", F.MemDisableOomKiller),
                        ("use_hierarchy", F.MemUseHierarchy))),
            ("cpu", (("shares", F.CPUShares), ("quota", F.CPUQuota), ("period", F.CPUPeriod),
                     ("realtime_runtime", F.CPURealtimeRuntime), ("realtime_period", F.CPURealtimePeriod))),
        ):
            source, target = getattr(resources, group), getattr(reply, group)
            for name, field in fields:
                if source.HasField(name):
                    claim(field)
                    getattr(target, name).CopyFrom(getattr(source, name))
        for name, field in (("cpus", F.CPUSetCPUs), ("mems", F.CPUSetMems)):
            if getattr(resources.cpu, name):
                claim(field)
                setattr(reply.cpu, name, getattr(resources.cpu, name))
        for limit in resources.hugepage_limits:
            claim(F.HugepageLimits, limit.page_size)
            reply.hugepage_limits.append(limit)
        reply.devices.extend(resources.devices)
        for key, value in resources.unified.items():
            claim(F.CgroupsUnified, key)
            reply.unified[key] = value
        for name, field in (("blockio_class", F.BlockioClass), ("rdt_class", F.RdtClass), ("pids", F.PidsLimit)):
            if resources.HasField(name):
                claim(field)
                getattr(reply, name).CopyFrom(getattr(resources, name))

    def _net_devices(self, plugin: str, linux: nri.LinuxContainerAdjustment) -> None:
        reply = self.adjust.linux.net_devices
        removed = {_marked(key)[0] for key in linux.net_devices if _marked(key)[1]}
        for key, device in linux.net_devices.items():
            if _marked(key)[1]:
                continue
            if key in removed:
                self.clear(F.LinuxNetDevices, plugin, key)
                reply["-" + key].Clear()
                removed.discard(key)
            self.claim(F.LinuxNetDevices, plugin, key)
            reply[key].CopyFrom(device)
        for key in removed:
            reply["-" + key].Clear()

    def _rdt(self, plugin: str, rdt: nri.LinuxRdt) -> None:
        reply = self.adjust.linux.rdt
        if rdt.remove:
            for field in (F.RdtClosID, F.RdtSchemata, F.RdtEnableMonitoring):
                self.clear(field, plugin)
            reply.Clear()
            reply.remove = True
        for name, field in (("clos_id", F.RdtClosID), ("schemata", F.RdtSchemata),
                            ("enable_monitoring", F.RdtEnableMonitoring)):
            if rdt.HasField(name):
                self.claim(field, plugin)
                getattr(reply, name).CopyFrom(getattr(rdt, name))
                reply.remove = False

    def _update(self, plugin: str, update: nri.ContainerUpdate) -> None:
        """An update of another container, merged per container as result.go's getContainerUpdate does."""
        merged = next((u for u in self.updates if u.container_id == update.container_id), None)
        if merged is None:
            merged = nri.ContainerUpdate(container_id=update.container_id, ignore_failure=update.ignore_failure)
            self.updates.append(merged)
        else:
            merged.ignore_failure = merged.ignore_failure and update.ignore_failure
        if update.linux.HasField("resources"):
            self._resources(plugin, update.linux.resources, merged.linux.resources, update.container_id)

    def request(self, pod: nri.PodSandbox, container: nri.Container) -> nri.ValidateContainerAdjustmentRequest:
        """What every validator is sent (api/validate.go: AddPlugin, AddResponse, AddOwners)."""
        return nri.ValidateContainerAdjustmentRequest(pod=pod, container=container, adjust=self.adjust,
                                                      update=self.updates, owners=self.owners,
                                                      plugins=self.plugins)


def rejection(plugin_id: str, answer: nri.ValidateContainerAdjustmentResponse) -> str | None:
    """A validator's answer as containerd/nri words a rejection (ValidationResult), None when it accepts."""
    if not answer.reject:
        return None
    reason = answer.reason or "unknown rejection reason"
    return f'validator "{plugin_id}" rejected container adjustment, reason: {reason}'
