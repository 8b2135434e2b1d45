"""NRI's args, mounts, devices and RDT class <-> the hook core's ContainerEdits (hooks.edits): view and merge.

The view: what an NRI plugin sees in CreateContainer's Container (args, mounts as rbind mounts with their
propagation and ro/rw, linux.devices with the host node's type, numbers, mode and owner, the RDT class).

The merge, one plugin's ContainerAdjustment after another (nri.adjust drives it and owns the conflict rule):
  args      the whole argv, replaced (a leading "" only drops an earlier plugin's claim, as containerd/nri).
  mounts    bind mounts only (type "bind", or no type with a bind/rbind option); "ro"/"rw" and a propagation
            (private, slave, shared, recursive or not: the runtimes always make it recursive) are the options a
            request carries, any other option or type is refused. A mount replaces one at the same
            destination; "-/dest" removes one the request (or an earlier plugin) carries; a mount the runtime
            adds itself (containerd's /etc/hostname, /dev/shm, ...) cannot be removed through its request.
            As containerd/nri, one adjustment's removals go first, so "-/dest" + "/dest" replaces (and is
            fine when there was none).
  devices   a host device node at the same path (CRI Device / Docker HostConfig.Devices, "rwm"): the runtime
            copies the host node, so the node must exist with the type and numbers asked, and a mode, uid or
            gid the plugin sets must be the host node's. "-/path" removes a device the request carries.
  linux.resources.devices   cgroup rules: accepted when each only allows what a device of the container
            gets anyway (the runtime adds that rule itself), refused otherwise.
  linux.resources.rdt_class the RDT class (CRI mode: containerd's container annotation; see the frontend).
  rlimits   replaced by type (RLIMIT_NOFILE, ...: the types OCI and runc know), soft at most hard.
  linux.sysctl              set, "-name" removes (removals first, as mounts).
  linux.seccomp_policy      the whole policy, as the runtime's JSON (OCI's LinuxSeccomp, which Docker's
            profile format reads too).
A refusal is `AdjustmentRefused` naming the plugin and the field; a kind the frontend's request cannot carry
(ContainerEdits.carries) is refused by nri.adjust before anything here runs.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from runtimeproxy.hooks.edits import PRIVATE, PROPAGATION_OPTIONS, BindMount, ContainerEdits, Device, Rlimit
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

Entry = TypeVar("Entry", BindMount, Device)  # a mount or a device: kept by destination or path

REMOVAL_MARK = "-"
Stat = Callable[[str], os.stat_result]

_BIND_OPTIONS = frozenset({"bind", "rbind"})
_ACCESS = frozenset("rwm")
_DEVICE_TYPES = {stat.S_IFCHR: "c", stat.S_IFBLK: "b"}
# The rlimits OCI runtimes (runc) set; Docker's Ulimits names are these without RLIMIT_, in lower case.
RLIMIT_TYPES = frozenset(f"RLIMIT_{name}" for name in (
    "AS", "CORE", "CPU", "DATA", "FSIZE", "LOCKS", "MEMLOCK", "MSGQUEUE", "NICE", "NOFILE", "NPROC", "RSS",
    "RTPRIO", "RTTIME", "SIGPENDING", "STACK"))


class EditRefused(ValueError):
    """An adjustment the request cannot carry; `field` is the NRI field (nri.adjust adds the plugin)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# --- the view -------------------------------------------------------------------------------------


def mount_message(mount: BindMount) -> nri.Mount:
    return nri.Mount(destination=mount.destination, type="bind", source=mount.source,
                     options=["rbind", mount.propagation, "ro" if mount.readonly else "rw"])


def device_message(device: Device, stat_path: Stat = os.stat) -> nri.LinuxDevice:
    """The device as the runtime will create it: the host node's type, numbers, mode and owner."""
    message = nri.LinuxDevice(path=device.path)
    try:
        found = stat_path(device.host_path)
    except OSError:
        return message
    kind = _DEVICE_TYPES.get(stat.S_IFMT(found.st_mode))
    if kind is None:
        return message
    message.type, message.major, message.minor = kind, os.major(found.st_rdev), os.minor(found.st_rdev)
    message.file_mode.value = stat.S_IMODE(found.st_mode)
    message.uid.value, message.gid.value = found.st_uid, found.st_gid
    return message


