"""runtimeproxyctl's human output: the status, trace, toggle and shadow tables (admin.ctl is the command).

Reads only the admin service's answers (runtimeproxy.pb.admin); an NRI plugin is worded by its kind's row
(hooks.kinds: "all events" where a hook plugin has "all hooks"). `-o json` bypasses all of this.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from runtimeproxy.hooks import names, nri_events
from runtimeproxy.hooks.kinds import NRI, kind_of
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin


def render_status(status: admin.StatusResponse) -> str:
    lines = [f"runtimeproxy {status.version}, up {_duration(status.uptime_seconds)}"]
    if status.listen_endpoint:
        lines.append(f"serving {status.backend_mode} mode on {status.listen_endpoint}; admin {status.admin_endpoint}; "
                     f"state {status.state_dir or '(in memory)'}; metrics {status.metrics_address or 'off'}")
    lines += ["", "BACKENDS"]
    rows = [[b.role, b.endpoint, "yes" if b.reachable else "NO", f"{b.runtime_name} {b.runtime_version}".strip() or "-"]
            for b in status.backends]
    header = ["ROLE", "ENDPOINT", "REACHABLE", "RUNTIME"]
    if any(b.problem for b in status.backends):
        header.append("PROBLEM")
        for row, b in zip(rows, status.backends):
            row.append(b.problem or "-")
    lines += _table(header, rows)
    lines += ["", f"PLUGINS  (configs in {status.plugin_config_dir})"]
    if status.plugin_config_dir_problem:
        lines.append(f"config directory problem: {status.plugin_config_dir_problem}")
    if not status.plugins:
        lines.append("(none registered)")
    for plugin in status.plugins:
        lines += _plugin_lines(plugin)
    if status.nri_endpoint or status.nri_plugins:
        lines += ["", f"NRI PLUGINS  (socket {status.nri_endpoint or '-'})"]
        if not status.nri_plugins:
            lines.append("(none attached)")
        for nri_plugin in status.nri_plugins:
            lines += _nri_plugin_lines(nri_plugin)
    lines += ["", f"STORE  pods {status.store.pods}, containers {status.store.containers}"]
    lines += _missed_lines(status.missed_plugins) + _reconciliation_lines(status.reconciliation)
    lines += ["", "TOGGLES"]
    lines.append(render_toggles(status.toggles).rstrip("\n"))
    if status.shadow_settings:
        lines += ["", "SHADOW SETTINGS", render_shadows(status.shadow_settings).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _missed_lines(missed: admin.MissedPlugins) -> list[str]:
    """Objects created while a plugin failed under Ignore: their edits are missing (only shown when there are)."""
    if not missed.count:
        return []
    lines = [f"MISSED PLUGINS  {missed.count} pods and containers were created without the answer of a plugin that "
             "failed under Ignore (not re-applied; recreate them to apply it)"]
    rows = [[m.pod, m.container or "(pod)", m.id[:13], m.hook, ",".join(m.plugins), _when(m.unix_seconds)]
            for m in missed.newest]
    return lines + ["  " + line for line in _table(["POD", "CONTAINER", "ID", "HOOK", "PLUGINS", "WHEN"], rows)]


def _reconciliation_lines(done: admin.Reconciliation) -> list[str]:
    """The predecessor's interrupted calls (only after a crash mid-call) and a journal that cannot be written."""
    lines = []
    if done.interrupted_calls:
        outcome = (f"{done.removed} containers left Created removed, {done.post_started} post-starts run, "
                   f"{done.left} left to the kubelet, {done.not_found} not found" if done.done else "reconciling")
        lines.append(f"RECONCILED  {done.interrupted_calls} calls the previous proxy left in flight: {outcome}")
    if done.journal_problem:
        lines.append(f"JOURNAL  cannot be written ({done.journal_problem}): a crash mid-create would not be "
                     "reconciled")
    return lines


def _nri_plugin_lines(plugin: admin.NriPluginStatus) -> list[str]:
    state = "enabled" if plugin.enabled else f"DISABLED ({plugin.disabled_reason})"
    if plugin.shadow:
        state += ", in shadow (called, nothing carried out)"
    version = f", NRI {plugin.nri_version}" if plugin.nri_version else ""
    lines = [f"{plugin.name}  {state}  (toggle name {plugin.toggle_name})",
             f"  {plugin.kind}{version}, since {_when(plugin.connected_since_unix_seconds)}; "
             f"events {','.join(plugin.events) or '-'}"]
    return lines + _stats_table("EVENT", plugin.event_stats, plugin.shadow)


def _stats_table(first: str, stats: Sequence[admin.HookStats], shadow: bool = False) -> list[str]:
    if not stats:
        return []
    rows = [[h.hook, "on" if h.enabled else "OFF", str(h.calls), str(h.failures),
             _millis(h.p50_seconds), _millis(h.p99_seconds),
             f"{h.last_error} ({_when(h.last_error_unix_seconds)})" if h.last_error else "-"]
            for h in stats]
    header = [first, "STATE", "CALLS", "FAILED", "P50", "P99", "LAST ERROR"]
    if shadow or any(h.shadow_changes for h in stats):
        header.insert(4, "WOULD CHANGE/DIFFER")
        for row, h in zip(rows, stats):
            row.insert(4, f"{h.shadow_changes}/{h.shadow_disagreements}")
    return ["  " + line for line in _table(header, rows)]


