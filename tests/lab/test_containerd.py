"""A real private containerd: start, image import, CRI visibility, and a stop that leaves nothing behind.

Needs root, containerd, runc, gcc and Debian's dynamic busybox; marked ``e2e``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rplab import containerd, images
from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.runtimes import runtime_named

MISSING = containerd.check_prerequisites()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(MISSING is not None, reason=f"lab prerequisites missing: {MISSING}"),
]


@pytest.fixture(scope="module")
def image_tars(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return images.build_image_tars(tmp_path_factory.mktemp("image-cache"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, image_tars: dict[str, Path]) -> Iterator[ContainerdInstance]:
    with ContainerdInstance(tmp_path_factory.mktemp("ctd")) as instance:
        images.import_images(instance.address, image_tars)
        yield instance


def test_config_is_private_and_has_the_cri_settings(tmp_path: Path) -> None:
    inst = ContainerdInstance(tmp_path)
    config = tomllib.loads(inst.config_toml())
    base = str(tmp_path)
    assert config["version"] == 2 and config["disabled_plugins"] == []
    for value in (config["root"], config["state"], config["temp"], config["grpc"]["address"],
                  config["ttrpc"]["address"], config["debug"]["address"]):
        assert value.startswith(base + "/")
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == images.PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    assert (cri["stream_server_address"], cri["stream_server_port"]) == ("127.0.0.1", "0")
    assert cri["cni"]["conf_dir"].startswith(base + "/")
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2" and runc["options"]["SystemdCgroup"] is False


@pytest.mark.parametrize("name", ["containerd-1.7", "containerd-2.4"])
def test_containerds_own_nri_turned_on_serves_a_private_socket(tmp_path: Path, name: str) -> None:
    """On (off is every config's default: test_runtimes), every path of it is private: no plugin of the host's
    /opt/nri is launched, the host-wide socket is left alone."""
    inst = ContainerdInstance(tmp_path, runtime=runtime_named(name), nri=True)
    nri = tomllib.loads(inst.config_toml())["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False and nri["socket_path"] == str(inst.nri_socket)
    for key in ("socket_path", "plugin_path", "plugin_config_path"):
        assert nri[key].startswith(str(tmp_path) + "/")


def test_containerd_1_6_has_no_nri_to_turn_on(tmp_path: Path) -> None:
    with pytest.raises(containerd.ContainerdError, match="has no NRI"):
        ContainerdInstance(tmp_path, runtime=runtime_named("containerd-1.6"), nri=True)


def test_too_long_socket_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(containerd.ContainerdError, match="too long"):
        ContainerdInstance(tmp_path / ("x" * 120))


def test_cri_answers(lab: ContainerdInstance) -> None:
    assert lab.running
    assert lab.cri_version().startswith("containerd ")
    assert lab.ctr("plugins", "ls", namespace=None).stdout.count("cri") >= 1


def test_images_visible_to_ctr_and_cri(lab: ContainerdInstance) -> None:
    names = lab.ctr("images", "ls", "-q").stdout.split()
    assert set(images.LAB_IMAGES) <= set(names)
    assert set(images.LAB_IMAGES) <= set(lab.cri_image_tags())


def run_host_network_pod(lab: ContainerdInstance, log_dir: Path) -> str:
    client = CriClient(open_channel(lab.address))
    with client.channel:
        return client.run_pod(client.pod_config("cleanup-check", log_dir))


def task_pids(lab: ContainerdInstance) -> list[int]:
    lines = lab.ctr("tasks", "ls").stdout.splitlines()[1:]
    return [int(line.split()[1]) for line in lines]


def test_stop_leaves_nothing_behind(tmp_path: Path, image_tars: dict[str, Path]) -> None:
    inst = ContainerdInstance(tmp_path / "ctd")
    inst.start()
    try:
        images.import_images(inst.address, image_tars)
        pod_id = run_host_network_pod(inst, tmp_path / "logs")
        inst.ctr("run", "-d", "--snapshotter", "overlayfs", images.BUSYBOX_IMAGE, "plain-ctr", "sleep", "3600")
        assert inst.pod_sandbox_ids() == [pod_id]
        pids = task_pids(inst)
        assert len(pids) == 2 and inst.shim_pids() and inst.mounts()
        sockets = [inst.shim_socket("k8s.io", pod_id), inst.shim_socket("k8s.io", "plain-ctr")]
        assert all(s.exists() for s in sockets)
    finally:
        inst.stop()
    assert not inst.running
    assert {("k8s.io", pod_id), ("k8s.io", "plain-ctr")} <= set(inst.removed_containers)
    assert inst.shim_pids() == []
    assert inst.mounts() == []
    assert not any(s.exists() for s in sockets)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}/cmdline") or not Path(f"/proc/{pid}/cmdline").read_bytes(), \
            f"container process {pid} survived stop()"
    assert "lab stop:" not in inst.log_path.read_text()


def test_start_failure_reports_log(tmp_path: Path) -> None:
    inst = ContainerdInstance(tmp_path)
    inst.config_toml = lambda: "version = 2\n[grpc\n"  # type: ignore[method-assign]  # broken on purpose
    with pytest.raises(containerd.ContainerdError, match="containerd log tail"):
        inst.start(timeout=10)
    assert not inst.running
