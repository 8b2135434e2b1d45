"""The registry of plugins (runtimeproxy.hooks.registry): watching (inotify, hooks.dirwatch) or polling the directory, trusted reading of its files
(hooks.trusted_files), one plugin's channel (hooks.plugin)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.kits.config import KNOWN_HOOKS, KOORDLET, LOGGER, config_bytes, messages
from runtimeproxy.hooks import dirwatch, trusted_files
from runtimeproxy.hooks import registry as registry_module
from rplab.loop import LoopThread
from runtimeproxy.hooks.config import FailurePolicy, PluginConfigError, parse_plugin_config
from runtimeproxy.hooks.plugin import Plugin, PluginChannel
from runtimeproxy.hooks.registry import PluginRegistry
from runtimeproxy.hooks.trusted_files import MAX_CONFIG_BYTES, file_signature

T = TypeVar("T")

# --- registry --------------------------------------------------------------------------


async def _call(function: Callable[[], T]) -> T:
    return function()


async def _settled_closed(channel: PluginChannel) -> bool:
    await asyncio.sleep(0.02)
    return channel.closed


class Harness:
    """A registry driven from the test thread; everything touching it runs on the loop thread."""

    def __init__(self, loop_thread: LoopThread, config_dir: Path, poll_interval: float = 0.5) -> None:
        self.loop = loop_thread
        self.dir = config_dir
        self.registry = PluginRegistry(config_dir, poll_interval=poll_interval)

    def on_loop(self, function: Callable[[], T]) -> T:
        return self.loop.run(_call(function))

    def refresh(self) -> bool:
        return self.on_loop(self.registry.refresh)

    def write(self, name: str, data: bytes) -> None:
        self.dir.mkdir(exist_ok=True)
        (self.dir / name).write_bytes(data)

    def registered(self, name: str, data: bytes) -> Plugin:
        """Write a good config, scan, and return the plugin it registered."""
        self.write(name, data)
        self.refresh()
        return self.plugin(name)

    def names(self, hook: str | None = None) -> list[str]:
        plugins = self.registry.plugins if hook is None else self.registry.plugins_for(hook)
        return [plugin.name for plugin in plugins]

    def plugin(self, name: str) -> Plugin:
        return next(plugin for plugin in self.registry.plugins if plugin.name == name)

    def is_shut_down(self, channel: PluginChannel) -> bool:
        """Whether the channel is closed, once pending channel closes had a moment to run."""
        return self.loop.run(_settled_closed(channel))


@pytest.fixture
def harness(
    loop_thread: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[Harness]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    harness = Harness(loop_thread, tmp_path / "hookserver.d")
    harness.dir.mkdir()
    yield harness
    loop_thread.run(harness.registry.close())


def test_a_scan_that_finishes_after_a_newer_one_changes_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll that read the directory before a file appeared, but finished after a scan that saw it, must not
    unregister it (seen: a Fail plugin skipped for one poll interval on a loaded machine)."""
    slow_scan_started, slow_scan_may_finish = threading.Event(), threading.Event()
    real_scan = harness.registry._scan
    stale_listing = real_scan()  # the directory as the slow scan saw it: empty

    def slow_scan():  # type: ignore[no-untyped-def]
        slow_scan_started.set()
        slow_scan_may_finish.wait(10)
        return stale_listing

    monkeypatch.setattr(harness.registry, "_scan", slow_scan)
    stale = asyncio.run_coroutine_threadsafe(harness.registry.reload(), harness.loop.loop)
    assert slow_scan_started.wait(10)
    monkeypatch.setattr(harness.registry, "_scan", real_scan)
    harness.write("koordlet.json", KOORDLET)
    assert harness.refresh() is True
    slow_scan_may_finish.set()
    assert stale.result(10) is False
    assert harness.names("PreRunPodSandbox") == ["koordlet.json"]