def fill_container(message: nri.Container, edits: ContainerEdits, stat_path: Stat = os.stat) -> None:
    message.args.extend(edits.args)
    message.mounts.extend(mount_message(mount) for mount in edits.mounts)
    message.linux.devices.extend(device_message(device, stat_path) for device in edits.devices)
    if edits.rdt_class is not None:
        message.linux.resources.rdt_class.value = edits.rdt_class
    message.rlimits.extend(nri.POSIXRlimit(type=r.type, soft=r.soft, hard=r.hard) for r in edits.rlimits)
    message.linux.sysctl.update(edits.sysctls)
    resources = message.linux.resources
    if edits.pids_limit is not None:
        resources.pids.limit = edits.pids_limit
    for wrapper, setting in ((resources.memory.reservation, edits.memory_reservation),
                             (resources.memory.swappiness, edits.memory_swappiness),
                             (resources.memory.disable_oom_killer, edits.oom_kill_disable),
                             (resources.cpu.realtime_runtime, edits.cpu_realtime_runtime),
                             (resources.cpu.realtime_period, edits.cpu_realtime_period)):
        if setting is not None:
            wrapper.value = setting
    if edits.seccomp is not None and edits.seccomp.startswith("{"):
        message.linux.seccomp_policy.CopyFrom(seccomp_policy(edits.seccomp))
    if edits.image is not None:
        image = edits.image
        message.image.CopyFrom(nri.Image(name=image.name, digest=image.digest, config_digest=image.config_digest))


# --- the merge ------------------------------------------------------------------------------------


def marked(name: str) -> tuple[str, bool]:
    """NRI's removal marker: ("/dest", True) for "-/dest"."""
    return (name[len(REMOVAL_MARK):], True) if name.startswith(REMOVAL_MARK) else (name, False)


def bind_mount(mount: nri.Mount) -> BindMount:
    """An NRI mount as a request can carry it, or EditRefused."""
    where = f"mounts[{mount.destination}]"
    options = list(mount.options)
    if mount.type not in ("bind", "") or (mount.type == "" and not _BIND_OPTIONS & set(options)):
        raise EditRefused("mounts", f"{where} has type {mount.type or '(none)'!r}: a CRI or Docker create "
                                    f"request carries only bind mounts")
    if not mount.source.startswith("/") or not mount.destination.startswith("/"):
        raise EditRefused("mounts", f"{where}: source and destination must be absolute paths")
    readonly, propagation = False, PRIVATE
    for option in options:
        if option in ("ro", "rw"):
            readonly = option == "ro"
        elif option in PROPAGATION_OPTIONS:
            propagation = PROPAGATION_OPTIONS[option]
        elif option not in _BIND_OPTIONS:
            raise EditRefused("mounts", f"{where} has option {option!r}: a request's bind mount carries only "
                                        f"ro/rw and a propagation (private, slave, shared)")
    return BindMount(mount.destination, mount.source, readonly, propagation)


def apply_mounts(edits: ContainerEdits, mounts: list[nri.Mount]) -> ContainerEdits:
    """One adjustment's mounts, as containerd/nri folds them: removals first, then additions (so "-/dest" with
    "/dest" replaces; a removal of what the request lacks is fine when the same adjustment adds it)."""
    added = [bind_mount(mount) for mount in mounts if not marked(mount.destination)[1]]
    readded = {mount.destination for mount in added}
    for mount in mounts:
        destination, removal = marked(mount.destination)
        if removal and not (destination in readded and edits.mount_at(destination) is None):
            edits = remove_mount(edits, destination)
    for bind in added:
        edits = put_mount(edits, bind)
    return edits


def apply_devices(edits: ContainerEdits, devices: list[nri.LinuxDevice], stat_path: Stat = os.stat) -> ContainerEdits:
    """One adjustment's devices: removals first, then additions (as apply_mounts)."""
    added = [host_device(device, stat_path) for device in devices if not marked(device.path)[1]]
    readded = {device.path for device in added}
    for device in devices:
        path, removal = marked(device.path)
        if removal and not (path in readded and edits.device_at(path) is None):
            edits = remove_device(edits, path)
    for host in added:
        edits = put_device(edits, host)
    return edits


def _without(entries: tuple[Entry, ...], key: Callable[[Entry], str], target: str) -> tuple[Entry, ...] | None:
    """`entries` less the one whose key is `target`; None when there is none."""
    kept = tuple(entry for entry in entries if key(entry) != target)
    return kept if len(kept) < len(entries) else None


def _put(entries: tuple[Entry, ...], key: Callable[[Entry], str], new: Entry) -> tuple[Entry, ...]:
    """Replaces the entry with new's key (in its place) or adds new at the end."""
    if any(key(entry) == key(new) for entry in entries):
        return tuple(new if key(entry) == key(new) else entry for entry in entries)
    return entries + (new,)


def _destination(mount: BindMount) -> str:
    return mount.destination


def _path(device: Device) -> str:
    return device.path


def remove_mount(edits: ContainerEdits, destination: str) -> ContainerEdits:
    kept = _without(edits.mounts, _destination, destination)
    if kept is None:
        raise EditRefused("mounts", f"mounts[-{destination}]: the request has no mount at {destination}; a mount "
                                    f"the runtime adds itself cannot be removed through the request")
    return edits.with_mounts(kept)


