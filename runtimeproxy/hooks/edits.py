"""What a container's create request carries beyond the hook protocol's model: argv, bind mounts, devices, RDT
class, the Linux settings only some runtimes' requests carry (rlimits, sysctls, pids limit, memory
reservation/swappiness/OOM killer, CPU realtime, a seccomp policy), and the CDI devices a runtime injects where
its CDI is on.

koordinator's hooks.ContainerResourceHookRequest has no place for these, but plugins of another protocol (NRI,
hooks.nri_plugins) see and change them. `ContainerEdits` is the core's value for them: a frontend decodes it from its
wire request with the rest and hands it to the core (the image's argv read only while such a plugin is attached:
hooks.lifecycle.HookPoints.edits_want_image), the NRI plugins fold their answers into it, the model records it,
and the frontend writes back the kinds that changed. `carries`
names the kinds the frontend's request can carry at all (CRI: the first four; Docker: all but the RDT
class; both the CDI devices when the runtime says its CDI is on: Runtime.cdi_enabled); a plugin changing
another kind is refused, naming it.

Values are as the runtimes apply them: a bind mount is always recursive with a recursive propagation (CRI
and Docker's Binds say rbind and r-propagation), a device is a host node the runtime copies into the
container at the same path (type, numbers, mode and owner read from the host node).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

# The kinds of edits (the ContainerEdits field names).
ARGS = "args"
MOUNTS = "mounts"
DEVICES = "devices"
RDT_CLASS = "rdt_class"
RLIMITS = "rlimits"
SYSCTLS = "sysctls"
PIDS_LIMIT = "pids_limit"
MEMORY_RESERVATION = "memory_reservation"
MEMORY_SWAPPINESS = "memory_swappiness"
OOM_KILL_DISABLE = "oom_kill_disable"
CPU_REALTIME_RUNTIME = "cpu_realtime_runtime"
CPU_REALTIME_PERIOD = "cpu_realtime_period"
SECCOMP = "seccomp"
CDI_DEVICES = "cdi_devices"
# The kinds a CRI request has a field for, and the Linux settings only Docker's create body has one for.
REQUEST_KINDS = frozenset({ARGS, MOUNTS, DEVICES, RDT_CLASS})
LINUX_KINDS = frozenset({RLIMITS, SYSCTLS, PIDS_LIMIT, MEMORY_RESERVATION, MEMORY_SWAPPINESS, OOM_KILL_DISABLE,
                         CPU_REALTIME_RUNTIME, CPU_REALTIME_PERIOD, SECCOMP})
ALL_KINDS = REQUEST_KINDS | LINUX_KINDS | {CDI_DEVICES}
# Resources the hook model holds that not every request has a field for (dockerd has neither): named in
# `carries` only, never a ContainerEdits field.
HUGEPAGE_LIMITS = "hugepage_limits"
UNIFIED = "unified"
MODEL_KINDS = frozenset({HUGEPAGE_LIMITS, UNIFIED})

PRIVATE, SLAVE, SHARED = "rprivate", "rslave", "rshared"
PROPAGATIONS = (PRIVATE, SLAVE, SHARED)
# A mount option naming a propagation (OCI / Docker spelling, recursive or not) -> the propagation applied.
PROPAGATION_OPTIONS = {"private": PRIVATE, "rprivate": PRIVATE, "slave": SLAVE, "rslave": SLAVE,
                       "shared": SHARED, "rshared": SHARED}


@dataclass(frozen=True)
class BindMount:
    destination: str  # in the container
    source: str  # on the host
    readonly: bool = False
    propagation: str = PRIVATE


@dataclass(frozen=True)
class Device:
    path: str  # in the container
    host_path: str
    permissions: str = "rwm"  # cgroup access the runtime allows


@dataclass(frozen=True)
class Rlimit:
    type: str  # as OCI names it: RLIMIT_NOFILE
    soft: int
    hard: int


@dataclass(frozen=True)
class ImageIdentity:
    """The container's image as NRI names it (Container.image), from the runtime's image record."""

    name: str = ""  # the resolved reference: a repo tag, else a repo digest
    digest: str = ""  # the index or manifest digest ("" when the runtime has none: an image never pulled)
    config_digest: str = ""  # the image ID


@dataclass(frozen=True)
class ImageFacts:
    """What the runtime says of an image: its Entrypoint and Cmd, and who it is (None: not known)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    identity: ImageIdentity | None = None


@dataclass(frozen=True)
class ContainerEdits:
    """A container's argv, bind mounts, devices, RDT class and Linux settings, as the runtime is to create it."""

    args: tuple[str, ...] = ()  # the whole argv; () when unknown (the runtime falls back to the image's)
    mounts: tuple[BindMount, ...] = ()
    devices: tuple[Device, ...] = ()
    rdt_class: str | None = None  # None: none set
    _: KW_ONLY
    # The Linux settings (None / (): the runtime's default).
    rlimits: tuple[Rlimit, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()  # (name, value), in the request's order
    pids_limit: int | None = None
    memory_reservation: int | None = None  # bytes
    memory_swappiness: int | None = None
    oom_kill_disable: bool | None = None
    cpu_realtime_runtime: int | None = None  # microseconds
    cpu_realtime_period: int | None = None
    seccomp: str | None = None  # the runtime's seccomp option: a policy as JSON (OCI's LinuxSeccomp), "unconfined"
    cdi_devices: tuple[str, ...] = ()  # fully qualified CDI names ("vendor.com/class=name"), in the request's order
    # Not an edit (no plugin changes it): the container's image, read with the rest when NRI plugins are attached.
    image: ImageIdentity | None = field(default=None, compare=False)
    carries: frozenset[str] = field(default=frozenset(), compare=False)  # the kinds the request can carry

    def changed_kinds(self, before: ContainerEdits) -> frozenset[str]:
        """The kinds that differ from `before` (what a frontend must write back)."""
        return frozenset(kind for kind in ALL_KINDS if getattr(self, kind) != getattr(before, kind))

    def with_mounts(self, mounts: tuple[BindMount, ...]) -> ContainerEdits:
        return replace(self, mounts=mounts)

    def with_devices(self, devices: tuple[Device, ...]) -> ContainerEdits:
        return replace(self, devices=devices)

    def mount_at(self, destination: str) -> BindMount | None:
        return next((mount for mount in self.mounts if mount.destination == destination), None)

    def device_at(self, path: str) -> Device | None:
        return next((device for device in self.devices if device.path == path), None)


def kept_and_added(wanted: tuple[T, ...], view: list[T | None]) -> tuple[list[int], list[T]]:
    """Write-back helper for a frontend: `view` is the core value of each of its wire entries (same order;
    None for an entry that is not of this kind, e.g. a named volume: always kept). Returns the indexes of the
    wire entries to keep as they are (unknown fields and all) and the values to add as new entries (in
    `wanted`'s order); the other wire entries were removed or replaced."""
    keep = [index for index, value in enumerate(view) if value is None or value in wanted]
    kept = {value for value in (view[index] for index in keep) if value is not None}
    return keep, [item for item in wanted if item not in kept]
