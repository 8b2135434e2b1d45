"""The NRI event table: the rules every list about NRI's events is derived from."""

from __future__ import annotations

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.kinds import NRI
from runtimeproxy.hooks.nri_events import EVENT, EVENTS, FAILING


def test_the_rows_are_in_wire_order_and_each_name_is_its_method() -> None:
    assert [event.number for event in EVENTS] == list(range(1, len(EVENTS) + 1))
    assert all(event.method == event.name and event.request == f"{event.name}Request" for event in EVENTS)
    assert EVENT[nri_events.STOP_CONTAINER].bit == 1 << 9


def test_the_rules_are_containerd_s() -> None:
    assert {event.name for event in EVENTS if event.adjusts} == {nri_events.CREATE_CONTAINER,
                                                                 nri_events.UPDATE_CONTAINER}
    assert FAILING == {nri_events.RUN_POD_SANDBOX, nri_events.CREATE_CONTAINER, nri_events.START_CONTAINER,
                       nri_events.UPDATE_CONTAINER, nri_events.UPDATE_POD_SANDBOX,
                       nri_events.VALIDATE_CONTAINER_ADJUSTMENT}  # a validator's rejection fails the create
    assert {event.name for event in EVENTS if event.updates} == {
        nri_events.CREATE_CONTAINER, nri_events.UPDATE_CONTAINER, nri_events.STOP_CONTAINER}
    # Methods plugins of v0.6-v0.8 implement are no notifications; the rest falls back to StateChange.
    assert {event.name for event in EVENTS if not event.notification} == {
        nri_events.CREATE_CONTAINER, nri_events.UPDATE_CONTAINER, nri_events.STOP_CONTAINER,
        nri_events.UPDATE_POD_SANDBOX, nri_events.VALIDATE_CONTAINER_ADJUSTMENT}


def test_the_nri_kind_s_scopes_and_failures_come_from_the_table() -> None:
    assert NRI.scope_names == nri_events.EVENT_NAMES and NRI.failing_scopes is FAILING
    assert nri_events.event_named("updatepodsandbox") == nri_events.UPDATE_POD_SANDBOX
    assert nri_events.event_named("UpdatePod") is None
