"""A Docker create body <-> the hook core's ContainerEdits (hooks.edits): argv, bind mounts, devices, Linux settings.

Translation only, as dockerd reads the body (moby's config merge with the image):
  argv      Entrypoint + Cmd; with an empty Entrypoint, Cmd falls back to the image's, and a missing (null)
            Entrypoint to the image's. Written back as Entrypoint = the whole argv, Cmd null: with an
            Entrypoint set, dockerd does not use the image's Cmd (`docker inspect` shows Path + Args).
  mounts    the bind mounts of HostConfig.Binds ("/src:/dst[:opts]": ro/rw, a propagation; z/Z and nocopy
            are kept on a kept entry) and of HostConfig.Mounts (Type "bind", ReadOnly, BindOptions.
            Propagation). Named volumes, tmpfs and volume mounts are not bind mounts: not shown, left alone.
            A new mount is written to Binds (dockerd creates a missing source, as containerd does), or to
            Mounts when a path holds a ":" (which Binds cannot say).
  devices   HostConfig.Devices ({PathOnHost, PathInContainer, CgroupPermissions}).
  Linux settings, each a HostConfig field of moby's API (v1.41, dockerd 20.10, to v1.51, dockerd 28):
            rlimits Ulimits ({Name: "nofile", Soft, Hard}: OCI's type without RLIMIT_, in lower case),
            sysctls Sysctls, pids PidsLimit, MemoryReservation, MemorySwappiness, OomKillDisable,
            CpuRealtimeRuntime/CpuRealtimePeriod, seccomp the SecurityOpt entry `seccomp=<profile JSON>`
            (the JSON itself, as the docker CLI sends a profile file's content). dockerd's "not set" (0,
            -1 for swappiness, null) reads as None.
  CDI devices  HostConfig.DeviceRequests entries of the driver "cdi" (DeviceIDs: fully qualified CDI names,
            as the docker CLI's `--device vendor.com/class=name` sends them); carried only when dockerd's CDI
            is on (docker.runtime), else dockerd would refuse the driver.
dockerd has no RDT (or blockio) class: that kind is not carried, so a plugin setting it is refused.
"""

from __future__ import annotations

from typing import Any

from runtimeproxy.hooks import edits as kinds
from runtimeproxy.hooks.edits import (PRIVATE, PROPAGATION_OPTIONS, BindMount, ContainerEdits, Device, Rlimit,
                                      kept_and_added)

Body = dict[str, Any]
CARRIED = frozenset({kinds.ARGS, kinds.MOUNTS, kinds.DEVICES}) | kinds.LINUX_KINDS
CDI_DRIVER = "cdi"  # moby's device driver for CDI devices (dockerd 25+)
RLIMIT_PREFIX = "RLIMIT_"
SECCOMP_OPTIONS = ("seccomp=", "seccomp:")  # SecurityOpt's seccomp entry (":" is the old separator)
# ContainerEdits' single-value Linux settings -> HostConfig field; a value dockerd reads as "not set".
SETTING_FIELDS: tuple[tuple[str, str, object], ...] = (
    (kinds.PIDS_LIMIT, "PidsLimit", 0),
    (kinds.MEMORY_RESERVATION, "MemoryReservation", 0),
    (kinds.MEMORY_SWAPPINESS, "MemorySwappiness", -1),
    (kinds.OOM_KILL_DISABLE, "OomKillDisable", None),
    (kinds.CPU_REALTIME_RUNTIME, "CpuRealtimeRuntime", 0),
    (kinds.CPU_REALTIME_PERIOD, "CpuRealtimePeriod", 0),
)


