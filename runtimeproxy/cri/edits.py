"""A CRI CreateContainerRequest <-> the hook core's ContainerEdits (hooks.edits): argv, mounts, devices, RDT class,
seccomp, CDI devices.

Translation only, as containerd 1.6 reads the request:
  argv      containerd runs command + args, and with no command the image's Entrypoint + (args, else the
            image's Cmd) (its WithProcessArgs). Written back as command = the whole argv, args empty, so the
            image's are not used.
  mounts    every CRI mount is a bind mount (containerd: rbind, its propagation as rprivate / rslave /
            rshared, ro or rw). Written back: the request's entries the plugins kept stay as they were
            (SELinux relabel, id mappings and all), new ones are appended.
  devices   CRI Device(container_path, host_path, permissions); a new one is the host node at the same path.
  RDT class containerd (goresctrl) takes it from the container annotation `io.kubernetes.cri.rdt-class`,
            else the pod annotations `rdt.resources.beta.kubernetes.io/container.<name>`, then `.../pod`:
            read in that order, written as the container annotation (which wins). containerd refuses the
            create when RDT is not enabled on the node ("RDT disabled, refusing to set RDT class").
  seccomp   read from security_context.seccomp (else the deprecated seccomp_profile_path) as containerd
            names it: "runtime/default", "unconfined", "localhost/<path>". A plugin's policy is written as a
            Localhost profile (cri.seccomp writes the file): carried only when the proxy has a directory for
            the files and the container is not privileged (containerd applies no seccomp to a privileged one).
  CDI devices  config.CDI_devices (fully qualified names), which containerd 1.7+ injects when its `enable_cdi`
            is on (cri.runtime asks it); containerd 1.6 reads no CDI devices: not carried there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import Message

from runtimeproxy.hooks import edits as kinds
from runtimeproxy.hooks.edits import PRIVATE, SHARED, SLAVE, BindMount, ContainerEdits, Device, kept_and_added
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

RDT_CONTAINER_ANNOTATION = "io.kubernetes.cri.rdt-class"
RDT_POD_ANNOTATION = "rdt.resources.beta.kubernetes.io/pod"
RDT_POD_CONTAINER_PREFIX = "rdt.resources.beta.kubernetes.io/container."
CARRIED = kinds.REQUEST_KINDS | kinds.MODEL_KINDS  # the Linux settings: no CRI field, but for seccomp
CARRIED_WITH_PROFILES = CARRIED | {kinds.SECCOMP}  # when the proxy can write seccomp profile files
_PROFILE_NAMES = {cri.SecurityProfile.RuntimeDefault: "runtime/default",
                  cri.SecurityProfile.Unconfined: "unconfined", cri.SecurityProfile.Localhost: "localhost/"}
M = TypeVar("M", bound=Message)

_PROPAGATION = {cri.PROPAGATION_PRIVATE: PRIVATE, cri.PROPAGATION_HOST_TO_CONTAINER: SLAVE,
                cri.PROPAGATION_BIDIRECTIONAL: SHARED}
_CRI_PROPAGATION = {value: key for key, value in _PROPAGATION.items()}


def process_argv(config: cri.ContainerConfig, entrypoint: list[str], cmd: list[str]) -> tuple[str, ...]:
    """The argv containerd runs for the config, with the image's Entrypoint and Cmd."""
    if config.command:
        return (*config.command, *config.args)
    return (*entrypoint, *(config.args or cmd))


def bind_mount(mount: cri.Mount) -> BindMount:
    return BindMount(mount.container_path, mount.host_path, mount.readonly,
                     _PROPAGATION.get(mount.propagation, PRIVATE))


def cri_mount(mount: BindMount) -> cri.Mount:
    return cri.Mount(container_path=mount.destination, host_path=mount.source, readonly=mount.readonly,
                     propagation=_CRI_PROPAGATION[mount.propagation])


def device(entry: cri.Device) -> Device:
    return Device(entry.container_path, entry.host_path, entry.permissions)


def rdt_class(request: cri.CreateContainerRequest) -> str | None:
    """The container's RDT class as containerd's goresctrl picks it (None: none)."""
    config, pod = request.config, request.sandbox_config.annotations
    for annotations, key in ((config.annotations, RDT_CONTAINER_ANNOTATION),
                             (pod, RDT_POD_CONTAINER_PREFIX + config.metadata.name), (pod, RDT_POD_ANNOTATION)):
        if key in annotations:
            return annotations[key]
    return None


def seccomp(config: cri.ContainerConfig) -> str | None:
    """The container's seccomp profile as containerd names it (None: containerd's default)."""
    context = config.linux.security_context
    if context.HasField("seccomp"):
        profile = context.seccomp
        name = _PROFILE_NAMES.get(profile.profile_type, "")
        return name + profile.localhost_ref if profile.profile_type == cri.SecurityProfile.Localhost else name
    return context.seccomp_profile_path or None


def container_edits(request: cri.CreateContainerRequest, argv: tuple[str, ...],
                    profiles: bool = False, cdi: bool = False) -> ContainerEdits:
    """`argv` is the process_argv (the caller reads the image when the config has no command); `profiles`:
    the proxy can write seccomp profile files; `cdi`: the runtime injects the CDI devices the config names."""
    config = request.config
    carried = CARRIED_WITH_PROFILES if profiles and not config.linux.security_context.privileged else CARRIED
    return ContainerEdits(argv, tuple(bind_mount(m) for m in config.mounts),
                          tuple(device(d) for d in config.devices), rdt_class(request), seccomp=seccomp(config),
                          cdi_devices=tuple(d.name for d in config.CDI_devices),
                          carries=carried | {kinds.CDI_DEVICES} if cdi else carried)


def apply_edits(request: cri.CreateContainerRequest, edits: ContainerEdits, changed: frozenset[str],
                write_profile: Callable[[str], str] | None = None) -> None:
    """`write_profile` writes a seccomp policy to a file and returns its path (cri.seccomp)."""
    config = request.config
    if kinds.ARGS in changed:
        del config.command[:], config.args[:]
        config.command.extend(edits.args)
    if kinds.MOUNTS in changed:
        keep, added = kept_and_added(edits.mounts, [bind_mount(m) for m in config.mounts])
        mounts = [_copy(config.mounts[index]) for index in keep] + [cri_mount(m) for m in added]
        del config.mounts[:]
        config.mounts.extend(mounts)
    if kinds.DEVICES in changed:
        keep, new = kept_and_added(edits.devices, [device(d) for d in config.devices])
        devices = [_copy(config.devices[index]) for index in keep] + [
            cri.Device(container_path=d.path, host_path=d.host_path, permissions=d.permissions) for d in new]
        del config.devices[:]
        config.devices.extend(devices)
    if kinds.CDI_DEVICES in changed:
        del config.CDI_devices[:]
        config.CDI_devices.extend(cri.CDIDevice(name=name) for name in edits.cdi_devices)
    if kinds.RDT_CLASS in changed and edits.rdt_class is not None:
        config.annotations[RDT_CONTAINER_ANNOTATION] = edits.rdt_class
    if kinds.SECCOMP in changed and edits.seccomp is not None and write_profile is not None:
        context = config.linux.security_context
        context.seccomp.CopyFrom(cri.SecurityProfile(profile_type=cri.SecurityProfile.Localhost,
                                                     localhost_ref=write_profile(edits.seccomp)))
        context.seccomp_profile_path = ""


def _copy(message: M) -> M:
    """A kept entry, detached from the repeated field about to be cleared."""
    copied = type(message)()
    copied.CopyFrom(message)
    return copied
