"""Per-node toggles: names, persistence (atomic), unknown plugins kept, and the dispatcher honouring them."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from tests.kits.hooks import PluginBench, register, refresh_on_loop
from runtimeproxy.hooks import dispatcher
from runtimeproxy.hooks.toggles import (
    ALL_PLUGINS, STATE_FILE_NAME, ToggleError, Toggles, clean_author, hook_names, unknown_plugin,
)
from rplab.example_plugin import ExamplePlugin
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks.names import HOOK_NAMES

PRE_CREATE = frozenset({"PreCreateContainer"})


def test_plugin_names_with_or_without_suffix_name_the_same_file(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", frozenset(), "broken")
    assert not toggles.allows("koordlet.json", "PreRunPodSandbox")
    toggles.enable("koordlet.json", frozenset())
    assert toggles.allows("koordlet.json", "PreRunPodSandbox")
    assert toggles.active == ()


def test_bad_requests_are_one_line_errors_and_change_nothing(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    with pytest.raises(ToggleError, match="reason"):
        toggles.disable("koordlet", frozenset(), "  ")
    with pytest.raises(ToggleError, match="not a plugin config file name"):
        toggles.disable("../etc/passwd", frozenset(), "x")
    with pytest.raises(ToggleError, match="unknown hook 'Nope'"):
        hook_names(["Nope"])
    assert hook_names(["precreatecontainer"]) == PRE_CREATE
    assert toggles.active == ()
    assert not (tmp_path / STATE_FILE_NAME).exists()


def test_hooks_toggle_one_by_one(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", PRE_CREATE, "cpuset bug")
    assert not toggles.allows("koordlet.json", "PreCreateContainer")
    assert toggles.allows("koordlet.json", "PreRunPodSandbox")
    assert toggles.reason_for("koordlet.json", "PreCreateContainer") == "cpuset bug"
    assert toggles.reason_for("koordlet.json") == ""  # the plugin as a whole is on

    # Enabling one hook of a wholly disabled plugin leaves the others off: the whole-plugin
    # toggle is narrowed and keeps its reason; the hook's own toggle is untouched.
    toggles.disable("koordlet", frozenset(), "all off")
    toggles.enable("koordlet", frozenset({"PreRunPodSandbox"}))
    assert toggles.allows("koordlet.json", "PreRunPodSandbox")
    assert not toggles.allows("koordlet.json", "PostStopContainer")
    whole, hook = toggles.active
    assert (whole.hook, whole.reason, whole.hooks_on) == ("", "all off", {"PreRunPodSandbox"})
    assert whole.hooks_off == frozenset(HOOK_NAMES) - {"PreRunPodSandbox"}
    assert (hook.hook, hook.reason) == ("PreCreateContainer", "cpuset bug")
    assert toggles.reason_for("koordlet.json") == ""  # not wholly off any more
    assert toggles.reason_for("koordlet.json", "PostStopContainer") == "all off"

    # Enabling every hook one by one leaves no toggle.
    toggles.enable("koordlet", frozenset(HOOK_NAMES) - {"PreRunPodSandbox"})
    assert toggles.active == ()
    assert all(toggles.allows("koordlet.json", h) for h in HOOK_NAMES)


def test_a_hook_toggle_keeps_the_whole_plugin_toggle_s_reason_author_and_time(tmp_path: Path) -> None:
    """Issue 18: `disable koordlet --hook PreCreateContainer --reason "cpuset bug"` on a fully
    disabled plugin replaced the whole-plugin toggle's reason."""
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", frozenset(), "fail policy blocks pods", author="root (sudo: alice)")
    (whole,) = toggles.active
    notes = toggles.disable("koordlet", PRE_CREATE, "cpuset bug", author="root (sudo: bob)")
    assert notes == ["disabled koordlet.json (PreCreateContainer) with its own toggle; the toggle of koordlet.json "
                     f"(all hooks) stays as it was, {whole.provenance()}"]
    assert "alice" in notes[0] and "fail policy blocks pods" in notes[0]
    kept, hook = toggles.active
    assert kept == whole  # reason, author and time as set
    assert (hook.hook, hook.reason, hook.author) == ("PreCreateContainer", "cpuset bug", "root (sudo: bob)")
    assert hook.since_unix_seconds >= whole.since_unix_seconds
    assert toggles.reason_for("koordlet.json") == "fail policy blocks pods"
    assert toggles.reason_for("koordlet.json", "PreCreateContainer") == "cpuset bug"

    restarted = Toggles(tmp_path)
    restarted.load()
    assert restarted.active == toggles.active

    # Setting the same scope again replaces that toggle only, and says what it replaced.
    notes = toggles.disable("koordlet", frozenset(), "still broken", author="root")
    assert notes[0].startswith("replaced the toggle of koordlet.json (all hooks) set by root (sudo: alice)")
    assert [t.reason for t in toggles.active] == ["still broken", "cpuset bug"]
    toggles.enable("koordlet", frozenset())  # the whole plugin: every toggle of it goes
    assert toggles.active == ()


