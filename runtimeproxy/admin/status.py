"""What `runtimeproxyctl status` shows, read from the running proxy's parts.

Builds the admin API's StatusResponse from the frontend's report (runtimeproxy.report), the plugin registry,
the node's toggles, the dispatcher's call statistics, the store, and the NRI plugins the hook service's
NRI plugins (hooks.nri_plugins) report. Reading only:
nothing here changes the proxy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from runtimeproxy import __version__
from runtimeproxy.endpoints import EndpointError, listener_problem, parse_unix_endpoint
from runtimeproxy.hooks.kinds import HOOK, NRI
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.stats import HookCallStats
from runtimeproxy.hooks.toggles import ALL_PLUGINS, Toggle, scope_names
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin
from runtimeproxy.hooks.config import PluginConfig
from runtimeproxy.hooks.plugin import endpoint_problem
from runtimeproxy.options import ProxyOptions
from runtimeproxy.report import BackendProblem, FrontendReport


@dataclass
class ProxyParts:
    """The pieces of a running proxy the operator endpoints read: the frontend's report on its backend and
    calls (whichever frontend runs), the hook core, and the settings."""

    report: FrontendReport
    hooks: HookService
    started_monotonic: float
    options: ProxyOptions | None = None  # the endpoints status names

    def backend_problems(self) -> list[BackendProblem]:
        return self.report.backend_problems()

    @property
    def uptime_seconds(self) -> float:
        return time.monotonic() - self.started_monotonic


async def status(parts: ProxyParts) -> admin.StatusResponse:
    hooks = parts.hooks
    return admin.StatusResponse(
        version=__version__,
        uptime_seconds=parts.uptime_seconds,
        backends=await backend_statuses(parts.report),
        plugins=plugin_statuses(hooks),
        store=admin.StoreStatus(pods=hooks.store.pod_count, containers=hooks.store.container_count),
        toggles=toggle_messages(hooks),
        plugin_config_dir=str(hooks.registry.config_dir),
        plugin_config_dir_problem=hooks.registry.directory_problem(),
        nri_plugins=nri_plugin_statuses(hooks),
        shadow_settings=shadow_messages(hooks),
        missed_plugins=missed_plugins(hooks),
        reconciliation=reconciliation(hooks),
        **own_endpoints(parts.options),
    )


def missed_plugins(hooks: HookService) -> admin.MissedPlugins:
    """Pods and containers the runtime still has that were created without a plugin's answer (hooks.missed)."""
    return admin.MissedPlugins(count=len(hooks.missed), newest=[
        admin.MissedPlugin(id=m.object_id, pod=m.pod, container=m.container, hook=m.hook, plugins=m.plugins,
                           unix_seconds=m.unix_seconds) for m in hooks.missed.newest()])


def reconciliation(hooks: HookService) -> admin.Reconciliation:
    """What became of the calls the predecessor left in flight (hooks.reconcile), and the journal's health."""
    done = hooks.reconciled
    answer = admin.Reconciliation(interrupted_calls=len(hooks.interrupted), journal_problem=hooks.journal.problem)
    if done is not None:
        answer.done = True
        answer.removed, answer.post_started = len(done.removed), len(done.post_started)
        answer.left, answer.not_found = len(done.left), len(done.not_found)
    return answer


def own_endpoints(options: ProxyOptions | None) -> dict[str, str]:
    """The proxy's sockets, state directory and metrics address, as status shows them ("" for off)."""
    if options is None:
        return {}
    return {"listen_endpoint": str(options.listen_path), "backend_mode": options.backend_mode,
            "admin_endpoint": str(options.admin_path or ""), "state_dir": str(options.state_dir or ""),
            "metrics_address": options.metrics_address or "", "nri_endpoint": str(options.nri_socket or "")}


async def backend_statuses(report: FrontendReport) -> list[admin.BackendStatus]:
    problems = {(backend.role, backend.endpoint): backend.problem for backend in report.backend_problems()}
    return [
        admin.BackendStatus(role=backend.role, endpoint=backend.endpoint, reachable=backend.reachable,
                            runtime_name=backend.runtime_name, runtime_version=backend.runtime_version,
                            problem="" if backend.reachable else
                            _backend_problem(backend.endpoint, problems.get((backend.role, backend.endpoint))))
        for backend in await report.backend_statuses()
    ]


def _backend_problem(endpoint: str, health: str | None) -> str:
    """What readiness says (unreachable, not answering), and why when nothing listens on its socket."""
    try:
        unanswered = listener_problem(parse_unix_endpoint(endpoint))
    except EndpointError:
        unanswered = ""
    return ": ".join(part for part in (health or "not answering", unanswered) if part)


