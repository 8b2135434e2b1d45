"""The local registry: config, containerd mirror files, and a push read back over the registry API."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from rplab.images import MEDIA_MANIFEST, FileEntry, image_blobs, layer_tar
from rplab.registry import LocalRegistry, registry_config, write_mirror_config


def test_mirror_config_names_the_registry_as_server_and_host(tmp_path: Path) -> None:
    write_mirror_config(tmp_path, ["registry.k8s.io", "docker.io"], "http://127.0.0.1:5999")
    text = (tmp_path / "docker.io" / "hosts.toml").read_text()
    assert 'server = "http://127.0.0.1:5999"' in text  # without it a miss would go to the internet
    assert '[host."http://127.0.0.1:5999"]' in text
    assert (tmp_path / "registry.k8s.io" / "hosts.toml").read_text() == text


def test_registry_config_is_private(tmp_path: Path) -> None:
    config = json.loads(registry_config(tmp_path / "storage", 5999))
    assert config["http"]["addr"] == "127.0.0.1:5999"
    assert config["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "storage")
    assert "auth" not in config


@pytest.mark.skipif(shutil.which("docker-registry") is None, reason="apt-get install -y docker-registry")
def test_push_then_pull_manifest_and_blobs(tmp_path: Path) -> None:
    image = image_blobs([layer_tar([FileEntry("hello", 0o644, b"hi\n")])], {"Cmd": ["sh"]})
    with LocalRegistry(tmp_path) as registry:
        registry.push("lab/hello", ["1", "2"], image)
        registry.push("lab/hello", ["1"], image)  # blobs already there: skipped, manifest rewritten
        request = urllib.request.Request(f"{registry.url}/v2/lab/hello/manifests/2",
                                         headers={"Accept": MEDIA_MANIFEST})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.read() == image.manifest
        digest = json.loads(image.manifest)["layers"][0]["digest"]
        with urllib.request.urlopen(f"{registry.url}/v2/lab/hello/blobs/{digest}", timeout=10) as response:
            assert response.read() == image.layers[0]