def test_enable_says_when_there_is_nothing_to_enable_or_disable_all_keeps_it_off(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    nothing = "nothing to enable: no toggle turns koordlet.json (all hooks) off"
    assert toggles.enable("koordlet", frozenset()) == [nothing]
    assert not (tmp_path / STATE_FILE_NAME).exists()  # nothing changed, nothing written
    toggles.disable("koordlet", frozenset(), "one")
    toggles.disable("", frozenset(), "node maintenance", everything=True, author="root")
    (note,) = toggles.enable("koordlet", frozenset())
    assert note.startswith("still off: every plugin (all hooks) is disabled (set by root at ")
    assert note.endswith(": node maintenance); `enable --all` clears it")
    assert not toggles.allows("koordlet.json", "PreCreateContainer")
    assert toggles.enable("", frozenset(), everything=True) == []
    assert toggles.enable("", frozenset(), everything=True) == ["nothing to enable: no toggle was set"]


def test_state_written_by_an_older_proxy_loads(tmp_path: Path) -> None:
    """Version 1 (before per-toggle authors): one entry per plugin with a list of hooks."""
    (tmp_path / STATE_FILE_NAME).write_text("""{
  "version": 1,
  "toggles": [
    {"plugin": "*", "hooks": ["PostStopContainer"], "reason": "maintenance", "since": 1700000000.5},
    {"plugin": "koordlet.json", "hooks": [], "reason": "fail policy blocks pods", "since": 1700000001.0},
    {"plugin": "nri.json", "hooks": ["PreStartContainer", "PreCreateContainer"], "reason": "cpuset bug",
     "since": 1700000002.0}
  ]
}
""")
    toggles = Toggles(tmp_path)
    toggles.load()
    assert [(t.plugin, t.hook, t.reason, t.since_unix_seconds, t.author) for t in toggles.active] == [
        (ALL_PLUGINS, "PostStopContainer", "maintenance", 1700000000.5, ""),
        ("koordlet.json", "", "fail policy blocks pods", 1700000001.0, ""),
        ("nri.json", "PreCreateContainer", "cpuset bug", 1700000002.0, ""),
        ("nri.json", "PreStartContainer", "cpuset bug", 1700000002.0, ""),
    ]
    assert not toggles.allows("koordlet.json", "PreRunPodSandbox")
    assert not toggles.allows("nri.json", "PreStartContainer") and toggles.allows("nri.json", "PreRunPodSandbox")
    assert not toggles.allows("other.json", "PostStopContainer")

    # Written back: a version 1 reader keeps the last entry of a plugin, so the whole-plugin
    # toggle comes last (a downgraded proxy keeps more off, never less).
    toggles.disable("koordlet", PRE_CREATE, "cpuset bug")
    written = json.loads((tmp_path / STATE_FILE_NAME).read_text())
    assert written["version"] == 3
    koordlet = [entry for entry in written["toggles"] if entry["plugin"] == "koordlet.json"]
    assert [entry["hooks"] for entry in koordlet] == [["PreCreateContainer"], []]


def test_an_unknown_plugin_is_refused_with_the_registered_names_and_a_did_you_mean() -> None:
    registered = ["nri.json", "koordlet.json"]
    assert str(unknown_plugin("koordlett", registered)) == (
        "no plugin koordlett is registered (registered: koordlet.json, nri.json); did you mean koordlet?")
    assert str(unknown_plugin("koordlett.json", registered)).endswith("did you mean koordlet.json?")
    assert "did you mean" not in str(unknown_plugin("nothere", registered))
    assert str(unknown_plugin("x", [], "does not exist; no plugins until it does")) == (
        "no plugin x is registered (registered: none; the config directory does not exist; no plugins until it does)")
    many = [f"p{i:02d}.json" for i in range(12)]
    assert "p09.json, and 2 more)" in str(unknown_plugin("zzz", many))
    assert str(unknown_plugin("staged-typ", [], toggled=["staged-type.json"])).endswith("did you mean staged-type?")


def test_an_author_is_one_printable_line() -> None:
    assert clean_author("  root (sudo: alice)\n") == "root (sudo: alice)"
    assert clean_author("a\x1b[31mb") == "a?[31mb"
    assert len(clean_author("x" * 500)) == 64


def test_disable_all_and_enable_all(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", PRE_CREATE, "one")
    toggles.disable("", frozenset(), "node maintenance", everything=True)
    assert not any(toggles.allows("anything.json", hook) for hook in HOOK_NAMES)
    assert toggles.reason_for("anything.json") == "node maintenance"
    toggles.enable("", frozenset(), everything=True)
    assert toggles.active == ()
    assert toggles.allows("koordlet.json", "PreCreateContainer")


def test_toggles_survive_a_restart_and_unknown_plugins_are_kept(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("not-installed-yet", frozenset(), "known bad build")
    toggles.disable("koordlet", PRE_CREATE, "cpuset bug")
    toggles.disable("", frozenset(), "maintenance", everything=True)

    restarted = Toggles(tmp_path)
    restarted.load()
    assert restarted.active == toggles.active
    assert {t.plugin for t in restarted.active} == {"not-installed-yet.json", "koordlet.json", ALL_PLUGINS}
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE_NAME]  # no temporary files left


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", frozenset(), "first")
    before = (tmp_path / STATE_FILE_NAME).read_bytes()

    def no_rename(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        toggles.disable("other", frozenset(), "second")
    assert (tmp_path / STATE_FILE_NAME).read_bytes() == before
    assert [t.plugin for t in toggles.active] == ["koordlet.json"]
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE_NAME]


def test_an_unreadable_state_file_is_logged_and_means_no_toggles(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / STATE_FILE_NAME).write_text("{half")
    toggles = Toggles(tmp_path)
    with caplog.at_level(logging.ERROR):
        toggles.load()
    assert toggles.active == ()
    assert "unreadable" in caplog.text and STATE_FILE_NAME in caplog.text


def test_a_disabled_plugin_is_not_called_whatever_its_policy(bench: PluginBench) -> None:
    dead = bench.socket("dead")  # nothing listens: a Fail plugin would block every call
    bench.register("10-dead.json", dead, ["PreCreateContainer"], policy="Fail")
    live = ExamplePlugin()
    bench.register("20-live.json", bench.serve(live), ["PreCreateContainer"])
    request = hooks.ContainerResourceHookRequest(container_meta=hooks.ContainerMetadata(name="app"))
    with pytest.raises(dispatcher.HookFailed):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, request)

    bench.dispatcher.toggles.disable("10-dead", PRE_CREATE, "plugin down")
    bench.run(dispatcher.PRE_CREATE_CONTAINER, request)
    assert len(live.seen_by("PreCreateContainer")) == 1  # the first call stopped at the dead plugin
    assert bench.dispatcher.outcomes[("10-dead.json", "PreCreateContainer", "UNAVAILABLE")] == 1  # not called again

    bench.dispatcher.toggles.disable("", frozenset(), "all off", everything=True)
    assert not bench.dispatcher.has_plugins(dispatcher.PRE_CREATE_CONTAINER)
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request) is request


