"""critest's offline image set: every reference it pulls, one shared base layer, what the specs look for."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from rplab import conformance_images as ci
from rplab.images import PAUSE_CONFIG, compile_pause, find_busybox, image_blobs, layer_tar, pause_entries

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or find_busybox() is None or shutil.which("pgrep") is None,
    reason="building the conformance images needs gcc, busybox, util-linux and procps",
)

# What critest v1.37 pulls (pkg/validate consts), by full reference.
CRITEST_REFS = {
    "registry.k8s.io/e2e-test-images/busybox:1.29-2", "registry.k8s.io/e2e-test-images/nginx:1.14-2",
    "registry.k8s.io/e2e-test-images/httpd:2.4.39-4", "registry.k8s.io/e2e-test-images/nonewprivs:1.3",
    "docker.io/library/busybox:latest", ci.HOSTNET_NGINX_REF,
    *(ci.CRI_TOOLS + name for name in (
        "test-image-latest:latest", "test-image-digest:latest", "test-image-tag:test", "test-image-tag:all",
        "test-image-1:latest", "test-image-2:latest", "test-image-3:latest", "test-image-tags:1", "test-image-tags:2",
        "test-image-tags:3", "test-image-user-uid:latest", "test-image-user-username:latest",
        "test-image-user-uid-group:latest", "test-image-user-username-group:latest",
        "test-image-predefined-group:latest")),
    "registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9",
}


@pytest.fixture(scope="module")
def built() -> dict[str, ci.ConformanceImage]:
    return {ref: image for image in ci.build_conformance_images() for ref in image.refs}


def layer_members(blob: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return {m.name.rstrip("/"): m for m in tar.getmembers()}


def image_config(image: ci.ConformanceImage) -> dict[str, object]:
    return json.loads(image.blobs.config)["config"]


def test_every_reference_critest_pulls_is_built(built: dict[str, ci.ConformanceImage]) -> None:
    assert set(built) == CRITEST_REFS
    assert {ci.split_ref(ref)[0] for ref in built} == set(ci.UPSTREAM_HOSTS)


def test_images_share_one_base_layer(built: dict[str, ci.ConformanceImage]) -> None:
    bases = {image.blobs.layers[0] for ref, image in built.items() if ref not in ci.PAUSE_REFS}
    assert len(bases) == 1
    base = layer_members(bases.pop())
    for program in ("bin/sh", "bin/ls", "bin/httpd", "bin/pidof", "usr/bin/ipcs", "usr/bin/pgrep"):
        assert program in base
    assert base["bin/ls"].islnk()  # hard links: a masked symlink would mask busybox itself


def test_pause_is_one_image_of_two_registries(built: dict[str, ci.ConformanceImage]) -> None:
    first, second = (built[ref] for ref in ci.PAUSE_REFS)
    assert first is second and image_config(first)["Entrypoint"] == ["/pause"]
    with tempfile.TemporaryDirectory() as tmp:  # another image than the sandbox's: removing it by ID leaves that
        sandbox = image_blobs([layer_tar(pause_entries(compile_pause(Path(tmp))))], PAUSE_CONFIG)
    assert sandbox.digest != first.blobs.digest


def test_tags_of_one_image_share_it_and_test_images_differ(built: dict[str, ci.ConformanceImage]) -> None:
    tags = {built[ci.CRI_TOOLS + f"test-image-tags:{n}"].blobs.digest for n in (1, 2, 3)}
    assert len(tags) == 1
    different = {built[ci.CRI_TOOLS + f"test-image-{n}:latest"].blobs.digest for n in (1, 2, 3)}
    assert len(different) == 3


@pytest.mark.parametrize(("name", "user"), [("test-image-user-uid", "1002"), ("test-image-user-username", "www-data"),
                                            ("test-image-user-uid-group", "1003:1004"),
                                            ("test-image-user-username-group", "www-data:1004"),
                                            ("test-image-predefined-group", "1000")])
def test_image_users(built: dict[str, ci.ConformanceImage], name: str, user: str) -> None:
    assert image_config(built[ci.CRI_TOOLS + name + ":latest"])["User"] == user


def test_special_images(built: dict[str, ci.ConformanceImage]) -> None:
    nnp = layer_members(built[ci.NONEWPRIVS_REF].blobs.layers[1])["usr/local/bin/nnp"]
    assert nnp.mode & 0o4000 and nnp.uid == 0  # setuid root
    nginx = layer_members(built[ci.NGINX_REF].blobs.layers[1])
    assert "usr/sbin/nginx" in nginx and "usr/share/nginx/html/index.html" in nginx
    assert image_config(built[ci.NGINX_REF])["Cmd"][0] == "nginx"
    group = layer_members(built[ci.PREDEFINED_GROUP_REF].blobs.layers[1])["etc/group"]
    assert group.size > 0
    assert image_config(built[ci.HTTPD_REF])["Cmd"] == ["httpd-foreground"]


def test_split_ref() -> None:
    assert ci.split_ref("gcr.io/k8s-staging-cri-tools/test-image-tags:2") == (
        "gcr.io", "k8s-staging-cri-tools/test-image-tags", "2")