def test_added_changed_and_deleted_files_are_picked_up(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    assert harness.refresh() is False
    assert harness.registry.plugins == ()

    harness.write("koordlet.json", KOORDLET)
    assert harness.refresh() is True
    assert harness.names("PreRunPodSandbox") == ["koordlet.json"]
    assert harness.names("PreCreateContainer") == []
    assert harness.refresh() is False

    harness.write("koordlet.json", config_bytes(
        remote_endpoint="unix:///var/run/koordlet/koordlet.sock", failure_policy="Fail",
        runtime_hooks=["PreRunPodSandbox", "PreCreateContainer"], timeout_seconds=2.5))
    assert harness.refresh() is True
    plugin = harness.plugin("koordlet.json")
    assert plugin.failure_policy is FailurePolicy.FAIL and plugin.timeout_seconds == 2.5
    assert harness.names("PreCreateContainer") == ["koordlet.json"]

    (harness.dir / "koordlet.json").unlink()
    assert harness.refresh() is True
    assert harness.registry.plugins == () and harness.names("PreRunPodSandbox") == []

    not_serving = ("plugin koordlet.json: socket /var/run/koordlet/koordlet.sock does not exist: nothing serves it "
                   "(not started yet?); every call fails until the plugin serves it")
    assert messages(caplog) == [
        "plugin koordlet.json registered: endpoint unix:///var/run/koordlet/koordlet.sock, "
        "policy Ignore, hooks PreRunPodSandbox, timeout 5s",
        not_serving,
        "plugin koordlet.json changed: endpoint unix:///var/run/koordlet/koordlet.sock, policy Fail, "
        "hooks PreRunPodSandbox,PreCreateContainer, timeout 2.5s",
        not_serving,
        "plugin koordlet.json removed",
    ]


def test_an_in_place_rewrite_of_the_same_size_is_picked_up(harness: Harness) -> None:
    # Both writes land within one timestamp tick: (inode, size, mtime) need not change.
    harness.write("p.json", config_bytes(timeout_seconds=1))
    assert harness.refresh() is True
    harness.write("p.json", config_bytes(timeout_seconds=2))
    assert harness.refresh() is True
    assert harness.plugin("p.json").timeout_seconds == 2


def test_recently_modified_files_are_reread_until_they_settle(tmp_path: Path) -> None:
    # Coarse timestamps let a rewrite keep (inode, size, mtime); such files are not trusted yet.
    path = tmp_path / "p.json"
    path.write_bytes(b"{}")
    now = time.time_ns()
    os.utime(path, ns=(now, now))
    assert file_signature(os.stat(path)) is None
    os.utime(path, ns=(now, now - 3 * 10**9))
    assert file_signature(os.stat(path)) is not None


def test_touching_a_file_without_changing_it_logs_nothing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.write("p.json", config_bytes())
    harness.refresh()
    caplog.clear()
    os.utime(harness.dir / "p.json", ns=(0, 10**18))
    assert harness.refresh() is False
    assert messages(caplog) == []


def test_a_rename_moves_the_plugin_in_the_order(harness: Harness) -> None:
    harness.write("b.json", config_bytes(remote_endpoint="/run/b.sock"))
    harness.write("c.json", config_bytes(remote_endpoint="/run/c.sock"))
    harness.refresh()
    channel = harness.plugin("c.json").channel
    os.rename(harness.dir / "c.json", harness.dir / "a.json")
    assert harness.refresh() is True
    assert harness.names() == ["a.json", "b.json"]
    assert harness.plugin("a.json").channel is channel  # the endpoint did not change
    assert not harness.is_shut_down(channel)


def test_a_broken_edit_keeps_the_last_good_version_and_warns_once(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    good = harness.registered("koordlet.json", KOORDLET)
    caplog.clear()

    harness.write("koordlet.json", config_bytes(runtime_hooks=["PreFoo"]))
    for _ in range(4):
        assert harness.refresh() is False
    os.utime(harness.dir / "koordlet.json", ns=(0, 10**18))  # touched, still broken
    assert harness.refresh() is False
    assert harness.registry.plugins == (good,)
    assert messages(caplog) == [
        f'invalid plugin config koordlet.json: runtime-hooks: unknown hook "PreFoo" (known: {KNOWN_HOOKS}); '
        "its last good version stays in force"
    ]

    harness.write("koordlet.json", KOORDLET[:30])  # a different breakage: one more line
    harness.refresh()
    harness.refresh()
    assert len(messages(caplog, logging.WARNING)) == 2
    assert "koordlet.json: invalid JSON" in messages(caplog)[-1]

    caplog.clear()
    harness.write("koordlet.json", KOORDLET)  # fixed, back to the same content
    assert harness.refresh() is False
    assert harness.registry.plugins == (good,)
    assert messages(caplog) == [
        "plugin koordlet.json is valid again (unchanged): "
        "endpoint unix:///var/run/koordlet/koordlet.sock, policy Ignore, hooks PreRunPodSandbox, timeout 5s"
    ]

    harness.write("koordlet.json", b"")
    harness.refresh()
    harness.write("koordlet.json", config_bytes(failure_policy="Fail"))  # fixed, a new version
    assert harness.refresh() is True
    assert harness.plugin("koordlet.json").failure_policy is FailurePolicy.FAIL


def test_a_broken_new_file_is_not_registered(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.write("new.json", b'{"remote-endpoint": "/run/k.sock", ')
    assert harness.refresh() is False
    assert harness.refresh() is False
    assert harness.registry.plugins == ()
    assert messages(caplog) == [
        "invalid plugin config new.json: invalid JSON: unexpected end of data at line 1 column 36 "
        "(truncated?); not registered"
    ]
    (harness.dir / "new.json").unlink()
    assert harness.refresh() is False
    assert len(messages(caplog)) == 1


def test_plugins_for_a_hook_follow_bytewise_file_name_order(harness: Harness) -> None:
    for name in ["b.json", "a.json", "B.json", "9.json", "10.json"]:
        harness.write(name, config_bytes(remote_endpoint=f"/run/{name}.sock"))
    harness.write("only-create.json", config_bytes(runtime_hooks=["PreCreateContainer"]))
    harness.refresh()
    assert harness.names("PreRunPodSandbox") == ["10.json", "9.json", "B.json", "a.json", "b.json"]
    assert harness.names("PreCreateContainer") == ["only-create.json"]
    assert harness.names() == ["10.json", "9.json", "B.json", "a.json", "b.json", "only-create.json"]
    assert harness.registry.plugins_for("NoSuchHook") == ()


def test_only_visible_json_files_count(harness: Harness) -> None:
    harness.write(".hidden.json", config_bytes())
    harness.write("koordlet.json.bak", config_bytes())
    harness.write("koordlet.yaml", config_bytes())
    (harness.dir / "subdir.json").mkdir()
    (harness.dir / "dangling.json").symlink_to(harness.dir / "missing")
    harness.write("real.json", config_bytes())
    (harness.dir / "link.json").symlink_to(harness.dir / "real.json")
    harness.refresh()
    assert harness.names() == ["link.json", "real.json"]


def test_channels_are_shared_per_endpoint_and_closed_when_unused(harness: Harness) -> None:
    harness.write("a.json", config_bytes(remote_endpoint="/run/shared.sock"))
    harness.write("b.json", config_bytes(remote_endpoint="unix:///run/shared.sock", timeout_seconds=9))
    harness.write("c.json", config_bytes(remote_endpoint="/run/other.sock"))
    harness.refresh()
    shared = harness.plugin("a.json").channel
    other = harness.plugin("c.json").channel
    assert harness.plugin("b.json").channel is shared and other is not shared

    harness.write("b.json", config_bytes(remote_endpoint="/run/shared.sock", timeout_seconds=1))
    (harness.dir / "a.json").unlink()
    assert harness.refresh() is True
    assert harness.plugin("b.json").channel is shared  # kept across a change that keeps the endpoint

    harness.write("c.json", config_bytes(remote_endpoint="/run/moved.sock"))
    harness.refresh()
    assert harness.plugin("c.json").channel is not other
    assert harness.is_shut_down(other)

    (harness.dir / "b.json").unlink()
    harness.refresh()
    assert harness.is_shut_down(shared)
    assert not harness.is_shut_down(harness.plugin("c.json").channel)


def test_registering_opens_no_connection(harness: Harness) -> None:
    harness.write("a.json", config_bytes())
    harness.refresh()
    assert not harness.plugin("a.json").channel.is_open  # connected by the first call only


def test_close_unregisters_everything_and_closes_the_channels(harness: Harness) -> None:
    harness.write("a.json", config_bytes())
    harness.refresh()
    channel = harness.plugin("a.json").channel
    harness.loop.run(harness.registry.close())
    assert harness.registry.plugins == () and harness.names("PreRunPodSandbox") == []
    assert channel.closed
    assert harness.refresh() is False


def test_a_missing_directory_means_no_plugins_until_it_appears(
    loop_thread: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    harness = Harness(loop_thread, tmp_path / "hookserver.d")
    try:
        for _ in range(3):
            assert harness.refresh() is False
        assert messages(caplog) == [
            f"plugin config directory {harness.dir} does not exist; no plugins until it does"
        ]
        harness.write("koordlet.json", KOORDLET)
        assert harness.refresh() is True
        assert harness.names() == ["koordlet.json"]
        assert messages(caplog)[1:3] == [
            f"plugin config directory {harness.dir} exists now",
            "plugin koordlet.json registered: endpoint unix:///var/run/koordlet/koordlet.sock, "
            "policy Ignore, hooks PreRunPodSandbox, timeout 5s",
        ]
        caplog.clear()
        channel = harness.plugin("koordlet.json").channel

        shutil.rmtree(harness.dir)
        assert harness.refresh() is True
        assert harness.registry.plugins == ()
        assert harness.is_shut_down(channel)
        harness.refresh()
        assert messages(caplog, logging.WARNING) == [
            f"plugin config directory {harness.dir} does not exist; no plugins until it does"
        ]
    finally:
        loop_thread.run(harness.registry.close())


def test_a_path_that_is_not_a_directory_means_no_plugins(harness: Harness) -> None:
    harness.write("a.json", config_bytes())
    harness.refresh()
    harness.registry.config_dir = harness.dir / "a.json"
    assert harness.refresh() is True
    assert harness.registry.plugins == ()


def test_an_unreadable_directory_keeps_the_plugins(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.write("a.json", config_bytes())
    harness.refresh()
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == harness.dir:
            raise PermissionError(13, "Permission denied")  # cannot be provoked by chmod as root
        return real_scandir(path)

    caplog.clear()
    monkeypatch.setattr(os, "scandir", scandir)
    assert harness.refresh() is False
    assert harness.refresh() is False
    assert harness.names() == ["a.json"]
    monkeypatch.undo()
    (harness.dir / "a.json").unlink()
    assert harness.refresh() is True
    assert messages(caplog) == [
        f"plugin config directory {harness.dir} is unreadable (Permission denied); "
        "keeping the registered plugins",
        f"plugin config directory {harness.dir} is readable again",
        "plugin a.json removed",
    ]


def _start(registry: PluginRegistry) -> Callable[[], asyncio.Task[None]]:
    return lambda: asyncio.get_running_loop().create_task(registry.run())


def _wait_for(predicate: Callable[[], bool], timeout: float) -> float:
    """Seconds until predicate() held; fails after timeout."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.01)
    return time.monotonic() - start


def test_run_picks_up_changes_within_a_second(harness: Harness) -> None:
    task = harness.on_loop(_start(harness.registry))
    try:
        time.sleep(0.05)  # let the first scan happen
        harness.write("koordlet.json", KOORDLET)
        assert _wait_for(lambda: harness.names() == ["koordlet.json"], timeout=1.5) < 1.0
        (harness.dir / "koordlet.json").unlink()
        assert _wait_for(lambda: harness.names() == [], timeout=1.5) < 1.0
    finally:
        harness.on_loop(task.cancel)


WITHOUT_POLLING = 3600.0  # a poll interval no test outlives: a change seen came through inotify


def test_run_sees_changes_through_inotify_without_polling(harness: Harness) -> None:
    harness.registry.poll_interval = WITHOUT_POLLING
    task = harness.on_loop(_start(harness.registry))
    try:
        harness.write("koordlet.json", KOORDLET)  # before or after the watch starts: both are seen
        _wait_for(lambda: harness.names() == ["koordlet.json"], timeout=10)
        (harness.dir / "koordlet.json").rename(harness.dir / "moved.json")
        _wait_for(lambda: harness.names() == ["moved.json"], timeout=10)
        (harness.dir / "moved.json").unlink()
        _wait_for(lambda: harness.names() == [], timeout=10)
    finally:
        harness.on_loop(task.cancel)


def test_run_sees_an_edit_through_a_link_to_a_file_elsewhere(harness: Harness) -> None:
    target = harness.dir.parent / "elsewhere.json"
    target.write_bytes(config_bytes(remote_endpoint="/run/old.sock"))
    (harness.dir / "link.json").symlink_to(target)
    harness.registry.poll_interval = WITHOUT_POLLING
    task = harness.on_loop(_start(harness.registry))
    try:
        _wait_for(lambda: harness.names() == ["link.json"], timeout=10)
        target.write_bytes(config_bytes(remote_endpoint="/run/new.sock"))
        _wait_for(lambda: str(harness.plugin("link.json").config.endpoint) == "/run/new.sock", timeout=10)
    finally:
        harness.on_loop(task.cancel)


def test_run_watches_a_directory_made_after_it_started(loop_thread: LoopThread, tmp_path: Path) -> None:
    harness = Harness(loop_thread, tmp_path / "later.d", poll_interval=0.01)
    task = harness.on_loop(_start(harness.registry))
    try:
        harness.write("a.json", config_bytes())
        _wait_for(lambda: harness.names() == ["a.json"], timeout=10)
        harness.registry.poll_interval = WITHOUT_POLLING  # from now on only the watch can see a change
        harness.write("b.json", config_bytes())
        _wait_for(lambda: harness.names() == ["a.json", "b.json"], timeout=10)
    finally:
        harness.on_loop(task.cancel)
        loop_thread.run(harness.registry.close())


def test_run_polls_where_there_is_no_watch_and_says_so_once(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_watch(directory: str) -> None:
        raise dirwatch.WatchUnavailable(errno.ENOSPC, "inotify_init1: the inotify watch limit is reached")

    monkeypatch.setattr(registry_module, "DirectoryWatch", no_watch)
    harness.registry.poll_interval = 0.01
    task = harness.on_loop(_start(harness.registry))
    try:
        harness.write("a.json", config_bytes())
        _wait_for(lambda: harness.names() == ["a.json"], timeout=10)
        (harness.dir / "a.json").unlink()
        _wait_for(lambda: harness.names() == [], timeout=10)
    finally:
        harness.on_loop(task.cancel)
    assert [line for line in messages(caplog, logging.WARNING) if "cannot watch" in line] == [
        f"cannot watch plugin config directory {harness.dir} (inotify_init1: the inotify watch limit is reached); "
        "polling it every 0.01s instead"
    ]


def test_run_survives_unexpected_errors_and_logs_them_once(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.registry.poll_interval = 0.01
    calls = 0
    real_reload = harness.registry.reload

    async def flaky_reload() -> bool:
        nonlocal calls
        calls += 1
        if calls <= 5:
            raise RuntimeError("disk on fire")
        return await real_reload()

    monkeypatch.setattr(harness.registry, "reload", flaky_reload)
    harness.write("a.json", config_bytes())
    task = harness.on_loop(_start(harness.registry))
    try:
        _wait_for(lambda: harness.names() == ["a.json"], timeout=2)
    finally:
        harness.on_loop(task.cancel)
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "scanning plugin configs in" in errors[0].getMessage()


def test_poll_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        PluginRegistry(tmp_path, poll_interval=0)


# --- one bad entry costs one line (issue 7.1) -------------------------------------------


def warnings_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [line for line in messages(caplog, logging.WARNING) if line.startswith(f"invalid plugin config {name}:")]


def test_each_bad_entry_costs_one_line_and_the_rest_reloads(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.write("strict.json", config_bytes(failure_policy="Fail", remote_endpoint="/run/strict.sock"))
    harness.write("good.json", config_bytes())
    (harness.dir / "loop-a.json").symlink_to("loop-b.json")
    (harness.dir / "loop-b.json").symlink_to("loop-a.json")
    (harness.dir / "dangling.json").symlink_to("missing")
    (harness.dir / "dir.json").mkdir()
    os.mkfifo(harness.dir / "fifo.json")  # opened without O_NONBLOCK, this would block the scan
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(harness.dir / "socket.json"))
    harness.write("unreadable.json", config_bytes())
    real_open = os.open

    def open_denied(path: Any, flags: int, *args: Any) -> int:
        if Path(path).name == "unreadable.json":  # EACCES cannot be provoked by chmod as root
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_denied)
    try:
        for _ in range(3):
            harness.refresh()
        assert harness.names() == ["good.json", "strict.json"]
        expected = {
            "loop-a.json": "cannot read the file: a symbolic link loop; not registered",
            "loop-b.json": "cannot read the file: a symbolic link loop; not registered",
            "dangling.json": "a dangling symbolic link (its target does not exist); not registered",
            "dir.json": "not a regular file (a directory); not registered",
            "fifo.json": "not a regular file (a FIFO); not registered",
            "socket.json": "not a regular file (a socket); not registered",
            "unreadable.json": "cannot read the file: Permission denied; not registered",
        }
        for name, problem in expected.items():
            assert warnings_about(caplog, name) == [f"invalid plugin config {name}: {problem}"]
        assert len(messages(caplog, logging.WARNING)) == len(expected) + 2  # + good's and strict's socket
        # A FIFO swapped in after the type check: the open does not wait for a writer either.
        with pytest.raises(trusted_files.Unusable, match="a FIFO"):
            trusted_files.read_trusted(str(harness.dir / "fifo.json"), harness.registry.owners, None)

        (harness.dir / "strict.json").unlink()  # deleting a Fail plugin still takes effect
        assert harness.refresh() is True
        assert harness.names() == ["good.json"]
    finally:
        listener.close()


def test_an_entry_that_breaks_keeps_its_last_good_version_unless_its_target_is_gone(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    target = harness.dir / "target"
    target.write_bytes(config_bytes(failure_policy="Fail"))
    (harness.dir / "strict.json").symlink_to(target)
    harness.refresh()
    good = harness.plugin("strict.json")
    caplog.clear()

    (harness.dir / "loop.json").symlink_to("strict.json")
    os.replace(harness.dir / "loop.json", harness.dir / "strict.json")  # now a link to itself
    for _ in range(3):
        assert harness.refresh() is False
    assert harness.registry.plugins == (good,)
    assert messages(caplog) == [
        "invalid plugin config strict.json: cannot read the file: a symbolic link loop; "
        "its last good version stays in force"
    ]

    caplog.clear()
    (harness.dir / "strict.json").unlink()
    (harness.dir / "strict.json").symlink_to(target)
    assert harness.refresh() is False
    assert messages(caplog)[0].startswith("plugin strict.json is valid again (unchanged)")

    caplog.clear()
    target.unlink()  # the file is deleted, only its link is left: that unregisters
    assert harness.refresh() is True
    harness.refresh()
    assert harness.registry.plugins == ()
    assert messages(caplog) == [
        "plugin strict.json removed: strict.json: a dangling symbolic link (its target does not exist)"
    ]


# --- size cap, reading off the event loop (issue 7.2) -----------------------------------


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_huge_file_is_rejected_without_being_read(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    with open(harness.dir / "big.json", "wb") as big:
        big.truncate(1 << 30)  # sparse: 1 GiB that costs no disk
    harness.write("good.json", config_bytes())
    peak_before = peak_rss_bytes()
    harness.refresh()
    harness.refresh()
    assert harness.names() == ["good.json"]
    assert peak_rss_bytes() - peak_before < 64 * 1024 * 1024
    assert warnings_about(caplog, "big.json") == [
        "invalid plugin config big.json: too large: 1073741824 bytes "
        f"(a config file may have at most {MAX_CONFIG_BYTES}); not registered"
    ]


def test_the_size_limit_is_inclusive(harness: Harness) -> None:
    document = config_bytes()
    harness.write("max.json", document + b" " * (MAX_CONFIG_BYTES - len(document)))
    harness.write("over.json", document + b" " * (MAX_CONFIG_BYTES + 1 - len(document)))
    harness.refresh()
    assert harness.names() == ["max.json"]


def test_a_file_that_grows_past_the_limit_while_read_is_rejected(harness: Harness) -> None:
    harness.write("growing.json", b" ")
    with open(harness.dir / "growing.json", "rb") as growing:
        assert len(trusted_files.read_at_most(growing.fileno(), 10)) == 1
    assert trusted_files.too_large(None) == (
        f"too large: more than {MAX_CONFIG_BYTES} bytes (a config file may have at most {MAX_CONFIG_BYTES})"
    )


def test_reload_reads_files_off_the_event_loop(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    harness.write("slow.json", config_bytes())
    reading, release = threading.Event(), threading.Event()
    real_read = trusted_files.read_at_most

    def slow_read(fd: int, limit: int) -> bytes:
        reading.set()
        assert release.wait(30)
        return real_read(fd, limit)

    monkeypatch.setattr(trusted_files, "read_at_most", slow_read)
    reload = harness.on_loop(lambda: asyncio.ensure_future(harness.registry.reload()))
    try:
        assert reading.wait(10)
        # The read is stuck; the loop still serves other work (a CRI call would run here).
        assert harness.loop.run(asyncio.sleep(0, result="served"), timeout=10) == "served"
        assert harness.names() == []
    finally:
        release.set()
    assert harness.loop.run(asyncio.wait_for(reload, 10)) is True
    assert harness.names() == ["slow.json"]


# --- who may register a plugin (issue 7.3) ----------------------------------------------

NOBODY = 65534


def test_files_of_untrusted_owners_or_writable_by_others_are_not_registered(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.write("nobody.json", config_bytes())
    os.chown(harness.dir / "nobody.json", NOBODY, NOBODY)
    harness.write("shared.json", config_bytes())
    os.chmod(harness.dir / "shared.json", 0o666)
    target = harness.dir.parent / "nobody-target"
    target.write_bytes(config_bytes())
    os.chown(target, NOBODY, NOBODY)
    (harness.dir / "link.json").symlink_to(target)  # the link is root's; its target is not
    harness.write("good.json", config_bytes())
    harness.refresh()
    harness.refresh()
    assert harness.names() == ["good.json"]
    trusted = ",".join(str(uid) for uid in sorted({0, os.geteuid()}))
    assert warnings_about(caplog, "nobody.json") == [
        f"invalid plugin config nobody.json: not trusted: the file is owned by uid {NOBODY}, "
        f"not a trusted owner (trusted uids: {trusted}); not registered"
    ]
    assert warnings_about(caplog, "shared.json") == [
        "invalid plugin config shared.json: not trusted: the file is writable by group or others (mode 0666); "
        "not registered"
    ]
    assert "owned by uid 65534" in warnings_about(caplog, "link.json")[0]


def test_an_explicitly_trusted_uid_may_own_config_files(loop_thread: LoopThread, tmp_path: Path) -> None:
    harness = Harness(loop_thread, tmp_path / "hookserver.d")
    harness.registry = PluginRegistry(harness.dir, trusted_uids=[1000, NOBODY])
    try:
        harness.write("nobody.json", config_bytes())
        os.chown(harness.dir / "nobody.json", NOBODY, NOBODY)
        harness.refresh()
        assert harness.names() == ["nobody.json"]
    finally:
        loop_thread.run(harness.registry.close())


def test_a_writable_directory_registers_nothing_new(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.write("old.json", config_bytes())
    harness.refresh()
    caplog.clear()
    os.chmod(harness.dir, 0o777)
    harness.write("new.json", config_bytes(remote_endpoint="/run/new.sock"))
    harness.refresh()
    harness.refresh()
    # Files are judged again when the directory's trust changes: old.json keeps the version
    # read while the directory was trusted, new.json is not registered.
    assert harness.names() == ["old.json"]
    problem = f"not trusted: directory {harness.dir} is writable by group or others (mode 0777)"
    assert messages(caplog, logging.WARNING) == [
        f"plugin configs {problem}; no file in it is used until: chmod go-w {harness.dir}",
        f"invalid plugin config new.json: {problem}; not registered",
        f"invalid plugin config old.json: {problem}; its last good version stays in force",
    ]
    os.chmod(harness.dir, 0o755)
    assert harness.refresh() is True
    assert harness.names() == ["new.json", "old.json"]


def test_an_untrusted_directory_is_warned_once_with_the_fix_even_empty(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A 0777 directory with no file in it yet: nothing else would say that the proxy will ignore what comes."""
    os.chmod(harness.dir, 0o777)
    harness.refresh()
    harness.refresh()
    problem = (f"not trusted: directory {harness.dir} is writable by group or others (mode 0777); no file in it is "
               f"used until: chmod go-w {harness.dir}")
    assert messages(caplog, logging.WARNING) == [f"plugin configs {problem}"]
    assert harness.registry.directory_problem() == problem
    os.chmod(harness.dir, 0o755)
    harness.refresh()
    assert harness.registry.directory_problem() == ""
    assert f"plugin config directory {harness.dir} is trusted again; its files are read" in messages(
        caplog, logging.INFO)


def test_a_config_directory_that_is_a_file_is_said_so_with_the_flag(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not "does not exist": it does, as a file (a --runtime-hook-config-dir naming a config file, say)."""
    a_file = tmp_path / "koordlet.json"
    a_file.write_text("{}")
    registry = registry_module.PluginRegistry(a_file)
    registry.refresh()
    problem = "not a directory; no plugins until it is one (give --runtime-hook-config-dir a directory)"
    assert messages(caplog, logging.WARNING) == [f"plugin config directory {a_file} is {problem}"]
    assert registry.directory_problem() == f"is {problem}"


def test_a_directory_of_an_untrusted_owner_names_the_owner_fix(harness: Harness) -> None:
    os.chown(harness.dir, NOBODY, NOBODY)
    harness.refresh()
    assert harness.registry.directory_problem().endswith(
        f"no file in it is used until: chown root {harness.dir}, or add uid {NOBODY} to "
        "--runtime-hook-config-trusted-uids")


def test_a_file_that_becomes_untrusted_keeps_the_version_read_while_trusted(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    good = harness.registered("koordlet.json", KOORDLET)
    harness.write("koordlet.json", config_bytes(remote_endpoint="/tmp/evil.sock"))
    os.chown(harness.dir / "koordlet.json", NOBODY, NOBODY)
    harness.refresh()
    assert harness.registry.plugins == (good,)
    assert "its last good version stays in force" in warnings_about(caplog, "koordlet.json")[0]


def test_a_deeply_nested_config_is_a_config_problem_not_a_crash() -> None:
    """orjson before 3.10 overflowed the C stack on ~1,000,000 nested brackets (a 1 MiB file holds that)."""
    with pytest.raises(PluginConfigError):
        parse_plugin_config("deep.json", b"[" * (MAX_CONFIG_BYTES // 2) + b"]" * (MAX_CONFIG_BYTES // 2))


def test_a_registration_whose_socket_fails_every_call_is_warned_when_read_and_still_registered(
    harness: Harness, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A plugin may start after its file is written, so it is registered; but the log says at once what the
    first pod under `Fail` would find out: no socket, nobody listening, or a socket the proxy refuses to call."""
    shared = tmp_path / "shared-tmp"  # as /tmp: sticky and writable by all
    shared.mkdir()
    shared.chmod(0o1777)
    serving = socket.socket(socket.AF_UNIX)
    serving.bind(str(tmp_path / "serving.sock"))
    serving.listen()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / "stale.sock"))  # bound, never listening: what a killed plugin leaves
    in_tmp = socket.socket(socket.AF_UNIX)
    in_tmp.bind(str(shared / "plugin.sock"))
    in_tmp.listen()
    try:
        for name, path in (("missing", tmp_path / "missing.sock"), ("serving", tmp_path / "serving.sock"),
                           ("stale", tmp_path / "stale.sock"), ("tmp", shared / "plugin.sock")):
            harness.write(f"{name}.json", config_bytes(remote_endpoint=str(path)))
        harness.refresh()
        assert harness.names() == ["missing.json", "serving.json", "stale.json", "tmp.json"]
        assert messages(caplog, logging.WARNING) == [
            f"plugin missing.json: socket {tmp_path}/missing.sock does not exist: nothing serves it (not started "
            "yet?); every call fails until the plugin serves it",
            f"plugin stale.json: nobody listens on socket {tmp_path}/stale.sock: a stale socket (stopped?); every "
            "call fails until the plugin serves it",
            f"plugin tmp.json: the proxy refuses every call to this plugin (PERMISSION_DENIED): directory {shared} holding "
            f"socket {shared}/plugin.sock is writable by group or others (mode 1777): anyone who can write there "
            "could swap the socket; serve the socket in a directory only root can write (e.g. "
            "/run/NAME/plugin.sock), owned by root or a uid of the proxy's --runtime-hook-config-trusted-uids",
        ]
    finally:
        for sock in (serving, stale, in_tmp):
            sock.close()


def test_a_file_being_written_is_not_called_empty_until_it_stays_empty(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cat > koordlet.json`: the shell creates the file (inotify: a change, scanned at once: empty), then cat
    writes it. That is no broken config: only a file that stays empty once it settles is one."""
    monkeypatch.setattr(trusted_files, "_RACY_WINDOW_NS", 300_000_000)  # "settled": unmodified for 0.3 s
    harness.registry.poll_interval = 0.05
    task = harness.on_loop(_start(harness.registry))
    try:
        with open(harness.dir / "koordlet.json", "wb") as being_written:
            time.sleep(0.2)  # the registry has seen it empty
            being_written.write(KOORDLET)
        _wait_for(lambda: harness.names() == ["koordlet.json"], timeout=10)
        (harness.dir / "empty.json").touch()  # stays empty: said once, when it settles
        _wait_for(lambda: any("empty.json" in line for line in messages(caplog, logging.WARNING)), timeout=10)
        time.sleep(0.2)
    finally:
        harness.on_loop(task.cancel)
    assert [line for line in messages(caplog, logging.WARNING) if "empty file" in line] == [
        "invalid plugin config empty.json: empty file; not registered"]
