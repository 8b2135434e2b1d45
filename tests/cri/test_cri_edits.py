"""A CRI CreateContainerRequest <-> ContainerEdits (cri.edits): containerd 1.6's argv rule, mounts, devices and
the RDT class annotations as goresctrl reads them; written back so that what the plugins kept stays byte-exact."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.kits.hooks import mark_unknown, unknown_marks
from runtimeproxy.cri.edits import (
    RDT_CONTAINER_ANNOTATION,
    RDT_POD_ANNOTATION,
    RDT_POD_CONTAINER_PREFIX,
    apply_edits,
    container_edits,
    process_argv,
)
from runtimeproxy.cri.images import entrypoint_and_cmd_of, identity_of
from runtimeproxy.cri.seccomp import ProfileFiles
from runtimeproxy.hooks.edits import BindMount, Device, ImageIdentity
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri


def request() -> cri.CreateContainerRequest:
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app"), image=cri.ImageSpec(image="busybox"), args=["-x"],
        mounts=[cri.Mount(container_path="/data", host_path="/srv/data", selinux_relabel=True),
                cri.Mount(container_path="/logs", host_path="/srv/logs", readonly=True,
                          propagation=cri.PROPAGATION_HOST_TO_CONTAINER)],
        devices=[cri.Device(container_path="/dev/xvdb", host_path="/dev/loop7", permissions="r")])
    return cri.CreateContainerRequest(pod_sandbox_id="p1", config=config, sandbox_config=cri.PodSandboxConfig(
        annotations={RDT_POD_ANNOTATION: "silver"}))


def test_the_argv_is_containerds_command_args_and_image_fallback() -> None:
    config = request().config
    assert process_argv(config, ["/entry"], ["image-cmd"]) == ("/entry", "-x")  # no command: image Entrypoint
    del config.args[:]
    assert process_argv(config, ["/entry"], ["image-cmd"]) == ("/entry", "image-cmd")  # nor args: image Cmd
    config.command.append("/bin/app")
    assert process_argv(config, ["/entry"], ["image-cmd"]) == ("/bin/app",)  # a command: no image part


def test_mounts_devices_and_the_rdt_class_as_containerd_reads_them() -> None:
    wire = request()
    edits = container_edits(wire, ("/entry", "-x"))
    assert edits.mounts == (BindMount("/data", "/srv/data"), BindMount("/logs", "/srv/logs", True, "rslave"))
    assert edits.devices == (Device("/dev/xvdb", "/dev/loop7", "r"),)
    assert edits.rdt_class == "silver"  # the pod-wide annotation
    wire.sandbox_config.annotations[RDT_POD_CONTAINER_PREFIX + "app"] = "bronze"
    assert container_edits(wire, ()).rdt_class == "bronze"
    wire.config.annotations[RDT_CONTAINER_ANNOTATION] = "gold"
    assert container_edits(wire, ()).rdt_class == "gold"  # the container annotation wins
    assert container_edits(request(), ()).carries == frozenset(
        {"args", "mounts", "devices", "rdt_class", "hugepage_limits", "unified"})  # no Linux setting


def test_written_back_kept_entries_stay_as_they_were_and_new_ones_are_appended() -> None:
    wire = request()
    seen = container_edits(wire, ("/entry", "-x"))
    after = replace(seen, args=("/bin/sh", "-c", "true"),
                    mounts=(seen.mounts[0], BindMount("/cache", "/srv/cache", True, "rshared")),
                    devices=(Device("/dev/fuse", "/dev/fuse"),), rdt_class="gold")
    apply_edits(wire, after, after.changed_kinds(seen))
    config = wire.config
    assert (list(config.command), list(config.args)) == (["/bin/sh", "-c", "true"], [])
    assert list(config.mounts) == [
        cri.Mount(container_path="/data", host_path="/srv/data", selinux_relabel=True),  # kept as it was
        cri.Mount(container_path="/cache", host_path="/srv/cache", readonly=True,
                  propagation=cri.PROPAGATION_BIDIRECTIONAL)]
    assert list(config.devices) == [cri.Device(container_path="/dev/fuse", host_path="/dev/fuse", permissions="rwm")]
    assert config.annotations[RDT_CONTAINER_ANNOTATION] == "gold"


def test_written_back_kept_entries_keep_fields_the_proxy_does_not_know() -> None:
    wire = request()
    sent = mark_unknown(wire)
    seen = container_edits(wire, ("/entry", "-x"))
    after = replace(seen, args=("/bin/sh",), mounts=(*seen.mounts, BindMount("/cache", "/srv/cache")),
                    devices=(*seen.devices, Device("/dev/fuse", "/dev/fuse")))
    apply_edits(wire, after, after.changed_kinds(seen))
    assert unknown_marks(wire) == sent


def test_kinds_that_did_not_change_are_not_touched() -> None:
    wire = request()
    seen = container_edits(wire, ("/entry", "-x"))
    apply_edits(wire, seen, seen.changed_kinds(seen))
    assert wire == request()


def test_the_images_entrypoint_and_cmd_come_from_containerds_verbose_image_info() -> None:
    info = '{"imageSpec": {"config": {"Entrypoint": ["/entry"], "Cmd": ["sh"]}}}'
    assert entrypoint_and_cmd_of(cri.ImageStatusResponse(info={"info": info}), "busybox") == (["/entry"], ["sh"])
    for unreadable in ({"info": "not json"}, {"info": '["a list"]'}, {}):
        assert entrypoint_and_cmd_of(cri.ImageStatusResponse(info=unreadable), "busybox") == ([], [])


def test_a_seccomp_policy_becomes_a_localhost_profile_file_removed_after_the_create(tmp_path: Path) -> None:
    wire = request()
    wire.config.linux.security_context.seccomp_profile_path = "runtime/default"
    seen = container_edits(wire, (), profiles=True)
    assert seen.seccomp == "runtime/default" and "seccomp" in seen.carries
    assert "seccomp" not in container_edits(wire, ()).carries  # no directory for the files
    policy = '{"defaultAction":"SCMP_ACT_ALLOW"}'
    after = replace(seen, seccomp=policy)
    with ProfileFiles(tmp_path / "seccomp") as profiles:
        apply_edits(wire, after, after.changed_kinds(seen), profiles.write)
        context = wire.config.linux.security_context
        assert (context.seccomp.profile_type, context.seccomp_profile_path) == (cri.SecurityProfile.Localhost, "")
        assert Path(context.seccomp.localhost_ref).read_text() == policy
        assert container_edits(wire, ()).seccomp == "localhost/" + context.seccomp.localhost_ref
    assert list((tmp_path / "seccomp").iterdir()) == []


def test_a_privileged_container_carries_no_seccomp_policy() -> None:
    wire = request()
    wire.config.linux.security_context.privileged = True
    assert "seccomp" not in container_edits(wire, (), profiles=True).carries  # containerd would apply none


def test_cdi_devices_are_the_configs_carried_only_where_the_runtimes_cdi_is_on() -> None:
    wire = request()
    wire.config.CDI_devices.add(name="v.example/c=a")
    edits = container_edits(wire, (), cdi=True)
    assert edits.cdi_devices == ("v.example/c=a",) and "cdi_devices" in edits.carries
    assert "cdi_devices" not in container_edits(wire, ()).carries
    apply_edits(wire, replace(edits, cdi_devices=("v.example/c=a", "v.example/c=b")), frozenset({"cdi_devices"}))
    assert [device.name for device in wire.config.CDI_devices] == ["v.example/c=a", "v.example/c=b"]



def test_the_images_identity_is_named_as_containerds_own_nri_names_it() -> None:
    pulled = cri.Image(id="sha256:cfg", repo_tags=["docker.io/library/busybox:1.36"],
                       repo_digests=["docker.io/library/busybox@sha256:index"])
    assert identity_of(pulled) == ImageIdentity("docker.io/library/busybox:1.36", "sha256:index", "sha256:cfg")
    by_digest = cri.Image(id="sha256:cfg", repo_digests=["docker.io/library/busybox@sha256:index"])
    assert identity_of(by_digest) == ImageIdentity("docker.io/library/busybox@sha256:index", "sha256:index",
                                                   "sha256:cfg")
    imported = cri.Image(id="sha256:cfg", repo_tags=["localhost/busybox:1.0"])
    assert identity_of(imported) == ImageIdentity("localhost/busybox:1.0", "", "sha256:cfg")
    assert identity_of(cri.Image()) is None  # the runtime has no such image
