"""NRI plugins launched by the proxy from a plugin directory (nri.launch, nri.host): discovery as NRI does it
(NN-name executables, NN-name.conf then name.conf), the trust rule of hook plugins, and a real launched
process (tests/nri/launched_plugin.py) that gets fd 3 and NRI's environment, registers, is configured with
its file's config, adjusts a container, and is stopped with the host."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.runtime import PluginAsks
from runtimeproxy.hooks.store import Store
from runtimeproxy.nri.host import NriHost
from runtimeproxy.nri.launch import discover, parse_file_name
from runtimeproxy.trust import TrustedOwners

from tests.kits.launched_plugin import plugin_file

ROOT_ONLY = TrustedOwners(frozenset({0}))


@pytest.fixture
def base() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nri-launch-") as directory:
        path = Path(directory)
        path.chmod(0o755)
        (path / "plugins").mkdir(mode=0o755)
        (path / "conf.d").mkdir(mode=0o755)
        yield path


def executable(path: Path, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(("name", "parsed"), [
    ("10-resource-policy", ("10", "resource-policy")), ("00-a", ("00", "a")),
    ("1-short", None), ("abc", None), ("10-", None), ("100-x", None),
])
def test_plugin_file_names_are_nns_index_and_name(name: str, parsed: tuple[str, str] | None) -> None:
    assert parse_file_name(name) == parsed


def test_discovery_takes_executables_in_order_with_their_config(base: Path) -> None:
    plugins, configs = base / "plugins", base / "conf.d"
    executable(plugins / "20-second")
    executable(plugins / "10-first")
    executable(plugins / "30-not-executable", mode=0o644)
    executable(plugins / "bad-name")
    (plugins / "40-directory").mkdir()
    (configs / "10-first.conf").write_text("by index and name")
    (configs / "first.conf").write_text("by name: second choice")
    (configs / "second.conf").write_text("by name")
    found = discover(plugins, configs, TrustedOwners.with_extra())
    assert [(p.plugin_id, p.config) for p in found] == [("10-first", "by index and name"), ("20-second", "by name")]


def test_discovery_skips_what_an_untrusted_user_could_have_changed(base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make files owned by another user")
    plugins, configs = base / "plugins", base / "conf.d"
    os.chown(executable(plugins / "10-foreign"), 1234, 1234)
    executable(plugins / "20-group-writable", mode=0o775)
    executable(plugins / "30-untrusted-config")
    config = configs / "untrusted-config.conf"
    config.write_text("x")
    os.chown(config, 1234, 0)
    executable(plugins / "40-fine")
    assert [p.plugin_id for p in discover(plugins, configs, ROOT_ONLY)] == ["40-fine"]
    plugins.chmod(0o777)  # anyone could swap the files
    assert discover(plugins, configs, ROOT_ONLY) == []


def test_a_missing_plugin_directory_launches_nothing(base: Path) -> None:
    assert discover(base / "missing", None, ROOT_ONLY) == []


def test_a_plugin_path_that_is_a_file_launches_nothing_and_names_the_flag(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not the host's start failing with "--nri-socket ...: [Errno 20]" (the flag it did not come from)."""
    a_file = base / "10-plugin"
    a_file.write_text("")
    assert discover(a_file, None, ROOT_ONLY) == []
    assert caplog.messages == [f"NRI: launching no plugin: --nri-plugin-path {a_file}: Not a directory; give it a "
                               "directory of NRI plugins (--nri-plugin-path= for none)"]


def test_a_launched_plugin_gets_nris_environment_and_config_adjusts_and_stops_with_the_host(base: Path) -> None:
    plugin_file(base / "plugins" / "10-launched")
    record = base / "record.jsonl"
    (base / "conf.d" / "launched.conf").write_text(json.dumps({"env": {"LAUNCHED": "yes"}, "record": str(record)}))

    async def scenario() -> None:
        host = NriHost(base / "nri.sock", PluginAsks(Store()), plugin_dir=base / "plugins",
                       plugin_config_dir=base / "conf.d")
        await host.start()
        try:
            while not host.plugins:
                await asyncio.sleep(0.02)
            (session,) = host.plugins
            assert session.plugin_id == "10-launched"
            subject = Subject("pod-1", PodRecord(), "", ContainerRecord("pod-1"))
            adjusted = await host.adjust(nri_events.CREATE_CONTAINER, subject, None)
            assert adjusted.request.container_envs["LAUNCHED"] == "yes"
            (process,) = host.launched
        finally:
            await host.stop()
        assert not process.running and process.returncode == 0  # left on Shutdown, not killed

    asyncio.run(asyncio.wait_for(scenario(), 30))
    configured, finished = [json.loads(line) for line in record.read_text().splitlines()]
    environ = dict(configured["environ"])
    environ.pop("LC_CTYPE", None)  # Python's own C-locale coercion
    assert environ == {"NRI_PLUGIN_NAME": "launched", "NRI_PLUGIN_IDX": "10", "NRI_PLUGIN_SOCKET": "3"}  # only
    assert (configured["name"], configured["index"], configured["runtime"]) == ("launched", "10", "runtimeproxy")
    assert json.loads(configured["configured"])["env"] == {"LAUNCHED": "yes"}
    assert finished["events"] == ["Configure", "Synchronize", "CreateContainer", "ValidateContainerAdjustment", "Shutdown"]


def test_a_launched_plugin_that_forks_and_exits_takes_its_connection_and_its_child_with_it(base: Path) -> None:
    """Its process group is killed and its connection closed when it exits (before: logged as exited while its
    child kept the connection and stayed attached)."""
    plugin_file(base / "plugins" / "10-forking", forks=True)

    async def scenario() -> None:
        host = NriHost(base / "nri.sock", PluginAsks(Store()), plugin_dir=base / "plugins",
                       plugin_config_dir=base / "conf.d")
        await host.start()
        try:
            (process,) = host.launched
            while not host.plugins:  # its child registered and attached
                await asyncio.sleep(0.02)
            assert process.running and _group(process.pid) - {process.pid}
            while process.running:
                await asyncio.sleep(0.02)
            deadline = asyncio.get_running_loop().time() + 5
            while host.plugins or _group(process.pid):
                assert asyncio.get_running_loop().time() < deadline, (host.plugins, _group(process.pid))
                await asyncio.sleep(0.02)
        finally:
            await host.stop()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def _group(pgid: int) -> set[int]:
    """The live (not zombie) processes of a process group."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.add(int(entry.name))
    return members