def test_a_toggle_applies_to_a_plugin_registered_later(bench: PluginBench) -> None:
    bench.dispatcher.toggles.disable("late", frozenset(), "not yet trusted")
    plugin = ExamplePlugin()
    register(bench.config_dir, "late.json", bench.serve(plugin), ["PreCreateContainer"])
    refresh_on_loop(bench.loop, bench.registry)
    assert [p.name for p in bench.registry.plugins] == ["late.json"]
    bench.run(dispatcher.PRE_CREATE_CONTAINER, hooks.ContainerResourceHookRequest())
    assert plugin.seen_by("PreCreateContainer") == []


def test_stats_count_calls_failures_and_changes(bench: PluginBench) -> None:
    plugin = ExamplePlugin()
    bench.register("a.json", bench.serve(plugin), ["PreCreateContainer"])
    bench.register("b.json", bench.socket("dead"), ["PreCreateContainer"])
    for _ in range(3):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, hooks.ContainerResourceHookRequest())
    good = bench.dispatcher.stats.of("a.json", "PreCreateContainer")
    bad = bench.dispatcher.stats.of("b.json", "PreCreateContainer")
    assert (good.calls, good.failures, good.changes) == (3, 0, 3)  # the example plugin annotates
    assert (bad.calls, bad.failures) == (3, 3)
    assert bad.last_error.startswith("UNAVAILABLE") and bad.last_error_unix_seconds > 0
    assert 0 < good.percentile_seconds(0.5) <= good.percentile_seconds(0.99)
    assert good.latency.cumulative()[-1] == ("+Inf", 3)


def test_shadow_settings_are_persisted_beside_the_toggles(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("koordlet", frozenset(), "kept too")
    toggles.set_shadow("koordlet-next", True, configured_shadow=False, author="root")
    toggles.set_shadow("trial.json", False, configured_shadow=True)  # a promotion over the file's key
    reloaded = Toggles(tmp_path)
    reloaded.load()
    assert reloaded.shadow_override("koordlet-next.json") is True
    assert reloaded.shadow_override("trial.json") is False
    assert reloaded.shadow_override("koordlet.json") is None
    assert [t.plugin for t in reloaded.active] == ["koordlet.json"]
    assert reloaded.shadow_settings[0].author == "root"
    reloaded.set_shadow("koordlet-next.json", False, configured_shadow=False)
    assert reloaded.shadow_override("koordlet-next.json") is None