def put_mount(edits: ContainerEdits, mount: BindMount) -> ContainerEdits:
    """Replaces a mount at the same destination (in its place) or adds it at the end."""
    return edits.with_mounts(_put(edits.mounts, _destination, mount))


def host_device(device: nri.LinuxDevice, stat_path: Stat = os.stat) -> Device:
    """An NRI device as a request can carry it (the host node at that path), or EditRefused."""
    where = f"linux.devices[{device.path}]"
    try:
        found = stat_path(device.path)
    except OSError as error:
        raise EditRefused("linux.devices", f"{where}: no device node on the host ({error.strerror}); the "
                                           f"runtime copies the host's node into the container") from None
    kind = _DEVICE_TYPES.get(stat.S_IFMT(found.st_mode))
    if kind is None:
        raise EditRefused("linux.devices", f"{where}: {device.path} on the host is not a device node")
    wanted = "c" if device.type == "u" else device.type
    numbers = (os.major(found.st_rdev), os.minor(found.st_rdev))
    if (wanted, device.major, device.minor) != (kind, *numbers):
        raise EditRefused("linux.devices", f"{where}: the plugin asks for {device.type} {device.major}:"
                                           f"{device.minor}, the host node is {kind} {numbers[0]}:{numbers[1]}")
    for name, present, value, host_value in (
        ("file_mode", device.HasField("file_mode"), device.file_mode.value, stat.S_IMODE(found.st_mode)),
        ("uid", device.HasField("uid"), device.uid.value, found.st_uid),
        ("gid", device.HasField("gid"), device.gid.value, found.st_gid),
    ):
        if present and value != host_value:
            shown = oct if name == "file_mode" else str
            raise EditRefused("linux.devices", f"{where}: {name} {shown(value)} differs from the host node's "
                                               f"({shown(host_value)}); the runtime gives the device the host "
                                               f"node's")
    return Device(device.path, device.path)


def remove_device(edits: ContainerEdits, path: str) -> ContainerEdits:
    kept = _without(edits.devices, _path, path)
    if kept is None:
        raise EditRefused("linux.devices", f"linux.devices[-{path}]: the request has no device at {path}; a "
                                           f"device the runtime adds itself cannot be removed through the request")
    return edits.with_devices(kept)


def put_device(edits: ContainerEdits, device: Device) -> ContainerEdits:
    return edits.with_devices(_put(edits.devices, _path, device))


def check_device_rules(edits: ContainerEdits, rules: list[nri.LinuxDeviceCgroup], stat_path: Stat = os.stat) -> None:
    """Device cgroup rules: each must only allow what one of the container's devices gets anyway."""
    granted: dict[tuple[str, int | None, int | None], frozenset[str]] = {}
    for device in edits.devices:
        message = device_message(device, stat_path)
        if message.type:
            kind = (message.type, message.major, message.minor)
            granted[kind] = granted.get(kind, frozenset()) | frozenset(device.permissions)
    for rule in rules:
        access = frozenset(rule.access or "rwm")
        key: tuple[str, int | None, int | None] = (rule.type, rule.major.value if rule.HasField("major") else None,
               rule.minor.value if rule.HasField("minor") else None)
        if not rule.allow or not access <= _ACCESS or not access <= granted.get(key, frozenset()):
            raise EditRefused("linux.resources.devices", f"linux.resources.devices: the rule {_rule_text(rule)!r} "
                                                         f"is not what a device of the container gets; a request "
                                                         f"carries no device cgroup rules")


def _rule_text(rule: nri.LinuxDeviceCgroup) -> str:
    major, minor = (rule.major.value if rule.HasField("major") else "*"), \
        (rule.minor.value if rule.HasField("minor") else "*")
    return f"{'allow' if rule.allow else 'deny'} {rule.type or 'a'} {major}:{minor} {rule.access}"


def apply_cdi_devices(edits: ContainerEdits, names: list[str]) -> ContainerEdits:
    """Each device the runtime is to inject, by its fully qualified CDI name, added once (NRI removes none)."""
    devices = list(edits.cdi_devices)
    for name in names:
        if not is_qualified_cdi_name(name):
            raise EditRefused("CDI_devices", f"CDI_devices[{name}]: not a fully qualified CDI device name "
                                             "(vendor.com/class=name)")
        if name not in devices:
            devices.append(name)
    return replace(edits, cdi_devices=tuple(devices))


