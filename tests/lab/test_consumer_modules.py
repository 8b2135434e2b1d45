"""rplab.consumer_modules: the upstream replace block as a consumer module's go.mod carries it."""

from __future__ import annotations

import dataclasses

from rplab.consumer_modules import MODULES, consumer_go_mod, replace_rules

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

go 1.25.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tgithub.com/x/y => github.com/x/y v1.2.3 // a pin
)
"""
ETCD_GO_MOD = """module go.etcd.io/etcd/server/v3

go 1.24

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/client/v3 => ../client/v3
)

replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""


def test_a_staging_replace_becomes_the_published_module_of_the_release() -> None:
    assert replace_rules(KUBERNETES_GO_MOD, MODULES["kube-apiserver"]) == [
        "\tk8s.io/api => k8s.io/api v0.35.8", "\tgithub.com/x/y => github.com/x/y v1.2.3"]


def test_etcds_sibling_modules_are_taken_at_the_versions_it_requires() -> None:
    etcd = MODULES["etcd"]
    assert replace_rules(ETCD_GO_MOD, etcd) == []
    written = consumer_go_mod(etcd, ETCD_GO_MOD)
    assert "replace" not in written.split("\n", 3)[3] and "its own main over" in written
    assert "go 1.24" in written


def test_a_local_replace_elsewhere_is_refused() -> None:
    strict = dataclasses.replace(MODULES["etcd"], local_siblings_published=False)
    try:
        replace_rules(ETCD_GO_MOD, strict)
    except RuntimeError as error:
        assert "has no published module" in str(error)
    else:
        raise AssertionError("a replace onto ../api was accepted")


def test_kube_apiserver_and_the_kubelet_are_the_same_release_in_modules_of_their_own() -> None:
    apiserver, kubelet = MODULES["kube-apiserver"], MODULES["kubelet"]
    assert (apiserver.upstream, apiserver.version) == (kubelet.upstream, kubelet.version)
    assert apiserver.directory != kubelet.directory
    assert (apiserver.directory / "go.mod").read_text().count("k8s.io/kubernetes/cmd/kube-apiserver") == 2


def test_the_newest_kubelet_is_a_module_of_its_own_with_its_releases_staging_versions() -> None:
    newest = MODULES["kubelet-newest"]
    assert newest.version != MODULES["kubelet"].version
    committed = (newest.directory / "go.mod").read_text()
    assert f"of k8s.io/kubernetes {newest.version} with its own replace block" in committed
    assert f"k8s.io/api => k8s.io/api {newest.staging_version()}" in committed