def _strings(value: Any) -> list[str] | None:
    """Entrypoint/Cmd: a list, a string (one element, as moby's StrSlice reads it) or null."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value] if isinstance(value, list) else None


def process_argv(body: Body, image_entrypoint: list[str], image_cmd: list[str]) -> tuple[str, ...]:
    """The argv dockerd runs for the body, with the image's Entrypoint and Cmd (moby's merge)."""
    entrypoint, cmd = _strings(body.get("Entrypoint")), _strings(body.get("Cmd")) or []
    if entrypoint:
        return (*entrypoint, *cmd)
    if entrypoint is None:
        entrypoint = image_entrypoint
    return (*entrypoint, *(cmd or image_cmd))


def bind_of(entry: Any) -> BindMount | None:
    """A Binds string as a bind mount; None for a named volume or what cannot be read."""
    if not isinstance(entry, str):
        return None
    parts = entry.split(":")
    if len(parts) not in (2, 3) or not parts[0].startswith("/"):
        return None
    options = parts[2].split(",") if len(parts) == 3 else []
    propagation = next((PROPAGATION_OPTIONS[o] for o in options if o in PROPAGATION_OPTIONS), PRIVATE)
    return BindMount(parts[1], parts[0], "ro" in options, propagation)


def mount_of(entry: Any) -> BindMount | None:
    """A HostConfig.Mounts entry as a bind mount; None when it is of another type."""
    if not isinstance(entry, dict) or entry.get("Type") != "bind":
        return None
    propagation = ((entry.get("BindOptions") or {}).get("Propagation")) or "rprivate"
    return BindMount(str(entry.get("Target", "")), str(entry.get("Source", "")), bool(entry.get("ReadOnly")),
                     PROPAGATION_OPTIONS.get(propagation, PRIVATE))


def device_of(entry: Any) -> Device | None:
    if not isinstance(entry, dict) or not entry.get("PathOnHost"):
        return None
    host = str(entry["PathOnHost"])
    return Device(str(entry.get("PathInContainer") or host), host, str(entry.get("CgroupPermissions") or "rwm"))


def _list(host_config: Body, key: str) -> list[Any]:
    value = host_config.get(key)
    return value if isinstance(value, list) else []


def _is_cdi_request(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("Driver") == CDI_DRIVER


def cdi_devices(host_config: Body) -> tuple[str, ...]:
    return tuple(str(name) for entry in _list(host_config, "DeviceRequests") if _is_cdi_request(entry)
                 for name in entry.get("DeviceIDs") or ())


def container_edits(body: Body, argv: tuple[str, ...], cdi: bool = False) -> ContainerEdits:
    """`cdi`: dockerd injects CDI devices (its CDI feature is on)."""
    host_config = body.get("HostConfig")
    host_config = host_config if isinstance(host_config, dict) else {}
    mounts = [m for m in map(bind_of, _list(host_config, "Binds")) if m is not None] + \
        [m for m in map(mount_of, _list(host_config, "Mounts")) if m is not None]
    devices = [d for d in map(device_of, _list(host_config, "Devices")) if d is not None]
    settings = {kind: host_config.get(key) for kind, key, unset in SETTING_FIELDS
                if host_config.get(key) not in (None, unset)}
    sysctls = host_config.get("Sysctls")
    return ContainerEdits(argv, tuple(mounts), tuple(devices), None, rlimits=tuple(_rlimits(host_config)),
                          sysctls=tuple(sysctls.items()) if isinstance(sysctls, dict) else (),
                          seccomp=_seccomp(host_config), cdi_devices=cdi_devices(host_config),
                          carries=CARRIED | {kinds.CDI_DEVICES} if cdi else CARRIED, **settings)


def _rlimits(host_config: Body) -> list[Rlimit]:
    return [Rlimit(RLIMIT_PREFIX + str(entry.get("Name", "")).upper(), int(entry.get("Soft") or 0),
                   int(entry.get("Hard") or 0))
            for entry in _list(host_config, "Ulimits") if isinstance(entry, dict)]


def _seccomp(host_config: Body) -> str | None:
    options = [o for o in _list(host_config, "SecurityOpt") if isinstance(o, str) and o.startswith(SECCOMP_OPTIONS)]
    return options[-1][len(SECCOMP_OPTIONS[0]):] if options else None


def _bind_string(mount: BindMount) -> str:
    return f"{mount.source}:{mount.destination}:{'ro' if mount.readonly else 'rw'},{mount.propagation}"


def _mount_object(mount: BindMount) -> Body:
    return {"Type": "bind", "Source": mount.source, "Target": mount.destination, "ReadOnly": mount.readonly,
            "BindOptions": {"Propagation": mount.propagation}}


def _kept(entries: list[Any], view: list[Any], wanted: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """Entries that are not ours to judge (view None) stay; ours stay when the plugins kept them."""
    keep, added = kept_and_added(wanted, view)
    return [entries[index] for index in keep], added


def apply_edits(body: Body, edits: ContainerEdits, changed: frozenset[str]) -> None:
    host_config = body.setdefault("HostConfig", {})
    if kinds.ARGS in changed:
        body["Entrypoint"], body["Cmd"] = list(edits.args), None
    if kinds.MOUNTS in changed:
        binds, mounts = _list(host_config, "Binds"), _list(host_config, "Mounts")
        bind_view, mount_view = [bind_of(b) for b in binds], [mount_of(m) for m in mounts]
        kept_binds, added = _kept(binds, bind_view, edits.mounts)
        kept_mounts, added = _kept(mounts, mount_view, tuple(added))
        kept_binds += [_bind_string(m) for m in added if ":" not in m.source + m.destination]
        kept_mounts += [_mount_object(m) for m in added if ":" in m.source + m.destination]
        host_config["Binds"], host_config["Mounts"] = kept_binds, kept_mounts
    if kinds.DEVICES in changed:
        devices = _list(host_config, "Devices")
        kept, added_devices = _kept(devices, [device_of(d) for d in devices], edits.devices)
        host_config["Devices"] = kept + [{"PathOnHost": d.host_path, "PathInContainer": d.path,
                                          "CgroupPermissions": d.permissions} for d in added_devices]
    if kinds.CDI_DEVICES in changed:
        others = [entry for entry in _list(host_config, "DeviceRequests") if not _is_cdi_request(entry)]
        host_config["DeviceRequests"] = others + ([{"Driver": CDI_DRIVER, "DeviceIDs": list(edits.cdi_devices)}]
                                                  if edits.cdi_devices else [])
    _apply_linux_settings(host_config, edits, changed)


def _apply_linux_settings(host_config: Body, edits: ContainerEdits, changed: frozenset[str]) -> None:
    if kinds.RLIMITS in changed:
        host_config["Ulimits"] = [{"Name": r.type.removeprefix(RLIMIT_PREFIX).lower(), "Soft": r.soft,
                                   "Hard": r.hard} for r in edits.rlimits]
    if kinds.SYSCTLS in changed:
        host_config["Sysctls"] = dict(edits.sysctls)
    for kind, key, unset in SETTING_FIELDS:
        if kind in changed:
            value = getattr(edits, kind)
            host_config[key] = unset if value is None else value
    if kinds.SECCOMP in changed:
        options = [o for o in _list(host_config, "SecurityOpt")
                   if not (isinstance(o, str) and o.startswith(SECCOMP_OPTIONS))]
        host_config["SecurityOpt"] = options + ([] if edits.seccomp is None else [f"seccomp={edits.seccomp}"])
