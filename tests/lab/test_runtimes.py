"""The runtime matrix's table, selection, private apt configuration and per-version containerd config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rplab import runtimes
from rplab.containerd import ContainerdInstance
from rplab.runtimes import RUNTIMES, PrivateApt, newest, runtime_named, selected


def test_every_runtime_is_named_after_its_kind_and_version() -> None:
    for name, runtime in RUNTIMES.items():
        assert name.startswith(f"{runtime.kind}-") and runtime.version.startswith(name.split("-", 1)[1])
    assert {runtime.kind for runtime in RUNTIMES.values() if runtime.system} == {"containerd", "dockerd"}


def test_newest_is_the_highest_version_of_its_kind() -> None:
    assert newest("containerd").major >= 2 and newest("dockerd").name == "dockerd-28"


def test_the_environment_selects_and_defaults_to_the_machine_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtimes.CONTAINERD_ENV, raising=False)
    monkeypatch.setenv(runtimes.DOCKERD_ENV, "dockerd-26")
    assert selected("containerd").system and selected("dockerd").name == "dockerd-26"
    monkeypatch.setenv(runtimes.CONTAINERD_ENV, "dockerd-26")
    with pytest.raises(KeyError, match="unknown containerd"):
        selected("containerd")
    with pytest.raises(KeyError):
        runtime_named("containerd-9.9")


def test_a_fetched_runtime_s_binaries_come_first_on_its_path(tmp_path: Path) -> None:
    runtime = RUNTIMES["containerd-2.1"]
    (runtime.packages[0].unpacked(tmp_path) / "usr/bin").mkdir(parents=True)
    assert runtime.fetched(tmp_path)
    assert runtime.environment(tmp_path)["PATH"].startswith(f"{runtime.packages[0].unpacked(tmp_path)}/usr/bin:")


def test_private_apt_reads_no_source_or_list_of_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtimes.MIRROR_ENV, "http://mirror.invalid/debian")
    apt = PrivateApt(tmp_path)
    apt.prepare()
    options = dict(arg.split("=", 1) for arg in apt.options() if arg != "-o")
    for key in ("Dir::Etc::sourcelist", "Dir::Etc::sourceparts", "Dir::State::Lists", "Dir::Cache",
                "Dir::Etc::preferences", "Dir::Etc::preferencesparts"):
        assert options[key].startswith(str(tmp_path)), key
    assert (tmp_path / "sources.list").read_text().splitlines() == [
        f"deb [signed-by={runtimes.DEBIAN_KEYRING}] http://mirror.invalid/debian {suite} main"
        for suite in runtimes.DEBIAN_SUITES]


@pytest.mark.parametrize("name", ["containerd-1.6", "containerd-1.7", "containerd-2.1"])
def test_every_containerd_config_keeps_containerd_s_own_nri_off_and_private(name: str, tmp_path: Path) -> None:
    instance = ContainerdInstance(tmp_path, runtime=RUNTIMES[name], registry_config_path=tmp_path / "certs.d")
    config = tomllib.loads(instance.config_toml())
    assert config["version"] == (3 if RUNTIMES[name].major >= 2 else 2)
    nri = config["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is True and nri["socket_path"] == str(tmp_path / "nri.sock")
    assert all(nri[key].startswith(f"{tmp_path}/") for key in ("plugin_path", "plugin_config_path"))
    cri = config["plugins"]["io.containerd.cri.v1.runtime" if config["version"] == 3 else "io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