def _plugin_lines(plugin: admin.PluginStatus) -> list[str]:
    state = "enabled" if plugin.enabled else f"DISABLED ({plugin.disabled_reason})"
    if plugin.shadow:
        state += "  IN SHADOW (called, never applied)"
    lines = [f"{plugin.file}  {state}"]
    if plugin.shadow_setting:
        lines.append(f"  shadow setting: {plugin.shadow_setting}")
    if plugin.endpoint:
        lines.append(f"  endpoint {plugin.endpoint}, policy {plugin.failure_policy}, "
                     f"timeout {plugin.timeout_seconds:g}s")
    if plugin.endpoint_problem:
        lines.append(f"  UNREACHABLE: {plugin.endpoint_problem}")
    if plugin.config_problem:
        lines.append(f"  config problem: {plugin.config_problem}")
    lines += [f"  config: {warning}" for warning in plugin.config_warnings]
    return lines + _stats_table("HOOK", plugin.hook_stats, plugin.shadow)


def render_shadows(settings: Sequence[admin.ShadowSetting]) -> str:
    if not settings:
        return "(no shadow settings: each plugin is in shadow as its config file says)\n"
    rows = [[f"{s.plugin} (staged)" if s.staged else s.plugin, "in shadow" if s.shadow else "promoted (applied)",
             _when(s.since_unix_seconds), s.author or "-"] for s in settings]
    lines = _table(["PLUGIN", "STATE", "SINCE", "BY"], rows)
    if any(s.staged for s in settings):
        lines.append("(staged: no plugin of that name is registered or attached; the setting applies when one is)")
    return "\n".join(lines) + "\n"


def render_trace(trace: admin.TraceResponse) -> str:
    """One pod's hooked calls, oldest first: per call its plugins in chain order, then what was sent."""
    lines = [f"pod {trace.pod_namespace}/{trace.pod_name}  uid {trace.pod_uid or '-'}  sandbox "
             f"{', '.join(sid[:13] for sid in trace.sandbox_ids) or '-'}"]
    if trace.containers:
        lines.append("containers: " + ", ".join(f"{c.name or '?'} ({c.id[:13]})" for c in trace.containers))
    count = len(trace.entries)
    kept = f"{count} hooked call{'' if count == 1 else 's'} (a ring of {trace.entries_per_pod} per pod"
    kept += f"; {trace.dropped_entries} older ones dropped)" if trace.dropped_entries else ")"
    lines.append(kept)
    width = max((len(s.plugin) for e in trace.entries for s in e.steps), default=0)
    for entry in trace.entries:
        lines += ["", f"{_when_precise(entry.unix_seconds)}  {entry.hook}  {entry.target}",
                  f"  request: {entry.request or '(empty)'}"]
        for step in entry.steps:
            lines += _step_lines(step, width, entry.hook in _CHANGING)
        for collision in entry.collisions:
            lines.append(f"  COLLISION {collision.field}: {collision.earlier_plugin} set {collision.earlier_value}, "
                         f"{collision.later_plugin} set {collision.later_value}; {collision.later_plugin} wins")
        if entry.sent_changes:
            lines.append(f"  => {entry.result}:")
            lines += [f"       {_change(c)}" for c in entry.sent_changes]
        else:
            lines.append(f"  => {entry.result}" + (" unchanged" if entry.result == "sent to the runtime" else ""))
    return "\n".join(lines) + "\n"


# The trace's hooks whose answers change the call: the pre-hooks and the NRI events the table says adjust, as the
# trace names them ("NRI CreateContainer").
_CHANGING = names.PRE_HOOKS | {NRI.trace_hook(event.name) for event in nri_events.EVENTS if event.adjusts}


def _step_lines(step: admin.TraceStep, width: int, pre_hook: bool) -> list[str]:
    outcome = step.outcome + (" (shadow: not applied)" if step.shadow else "")
    head = f"  {step.plugin.ljust(width)}  {outcome}"
    if step.latency_seconds:
        head += f"  {step.latency_seconds * 1000:.1f}ms"
    if step.code or step.details:
        head += f"  {step.code}: {step.details}" if step.code else f"  {step.details}"
    indent = " " * (width + 4)
    verb = "would set" if step.shadow else "set"
    lines = [head]
    lines += [f"{indent}{verb} {_change(c)}" for c in step.changes]
    lines += [f"{indent}differs from applied: {c.field}: applied {c.before}, shadow {c.after}"
              for c in step.disagreements]
    if pre_hook and step.outcome == "ok" and not step.changes:
        lines.append(f"{indent}{'would change' if step.shadow else 'changed'} nothing")
    return lines


def _change(change: admin.FieldChange) -> str:
    return f"{change.field}: {change.before} -> {change.after}"


def _when_precise(unix_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def render_toggles(toggles: Sequence[admin.Toggle]) -> str:
    if not toggles:
        return "(none: every registered hook is on)\n"
    rows = [[_toggled_plugin(t), _toggled_hooks(t), _when(t.since_unix_seconds), t.author or "-", t.reason]
            for t in toggles]
    lines = _table(["PLUGIN", "HOOKS OFF", "SINCE", "BY", "REASON"], rows)  # an NRI plugin's: events
    if any(t.staged for t in toggles):
        lines.append("(staged: no config file of that name is present; the toggle applies when one appears)")
    return "\n".join(lines) + "\n"


def _toggled_plugin(toggle: admin.Toggle) -> str:
    if toggle.plugin == "*":
        return "* (all plugins)"
    return f"{toggle.plugin} (staged)" if toggle.staged else toggle.plugin


def _toggled_hooks(toggle: admin.Toggle) -> str:
    if toggle.hooks:
        return ",".join(toggle.hooks)
    every = f"all {kind_of(toggle.plugin).scope_word}"
    return f"{every} but {','.join(toggle.except_hooks)}" if toggle.except_hooks else every


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]


def _millis(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms" if seconds else "-"


def _when(unix_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
