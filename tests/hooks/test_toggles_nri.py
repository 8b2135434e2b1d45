"""Per-event toggles of NRI plugins (`nri:10-name`): NRI event names only, the other kind's names refused in one
line naming the valid ones, narrowing as per-hook toggles do, persisted in the same state file under keys a
version 2 proxy reads as whole-plugin toggles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtimeproxy.hooks.nri_events import CREATE_CONTAINER, EVENT_NAMES, START_CONTAINER, UPDATE_CONTAINER
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.hooks.toggles import STATE_FILE_NAME, ToggleError, Toggles, hook_names, scopes_named

NRI = "nri:10-res"
CREATE = frozenset({CREATE_CONTAINER})


def test_an_nri_plugin_s_toggles_name_nri_events_without_case() -> None:
    assert scopes_named(NRI, ["createcontainer", " UpdateContainer "]) == {CREATE_CONTAINER, UPDATE_CONTAINER}
    assert scopes_named("koordlet", ["precreatecontainer"]) == {"PreCreateContainer"}
    assert scopes_named(NRI, ["PostStartContainer"]) == {"PostStartContainer"}  # a name of both kinds


@pytest.mark.parametrize("plugin, typed, expected", [
    (NRI, "PreCreateContainer", "PreCreateContainer is a hook of hook plugins; NRI plugin nri:10-res is toggled by "
     f"NRI event: {', '.join(EVENT_NAMES)}; did you mean CreateContainer?"),
    ("koordlet", "CreateContainer", "CreateContainer is an NRI event of NRI plugins; hook plugin koordlet is "
     f"toggled by hook: {', '.join(HOOK_NAMES)}; did you mean PreCreateContainer?"),
    ("10-res", "createcontainer", "CreateContainer is an NRI event of NRI plugins; hook plugin 10-res is toggled "
     f"by hook: {', '.join(HOOK_NAMES)} (an NRI plugin that is not attached is named nri:10-res); did you mean "
     "PreCreateContainer?"),
    (NRI, "CreateContaner", f"unknown NRI event 'CreateContaner' (known: {', '.join(EVENT_NAMES)}); did you mean "
     "CreateContainer?"),
    ("koordlet", "Nope", f"unknown hook 'Nope' (known: {', '.join(HOOK_NAMES)})"),
])
def test_a_name_of_the_other_kind_is_refused_in_one_line_naming_the_valid_ones(plugin: str, typed: str,
                                                                               expected: str) -> None:
    with pytest.raises(ToggleError) as refused:
        scopes_named(plugin, [typed])
    assert str(refused.value) == expected


def test_the_toggles_refuse_a_scope_of_the_other_kind_and_change_nothing(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    with pytest.raises(ToggleError, match="is a hook of hook plugins"):
        toggles.disable(NRI, frozenset({"PreCreateContainer"}), "x")
    with pytest.raises(ToggleError, match="is an NRI event"):
        toggles.disable("koordlet", CREATE, "x")
    with pytest.raises(ToggleError, match="is an NRI event"):
        hook_names([CREATE_CONTAINER])  # `--all` names hooks
    assert toggles.active == () and not (tmp_path / STATE_FILE_NAME).exists()


def test_events_toggle_one_by_one_and_enable_narrows_a_whole_plugin_toggle(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable(NRI, CREATE, "cpuset bug", author="root")
    assert not toggles.allows(NRI, CREATE_CONTAINER) and toggles.allows(NRI, START_CONTAINER)
    assert toggles.reason_for(NRI, CREATE_CONTAINER) == "cpuset bug" and toggles.reason_for(NRI) == ""
    assert toggles.allows("nri:20-other", CREATE_CONTAINER)

    assert toggles.disable(NRI, frozenset(), "all off") == []  # the event's own toggle stays as it was
    assert toggles.enable(NRI, frozenset({START_CONTAINER})) == []
    whole, event = toggles.of(NRI)
    assert whole.describe() == f"{NRI} (all events but StartContainer)" and whole.reason == "all off"
    assert event.describe() == f"{NRI} (CreateContainer)" and event.reason == "cpuset bug"
    assert toggles.allows(NRI, START_CONTAINER) and not toggles.allows(NRI, UPDATE_CONTAINER)

    toggles.enable(NRI, CREATE)  # drops the event's toggle, narrows the whole-plugin one
    assert toggles.allows(NRI, CREATE_CONTAINER)
    whole, = toggles.of(NRI)
    assert whole.hooks_off == frozenset(EVENT_NAMES) - {START_CONTAINER, CREATE_CONTAINER}
    toggles.enable(NRI, whole.hooks_off)
    assert toggles.active == ()
    assert toggles.enable(NRI, CREATE) == [f"nothing to enable: no toggle turns {NRI} (CreateContainer) off"]


def test_disable_all_still_turns_an_nri_plugin_s_events_off_and_enable_says_so(tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable("", frozenset(), "maintenance", everything=True)
    assert not toggles.allows(NRI, CREATE_CONTAINER)
    note, = toggles.enable(NRI, CREATE)[1:]
    assert note.startswith("still off: every plugin (all hooks) is disabled")


def test_per_event_toggles_persist_under_keys_a_version_2_proxy_reads_as_whole_plugin_toggles(
        tmp_path: Path) -> None:
    toggles = Toggles(tmp_path)
    toggles.disable(NRI, frozenset({UPDATE_CONTAINER, CREATE_CONTAINER}), "cpuset bug", author="ops")
    toggles.disable("nri:20-old", frozenset(), "whole")
    toggles.enable("nri:20-old", frozenset({START_CONTAINER}))
    toggles.disable("koordlet", frozenset({"PreCreateContainer"}), "hook")

    written = json.loads((tmp_path / STATE_FILE_NAME).read_text())
    assert written["version"] == 3
    entries = {(e["plugin"], tuple(e.get("events", e["hooks"]))): e for e in written["toggles"]}
    assert list(entries) == [("koordlet.json", ("PreCreateContainer",)), (NRI, (CREATE_CONTAINER,)),
                             (NRI, (UPDATE_CONTAINER,)), ("nri:20-old", ())]
    # A version 2 reader knows "hooks" and "hooks_on" only: every NRI entry is a whole-plugin toggle to it.
    assert all(e["hooks"] == [] and "hooks_on" not in e for e in written["toggles"] if e["plugin"].startswith("nri:"))
    assert entries[("nri:20-old", ())]["events_on"] == [START_CONTAINER]

    reloaded = Toggles(tmp_path)
    reloaded.load()
    assert reloaded.active == toggles.active
    assert not reloaded.allows(NRI, UPDATE_CONTAINER) and reloaded.allows(NRI, START_CONTAINER)
    assert reloaded.allows("nri:20-old", START_CONTAINER) and not reloaded.allows("nri:20-old", CREATE_CONTAINER)


def test_a_version_2_file_with_a_whole_nri_plugin_toggle_loads(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE_NAME).write_text(json.dumps({"version": 2, "toggles": [
        {"plugin": "nri:10-res", "hooks": [], "reason": "noisy", "since": 1700000000.0, "author": "root"}]}))
    toggles = Toggles(tmp_path)
    toggles.load()
    toggle, = toggles.active
    assert (toggle.plugin, toggle.hook, toggle.reason, toggle.author) == (NRI, "", "noisy", "root")
    assert all(not toggles.allows(NRI, event) for event in EVENT_NAMES)
