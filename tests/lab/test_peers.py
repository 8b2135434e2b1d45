"""rplab.peers: the cache key follows the module's sources (alternate go.mod files too), version stamps come from
go.mod, a peer is built with its alternate go.mod and build tags, every peer's package is in the module or a module
it requires."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rplab import gotoolchain, peers


def test_digest_follows_go_sources_and_module_files(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "a.go").write_text("package main\n")
    first = peers.source_digest(tmp_path)
    assert peers.source_digest(tmp_path) == first
    (tmp_path / "a" / "README").write_text("not a build input\n")
    assert peers.source_digest(tmp_path) == first
    (tmp_path / "a" / "a.go").write_text("package main // changed\n")
    second = peers.source_digest(tmp_path)
    assert second != first
    (tmp_path / "go.mod").write_text("module x\n\nrequire y v1.0.0\n")
    assert peers.source_digest(tmp_path) != second


def test_required_version_reads_go_mod(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n\nrequire (\n\ta.example/b v1.2.3\n\tc.example/d v0.1.0 // indirect\n)\n"
                                      "require e.example/f v2.0.0+incompatible\n")
    assert peers.required_version("a.example/b", tmp_path) == "v1.2.3"
    assert peers.required_version("c.example/d", tmp_path) == "v0.1.0"
    assert peers.required_version("e.example/f", tmp_path) == "v2.0.0+incompatible"
    with pytest.raises(peers.PeerBuildError):
        peers.required_version("a.example", tmp_path)


def test_every_peer_is_a_package_of_the_module_or_a_tool_it_requires() -> None:
    for peer in peers.PEERS.values():
        go_mod = (peer.module / "go.mod").read_text()
        if peer.package == "." or peer.package.startswith("./"):
            assert list((peer.module / peer.package).glob("*.go")), peer
        else:
            assert re.search(rf"^(tool )?\s*{re.escape(peer.package)}$", go_mod, re.M), \
                f"{peer.package}: no tool line in {peer.module}/go.mod keeps it in go.sum"
    assert peers.required_version(peers.CRI_TOOLS_VERSION[0]).startswith("v1.")


def fake_go(directory: Path, version: str) -> Path:
    go = directory / "go"
    go.write_text(f"#!/bin/sh\necho 'go version {version} linux/amd64'\n")
    go.chmod(0o755)
    return go


def test_go_toolchain_takes_a_go_that_switches_toolchains_and_bootstraps_from_an_older_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gotoolchain, "GO_FALLBACKS", (tmp_path / "usr-local-go" / "go",))
    with pytest.raises(gotoolchain.GoToolchainError, match="Go not found.*golang-go"):
        gotoolchain.go_toolchain()
    old = fake_go(tmp_path, "go1.19.8")  # Debian 12's golang-go: downloads the named toolchain once
    bootstrapped: list[Path] = []
    monkeypatch.setattr(gotoolchain, "bootstrapped_toolchain", lambda go: bootstrapped.append(go) or tmp_path / "new")
    assert gotoolchain.go_toolchain() == tmp_path / "new" and bootstrapped == [old]
    go = fake_go(tmp_path, "go1.21.0")
    assert gotoolchain.go_toolchain() == go


def test_fallback_go_when_none_is_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (tmp_path / "local").mkdir()
    monkeypatch.setattr(gotoolchain, "GO_FALLBACKS", (tmp_path / "missing" / "go", fake_go(tmp_path / "local", "go1.26.8")))
    assert gotoolchain.go_toolchain() == tmp_path / "local" / "go"


def test_the_v08_nri_plugin_is_the_same_package_built_with_its_own_go_mod_and_tag() -> None:
    newest, v08 = peers.PEERS["nriplugin-v0.12"], peers.PEERS["nriplugin-v0.8"]
    no_debug = ["-ldflags=-s -w"]
    assert peers.build_arguments(newest, Path("/out")) == ["build", *no_debug, "-o", "/out", "./nriplugin"]
    assert peers.build_arguments(v08, Path("/out")) == ["build", "-modfile=nri-v0.8.mod", "-tags=nri_v08", *no_debug,
                                                  "-o", "/out", "./nriplugin"]
    assert (peers.MODULE / "nri-v0.8.mod").is_file() and (peers.MODULE / "nri-v0.8.sum").is_file()


def test_a_stamped_peer_links_its_stamps_in_one_ldflags_without_debug_information() -> None:
    kubelet, crictl = peers.build_arguments(peers.PEERS["kubelet"], Path("/out")), \
        peers.build_arguments(peers.PEERS["crictl"], Path("/out"))
    for arguments in (kubelet, crictl):
        ldflags = [argument for argument in arguments if argument.startswith("-ldflags=")]
        assert len(ldflags) == 1 and ldflags[0].startswith("-ldflags=-s -w -X "), arguments
    assert "k8s.io/component-base/version.gitVersion=v1.35.8" in " ".join(kubelet)


def test_the_cache_key_changes_with_an_alternate_go_mod(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module m\n")
    (tmp_path / "alt.mod").write_text("module m\n")
    before = peers.source_digest(tmp_path)
    (tmp_path / "alt.mod").write_text("module m\n\nrequire x v1\n")
    assert peers.source_digest(tmp_path) != before


def test_koordinators_two_programs_are_built_with_cgo_and_each_consumer_module_builds_one_program() -> None:
    """koordlet needs cgo; koord-runtime-proxy shares its compiled packages only when built the same way."""
    assert [name for name, peer in peers.PEERS.items() if peers.build_environment(peer)["CGO_ENABLED"] == "1"] == \
        ["koord-runtime-proxy", "koordlet"]
    consumers = [peer.consumer for peer in peers.PEERS.values() if peer.consumer]
    assert len(consumers) == len(set(consumers)), "a program added to a consumer module changes its peers' digests"


def test_one_build_at_a_time_and_a_waiting_caller_takes_the_binary_built(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The test command builds the counterparts in the background while a test may ask for one: it waits."""
    import threading
    import time

    builds: list[str] = []

    def slow_build(peer: peers.Peer, binary: Path) -> None:
        builds.append(peer.name)
        time.sleep(0.3)
        binary.write_text("built")

    monkeypatch.setattr(peers, "_build", slow_build)
    callers = [threading.Thread(target=peers.peer_binary, args=("etcd", tmp_path)) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert builds == ["etcd"] and peers.cached_binary("etcd", tmp_path).read_text() == "built"


def test_setup_builds_all_but_the_counterparts_which_the_test_command_builds() -> None:
    counterparts = {name for name, peer in peers.PEERS.items() if peer.counterpart}
    assert counterparts == {"kubelet", "kubelet-newest", "koord-runtime-proxy", "koordlet", "kube-apiserver", "etcd"}
    test_command = (peers.MODULE.parent / "scripts" / "test.sh").read_text()
    assert "-m rplab.peers --counterparts" in test_command
    assert "-m rplab.peers --counterparts --host-only" in test_command


def test_the_guests_newest_kubelet_is_built_last_and_the_host_suites_do_not_wait_for_it() -> None:
    assert peers.counterparts_in_order() == ["etcd", "koord-runtime-proxy", "koordlet", "kube-apiserver", "kubelet",
                                             "kubelet-newest"]
    assert "kubelet-newest" not in peers.counterparts_in_order(host_only=True)
