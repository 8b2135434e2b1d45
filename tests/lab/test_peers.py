"""rplab.peers: how a peer is built (its alternate go.mod and build tags), what its cache key covers."""

from __future__ import annotations

from pathlib import Path

from rplab.peers import MODULE, PEERS, build_arguments, source_digest


def test_the_v08_nri_plugin_is_the_same_package_built_with_its_own_go_mod_and_tag() -> None:
    newest, v08 = PEERS["nriplugin-v0.12"], PEERS["nriplugin-v0.8"]
    assert build_arguments(newest, Path("/out")) == ["build", "-o", "/out", "./nriplugin"]
    assert build_arguments(v08, Path("/out")) == ["build", "-modfile=nri-v0.8.mod", "-tags=nri_v08", "-o", "/out",
                                                  "./nriplugin"]
    assert (MODULE / "nri-v0.8.mod").is_file() and (MODULE / "nri-v0.8.sum").is_file()


def test_the_cache_key_changes_with_an_alternate_go_mod(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module m\n")
    (tmp_path / "alt.mod").write_text("module m\n")
    before = source_digest(tmp_path)
    (tmp_path / "alt.mod").write_text("module m\n\nrequire x v1\n")
    assert source_digest(tmp_path) != before