def plugin_statuses(hooks: HookService) -> list[admin.PluginStatus]:
    configs = {plugin.name: plugin.config for plugin in hooks.registry.plugins}
    problems = hooks.registry.config_problems()
    return [
        _plugin_status(name, configs.get(name), problems.get(name, ""), hooks)
        for name in sorted(configs.keys() | problems.keys())
    ]


def _plugin_status(
    name: str, config: PluginConfig | None, problem: str, hooks: HookService
) -> admin.PluginStatus:
    toggles, stats = hooks.toggles, hooks.stats.of_kind(HOOK.name)
    answer = admin.PluginStatus(file=name, config_problem=problem)
    if config is None:
        answer.enabled = False
        answer.disabled_reason = "no valid config"
        return answer
    answer.endpoint = f"unix://{config.endpoint}"
    answer.endpoint_problem = endpoint_problem(config.endpoint, hooks.registry.owners)
    answer.failure_policy = config.failure_policy.value
    answer.timeout_seconds = config.timeout_seconds
    answer.hooks.extend(config.ordered_hooks)
    answer.config_warnings.extend(config.warnings)
    override = toggles.shadow_override(name)
    answer.shadow = config.shadow if override is None else override
    setting = next((s for s in toggles.shadow_settings if s.plugin == name), None)
    if setting is not None:
        answer.shadow_setting = setting.describe()
    enabled_hooks = [hook for hook in config.ordered_hooks if toggles.allows(name, hook)]
    answer.enabled = bool(enabled_hooks)
    if not enabled_hooks:
        answer.disabled_reason = toggles.reason_for(name) or toggles.reason_for(name, config.ordered_hooks[0])
    answer.hook_stats.extend(scope_stats(hook, toggles.allows(name, hook), stats.of(name, hook))
                             for hook in config.ordered_hooks)
    return answer


def scope_stats(scope: str, enabled: bool, calls: HookCallStats) -> admin.HookStats:
    """One plugin's calls of one hook or event, whatever its kind."""
    return admin.HookStats(
        hook=scope, enabled=enabled, calls=calls.calls, failures=calls.failures, last_error=calls.last_error,
        last_error_unix_seconds=calls.last_error_unix_seconds, p50_seconds=calls.percentile_seconds(0.50),
        p99_seconds=calls.percentile_seconds(0.99), shadow_changes=calls.shadow_changes,
        shadow_disagreements=calls.shadow_disagreements)


def nri_plugin_statuses(hooks: HookService) -> list[admin.NriPluginStatus]:
    """The attached NRI plugins, their toggle state and their calls by event (as a hook plugin's by hook: enabled
    while one of its events is on; each event on or OFF)."""
    toggles, stats = hooks.toggles, hooks.stats.of_kind(NRI.name)
    answers = []
    for plugin in hooks.nri.statuses():
        name = plugin.toggle_name
        # A plugin that subscribed to nothing is asked about as a whole ("" is no event: only a whole toggle).
        enabled_events = [event for event in plugin.events or ("",) if toggles.allows(name, event)]
        reason = "" if enabled_events else toggles.reason_for(name) or toggles.reason_for(name, plugin.events[0])
        answer = admin.NriPluginStatus(
            name=plugin.name, toggle_name=name, kind=plugin.kind, events=plugin.events,
            connected_since_unix_seconds=plugin.since_unix_seconds, nri_version=plugin.protocol_version,
            enabled=bool(enabled_events), disabled_reason=reason, shadow=toggles.shadow_override(name) is True)
        answer.event_stats.extend(scope_stats(event, event in enabled_events, stats.of(plugin.name, event))
                                  for event in plugin.events)
        answers.append(answer)
    return answers


def _present_names(hooks: HookService) -> frozenset[str]:
    """What a toggle or shadow setting may name now: config files, attached NRI plugins (else it is staged)."""
    return hooks.registry.config_file_names() | {plugin.toggle_name for plugin in hooks.nri.statuses()}


def toggle_messages(hooks: HookService) -> list[admin.Toggle]:
    present = _present_names(hooks)
    return [toggle_message(toggle, staged=toggle.plugin not in present and toggle.plugin != ALL_PLUGINS)
            for toggle in hooks.toggles.active]


def toggle_message(toggle: Toggle, staged: bool = False) -> admin.Toggle:
    return admin.Toggle(
        plugin=toggle.plugin,
        hooks=[toggle.hook] if toggle.hook else [],
        reason=toggle.reason,
        since_unix_seconds=toggle.since_unix_seconds,
        author=toggle.author,
        staged=staged,
        except_hooks=[hook for hook in scope_names(toggle.plugin) if hook in toggle.hooks_on],
    )


def shadow_messages(hooks: HookService) -> list[admin.ShadowSetting]:
    present = _present_names(hooks)
    return [admin.ShadowSetting(plugin=s.plugin, shadow=s.shadow, since_unix_seconds=s.since_unix_seconds,
                                author=s.author, staged=s.plugin not in present)
            for s in hooks.toggles.shadow_settings]
