"""What `runtimeproxyctl trace POD` shows: one pod's decision trace (runtimeproxy.hooks.trace) as the admin
API's TraceResponse. Reading only."""

from __future__ import annotations

from collections.abc import Iterable

from runtimeproxy.hooks.changes import FieldChange
from runtimeproxy.hooks.trace import PodTrace, TraceEntry, TraceRecorder, shown
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin


def not_traced(query: str, recorder: TraceRecorder) -> str:
    """The NOT_FOUND message: why there may be no trace."""
    if not recorder.enabled:
        return "the trace is off on this proxy (--hook-trace-entries=0)"
    return (f"no trace of a pod {query!r} (by namespace/name, pod uid, sandbox or container ID): {recorder.pod_count} "
            "pods traced; only hooked calls are traced, a removed pod's trace is dropped, and a proxy start "
            "begins with none")


def trace_response(pod: PodTrace, recorder: TraceRecorder) -> admin.TraceResponse:
    return admin.TraceResponse(
        pod_uid=pod.uid, pod_namespace=pod.namespace, pod_name=pod.name,
        sandbox_ids=pod.sandbox_ids,
        containers=[admin.TracedContainer(id=cid, name=name) for cid, name in pod.containers.items()],
        entries=[_entry(entry) for entry in pod.entries],
        dropped_entries=pod.dropped, entries_per_pod=recorder.entries_per_pod,
    )


def _entry(entry: TraceEntry) -> admin.TraceEntry:
    return admin.TraceEntry(
        unix_seconds=entry.unix_seconds, hook=entry.hook, target=entry.target, request=entry.request_line(),
        steps=[admin.TraceStep(plugin=s.plugin, outcome=s.outcome, shadow=s.shadow, code=s.code, details=s.details,
                               latency_seconds=s.seconds, changes=_changes(s.changes),
                               disagreements=_changes(s.disagreements)) for s in entry.steps],
        collisions=[admin.Collision(field=c.field, earlier_plugin=c.earlier_plugin,
                                    earlier_value=shown(c.earlier_value), later_plugin=c.later_plugin,
                                    later_value=shown(c.later_value))
                    for c in entry.collisions],
        result=entry.result, sent_changes=_changes(entry.sent_changes),
    )


def _changes(changes: Iterable[FieldChange]) -> list[admin.FieldChange]:
    return [admin.FieldChange(field=c.field, before=shown(c.before), after=shown(c.after)) for c in changes]