def is_qualified_cdi_name(name: str) -> bool:
    """CDI's "vendor.com/class=name" form (the runtime checks the rest: the vendor's spec must name it)."""
    kind, _, device = name.partition("=")
    vendor, _, device_class = kind.partition("/")
    return all(part and not part.startswith(("-", ".")) for part in (vendor, device_class, device)) and \
        "/" not in device_class and "=" not in device and " " not in name


def apply_args(edits: ContainerEdits, args: list[str]) -> ContainerEdits:
    argv = args[1:] if args and args[0] == "" else args
    return replace(edits, args=tuple(argv)) if argv else edits


# --- the Linux settings ---------------------------------------------------------------------------


def apply_rlimits(edits: ContainerEdits, rlimits: list[nri.POSIXRlimit]) -> ContainerEdits:
    """Each rlimit replaces one of its type (in its place) or is added at the end."""
    entries = list(edits.rlimits)
    for rlimit in rlimits:
        if rlimit.type not in RLIMIT_TYPES:
            raise EditRefused("rlimits", f"rlimits[{rlimit.type}]: not a resource limit the runtime sets "
                                         f"({', '.join(sorted(RLIMIT_TYPES))})")
        if rlimit.soft > rlimit.hard:
            raise EditRefused("rlimits", f"rlimits[{rlimit.type}]: soft {rlimit.soft} above hard {rlimit.hard}")
        new = Rlimit(rlimit.type, rlimit.soft, rlimit.hard)
        at = next((index for index, entry in enumerate(entries) if entry.type == new.type), None)
        if at is None:
            entries.append(new)
        else:
            entries[at] = new
    return replace(edits, rlimits=tuple(entries))


def apply_sysctls(edits: ContainerEdits, sysctl: dict[str, str]) -> ContainerEdits:
    """Removals ("-name") first, then the values set."""
    settings = dict(edits.sysctls)
    for key in sysctl:
        name, removal = marked(key)
        if removal:
            settings.pop(name, None)
    for key, value in sysctl.items():
        if not marked(key)[1]:
            if not key or "=" in key or " " in key:
                raise EditRefused("linux.sysctl", f"linux.sysctl[{key}]: not a sysctl name")
            settings[key] = value
    return replace(edits, sysctls=tuple(settings.items()))


def seccomp_json(policy: nri.LinuxSeccomp) -> str:
    """The policy as OCI's LinuxSeccomp JSON (what Docker's SecurityOpt seccomp= takes too); empty parts left
    out, so a runtime that predates one of them reads the rest."""
    document: dict[str, object] = {"defaultAction": policy.default_action}
    if policy.HasField("default_errno"):
        document["defaultErrnoRet"] = policy.default_errno.value
    for key, value in (("architectures", list(policy.architectures)), ("flags", list(policy.flags)),
                       ("listenerPath", policy.listener_path), ("listenerMetadata", policy.listener_metadata)):
        if value:
            document[key] = value
    syscalls = []
    for syscall in policy.syscalls:
        rule: dict[str, object] = {"names": list(syscall.names), "action": syscall.action}
        if syscall.HasField("errno_ret"):
            rule["errnoRet"] = syscall.errno_ret.value
        if syscall.args:
            rule["args"] = [{"index": arg.index, "value": arg.value, "valueTwo": arg.value_two, "op": arg.op}
                            for arg in syscall.args]
        syscalls.append(rule)
    if syscalls:
        document["syscalls"] = syscalls
    return json.dumps(document, separators=(",", ":"))


def seccomp_policy(text: str) -> nri.LinuxSeccomp:
    """A policy's JSON (seccomp_json's, or a runtime's profile) as NRI's message; what it cannot read is left out."""
    try:
        document = json.loads(text)
    except ValueError:
        return nri.LinuxSeccomp()
    if not isinstance(document, dict):
        return nri.LinuxSeccomp()
    policy = nri.LinuxSeccomp(default_action=str(document.get("defaultAction", "")),
                              architectures=[str(a) for a in document.get("architectures") or []],
                              flags=[str(f) for f in document.get("flags") or []],
                              listener_path=str(document.get("listenerPath") or ""),
                              listener_metadata=str(document.get("listenerMetadata") or ""))
    if isinstance(document.get("defaultErrnoRet"), int):
        policy.default_errno.value = document["defaultErrnoRet"]
    for rule in document.get("syscalls") or []:
        if not isinstance(rule, dict):
            continue
        syscall = policy.syscalls.add(names=[str(n) for n in rule.get("names") or []],
                                      action=str(rule.get("action", "")))
        if isinstance(rule.get("errnoRet"), int):
            syscall.errno_ret.value = rule["errnoRet"]
        for arg in rule.get("args") or []:
            syscall.args.add(index=int(arg.get("index", 0)), value=int(arg.get("value", 0)),
                             value_two=int(arg.get("valueTwo", 0)), op=str(arg.get("op", "")))
    return policy
