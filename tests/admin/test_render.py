"""runtimeproxyctl status's table (admin.render): the lines shown only when there is something to say."""

from __future__ import annotations

from runtimeproxy.admin.render import render_status
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin


def test_a_quiet_node_shows_no_missed_plugins_reconciliation_or_journal_line() -> None:
    table = render_status(admin.StatusResponse(version="1"))
    assert "MISSED PLUGINS" not in table and "RECONCILED" not in table and "JOURNAL" not in table


def test_missed_plugins_the_reconciliation_and_an_unwritable_journal_are_said() -> None:
    status = admin.StatusResponse(
        version="1",
        missed_plugins=admin.MissedPlugins(count=7, newest=[admin.MissedPlugin(
            id="0123456789abcdef", pod="default/web", container="app", hook="PreCreateContainer",
            plugins=["koordlet.json"], unix_seconds=1.0)]),
        reconciliation=admin.Reconciliation(interrupted_calls=3, removed=2, post_started=1, done=True,
                                            journal_problem="[Errno 28] No space left on device"))
    table = render_status(status)
    assert "MISSED PLUGINS  7 pods and containers were created without the answer of a plugin" in table
    (row,) = [line for line in table.splitlines() if "default/web" in line]
    assert "app" in row and "0123456789abc " in row and "PreCreateContainer" in row and "koordlet.json" in row
    assert ("RECONCILED  3 calls the previous proxy left in flight: 2 containers left Created removed, "
            "1 post-starts run, 0 left to the kubelet, 0 not found") in table
    assert "JOURNAL  cannot be written ([Errno 28] No space left on device)" in table


def test_a_reconciliation_still_running_says_so() -> None:
    table = render_status(admin.StatusResponse(version="1", reconciliation=admin.Reconciliation(
        interrupted_calls=1)))
    assert "RECONCILED  1 calls the previous proxy left in flight: reconciling" in table
