"""The lab's offline OCI images: layout validity, contents and determinism (no containerd needed)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import signal
import struct
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from rplab import images

needs_tools = pytest.mark.skipif(
    shutil.which("gcc") is None or images.find_busybox() is None,
    reason="building the lab images needs gcc and busybox (apt-get install -y gcc busybox)",
)


def read_tar(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name.rstrip("/"): m for m in tar.getmembers()}


def read_archive(path: Path) -> dict[str, bytes]:
    """Regular files of an OCI layout archive."""
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def blob(files: dict[str, bytes], digest: str) -> bytes:
    algo, hexdigest = digest.split(":")
    assert algo == "sha256"
    return files[f"blobs/sha256/{hexdigest}"]


def image_parts(path: Path) -> tuple[dict, dict, dict, dict, bytes]:
    """index, manifest, config, index entry and the uncompressed layer of a single-image archive."""
    files = read_archive(path)
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    manifest = json.loads(blob(files, entry["digest"]))
    config = json.loads(blob(files, manifest["config"]["digest"]))
    (layer_desc,) = manifest["layers"]
    layer = gzip.decompress(blob(files, layer_desc["digest"]))
    return index, manifest, config, entry, layer


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return images.build_image_tars(tmp_path_factory.mktemp("image-cache"))


@needs_tools
@pytest.mark.parametrize("ref", images.LAB_IMAGES)
def test_layout_is_valid_oci(tars: dict[str, Path], ref: str) -> None:
    files = read_archive(tars[ref])
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    # Every blob is stored under its own digest.
    for name, data in files.items():
        if name.startswith("blobs/"):
            assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()

    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and index["mediaType"] == images.MEDIA_INDEX
    (entry,) = index["manifests"]
    assert entry["annotations"][images.REF_NAME_ANNOTATION] == ref
    assert entry["platform"] == {"architecture": images.oci_architecture(), "os": "linux"}
    manifest_bytes = blob(files, entry["digest"])
    assert entry["size"] == len(manifest_bytes) and entry["mediaType"] == images.MEDIA_MANIFEST

    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == images.MEDIA_MANIFEST
    config_bytes = blob(files, manifest["config"]["digest"])
    assert manifest["config"]["size"] == len(config_bytes)
    assert manifest["config"]["mediaType"] == images.MEDIA_CONFIG
    (layer_desc,) = manifest["layers"]
    layer_gz = blob(files, layer_desc["digest"])
    assert layer_desc["size"] == len(layer_gz) and layer_desc["mediaType"] == images.MEDIA_LAYER_GZIP

    config = json.loads(config_bytes)
    assert config["architecture"] == images.oci_architecture() and config["os"] == "linux"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [images.sha256_digest(gzip.decompress(layer_gz))]}
    assert any(e.startswith("PATH=") for e in config["config"]["Env"])

    # Nothing unreferenced in blobs/.
    referenced = {entry["digest"], manifest["config"]["digest"], layer_desc["digest"]}
    assert {n for n in files if n.startswith("blobs/")} == {f"blobs/sha256/{d[7:]}" for d in referenced}


@needs_tools
def test_pause_image(tars: dict[str, Path], tmp_path: Path) -> None:
    _, _, config, _, layer = image_parts(tars[images.PAUSE_IMAGE])
    assert config["config"]["Entrypoint"] == ["/pause"]
    members = read_tar(layer)
    assert members["pause"].isfile() and members["pause"].mode == 0o755
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        binary = tar.extractfile("pause").read()
    assert binary[:4] == b"\x7fELF"
    assert not has_interpreter(binary), "pause must be static (no PT_INTERP)"

    # It runs here too: prints its version, and exits 0 on SIGTERM and SIGINT.
    exe = tmp_path / "pause"
    exe.write_bytes(binary)
    exe.chmod(0o755)
    assert subprocess.run([str(exe), "-v"], capture_output=True, text=True, check=True).stdout.startswith(
        "runtimeproxy-lab-pause")
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([str(exe)])
        time.sleep(0.1)
        assert proc.poll() is None
        proc.send_signal(sig)
        assert proc.wait(5) == 0


def has_interpreter(elf: bytes) -> bool:
    """True when a 64-bit little-endian ELF has a PT_INTERP program header (i.e. is dynamically linked)."""
    assert elf[4] == 2 and elf[5] == 1, "expected ELF64 little-endian"
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    return any(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] == 3 for i in range(phnum))


@needs_tools
def test_busybox_image(tars: dict[str, Path]) -> None:
    _, _, config, _, layer = image_parts(tars[images.BUSYBOX_IMAGE])
    assert config["config"]["Cmd"] == ["sh"]
    members = read_tar(layer)
    assert members["bin/busybox"].isfile()
    for applet in ("sh", "ls", "cat", "env", "echo", "sleep", "id", "hostname", "ps", "true", "false", "grep",
                   "head", "wc", "mkdir"):
        member = members[f"bin/{applet}"]
        assert member.islnk() and member.linkname == "bin/busybox", applet
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    for lib in images.shared_libraries(images.find_busybox()):
        assert members[str(lib).lstrip("/")].isfile(), lib
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert tar.extractfile("etc/passwd").read().startswith(b"root:x:0:0:")
        assert tar.extractfile("etc/group").read().startswith(b"root:x:0:")
    # Parents come before children and hard-link targets before links, with fixed owners and mtimes.
    names = list(members)
    for name in names:
        if "/" in name:
            assert names.index(name.rsplit("/", 1)[0]) < names.index(name)
    assert all(m.mtime == images.FIXED_MTIME and m.uid == 0 and m.gid == 0 for m in members.values())


@needs_tools
def test_builds_are_deterministic_and_cached(tars: dict[str, Path], tmp_path: Path) -> None:
    again = images.build_image_tars(tmp_path / "other-cache")
    for ref, path in tars.items():
        assert again[ref].name == path.name
        assert again[ref].read_bytes() == path.read_bytes(), f"{ref} is not reproducible"

    # A second build in the same cache reuses the archives; a missing one is rebuilt.
    stamp = {ref: p.stat().st_mtime_ns for ref, p in again.items()}
    assert images.build_image_tars(tmp_path / "other-cache") == again
    assert {ref: p.stat().st_mtime_ns for ref, p in again.items()} == stamp
    again[images.PAUSE_IMAGE].unlink()
    assert images.build_image_tars(tmp_path / "other-cache")[images.PAUSE_IMAGE].read_bytes() == \
        tars[images.PAUSE_IMAGE].read_bytes()


def test_layer_tar_adds_parents_and_keeps_order() -> None:
    entries = [
        images.FileEntry("tmp", 0o1777, is_dir=True),
        images.FileEntry("a/b/file", 0o644, b"data"),
        images.FileEntry("a/b/link", 0o644, hardlink_to="a/b/file"),
    ]
    layer = images.layer_tar(entries)
    members = read_tar(layer)
    assert list(members) == ["tmp", "a", "a/b", "a/b/file", "a/b/link"]
    assert members["tmp"].mode == 0o1777 and members["a"].mode == 0o755
    assert members["a/b/link"].islnk() and members["a/b/link"].linkname == "a/b/file"
    assert images.layer_tar(entries) == layer
    assert images.gzip_deterministic(layer) == images.gzip_deterministic(layer)
    with pytest.raises(images.ImageBuildError):
        images.layer_tar([images.FileEntry("x", 0o644), images.FileEntry("x", 0o644)])


def test_import_command_uses_full_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(images.subprocess, "run", fake_run)
    images.import_images("/x/containerd.sock", {images.BUSYBOX_IMAGE: tmp_path / "b.tar"})
    assert calls == [["/usr/bin/ctr", "-a", "/x/containerd.sock", "-n", "k8s.io", "images", "import",
                      "--base-name", "localhost/runtimeproxy/busybox", "--snapshotter", "overlayfs",
                      str(tmp_path / "b.tar")]]
