"""The lab images for dockerd: the OCI archives of `images` converted to `docker load`'s layout.

dockerd 20.10's `docker load` takes the docker-save layout (`manifest.json`, a config JSON and one
uncompressed `layer.tar` per layer), not an OCI layout. The conversion reads the OCI archive's index,
manifest, config and gzip layers and writes them back in that shape; results are cached beside it.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path

from rplab.images import FIXED_MTIME, _write_atomic, build_image_tars


def _blob(oci: tarfile.TarFile, digest: str) -> bytes:
    member = oci.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
    if member is None:
        raise ValueError(f"OCI archive lacks blob {digest}")
    return member.read()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, FIXED_MTIME
    archive.addfile(info, io.BytesIO(data))


def docker_archive(oci_archive: Path, ref: str) -> bytes:
    """A docker-save archive of the single image in `oci_archive`, tagged `ref`."""
    with tarfile.open(oci_archive) as oci:
        index = json.loads(oci.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(_blob(oci, index["manifests"][0]["digest"]))
        config_digest = manifest["config"]["digest"]
        config = _blob(oci, config_digest)
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
        layers = [gzip.decompress(_blob(oci, layer["digest"])) for layer in manifest["layers"]]
    layer_names = [f"{diff_id.split(':', 1)[1]}/layer.tar" for diff_id in diff_ids]
    config_name = f"{config_digest.split(':', 1)[1]}.json"
    entry = {"Config": config_name, "RepoTags": [ref], "Layers": layer_names}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, config_name, config)
        for name, layer in zip(layer_names, layers, strict=True):
            _add(archive, name, layer)
        _add(archive, "manifest.json", json.dumps([entry]).encode())
    return out.getvalue()


def build_docker_archives(cache_dir: Path) -> Mapping[str, Path]:
    """{image ref: docker-save archive} for the lab images, built (or reused) in `cache_dir`."""
    archives = {}
    for ref, oci_archive in build_image_tars(cache_dir).items():
        path = oci_archive.with_name(oci_archive.stem + ".docker.tar")
        if not path.is_file():
            _write_atomic(path, docker_archive(oci_archive, ref))
        archives[ref] = path
    return archives
