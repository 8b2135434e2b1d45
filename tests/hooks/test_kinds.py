"""The table of plugin kinds (hooks.kinds): what a hook plugin and an NRI plugin differ in, and nothing else."""

from __future__ import annotations

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.kinds import HOOK, NRI, FailureRule, Ownership, kind_of
from runtimeproxy.hooks.names import HOOK_NAMES, PRE_CREATE_CONTAINER, POST_STOP_CONTAINER


def test_each_kind_names_its_plugins_and_scopes_its_own_way() -> None:
    assert (HOOK.toggle_name("koordlet.json"), NRI.toggle_name("10-policy")) == ("koordlet.json", "nri:10-policy")
    assert (HOOK.scope_names, NRI.scope_names) == (HOOK_NAMES, nri_events.EVENT_NAMES)
    assert (HOOK.trace_hook(PRE_CREATE_CONTAINER), NRI.trace_hook(nri_events.CREATE_CONTAINER)) == \
        ("PreCreateContainer", "NRI CreateContainer")
    assert kind_of("nri:10-policy") is NRI and kind_of("koordlet.json") is HOOK and kind_of("*") is HOOK


def test_ownership_and_failure_rules_come_from_the_row() -> None:
    assert (HOOK.ownership, NRI.ownership) == (Ownership.LATER_WINS, Ownership.CONFLICT_FAILS)
    assert (HOOK.failure, NRI.failure) == (FailureRule.POLICY, FailureRule.NRI)
    # A hook plugin: its policy, on pre-hooks only.
    assert HOOK.error_fails_call(PRE_CREATE_CONTAINER, pre_hook=True, policy_fails=True)
    assert not HOOK.error_fails_call(PRE_CREATE_CONTAINER, pre_hook=True, policy_fails=False)
    assert not HOOK.error_fails_call(POST_STOP_CONTAINER, pre_hook=False, policy_fails=True)
    # An NRI plugin: containerd's events whose error fails the call, whatever a policy would say.
    assert {event for event in nri_events.EVENT_NAMES if NRI.error_fails_call(event, True, False)} == {
        nri_events.RUN_POD_SANDBOX, nri_events.CREATE_CONTAINER, nri_events.START_CONTAINER,
        nri_events.UPDATE_CONTAINER, nri_events.UPDATE_POD_SANDBOX,
        nri_events.VALIDATE_CONTAINER_ADJUSTMENT}


def test_a_failure_is_worded_in_its_kinds_terms() -> None:
    hook = HOOK.failure_text("PreRunPodSandbox", "PreRunPodSandbox", "10-a.json", "/run/a.sock", "UNAVAILABLE", "down")
    nri = NRI.failure_text("NRI RunPodSandbox", "RunPodSandbox", "10-a", "/run/nri.sock", "UNKNOWN", "no room")
    assert hook == ("runtimeproxy: PreRunPodSandbox hook of plugin 10-a.json (unix:///run/a.sock) failed with "
                    "failure-policy Fail: UNAVAILABLE: down")
    assert nri == ("runtimeproxy: NRI plugin 10-a (unix:///run/nri.sock) failed RunPodSandbox, which fails the call "
                   "as containerd's NRI does: UNKNOWN: no room")
    assert "failure-policy" not in nri
