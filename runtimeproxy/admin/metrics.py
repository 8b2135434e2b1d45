"""The proxy's Prometheus series (prefix `runtimeproxy_`), built from its parts at scrape time.

Nothing is counted twice: the series are read from the frontend's call counters (runtimeproxy.report), the
hook core's one table of plugin calls (hooks.stats, read kind by kind: CALL_FAMILIES), the plugin registry, the
toggles, the store, the NRI plugins' statuses (hooks.nri_plugins, through the hook service) and the backend
channels when Prometheus scrapes. Labels are method, plugin file, hook and
code names only (bounded; no pod or container IDs). prometheus_client does the text
exposition.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from runtimeproxy import __version__
from runtimeproxy.admin.status import ProxyParts
from runtimeproxy.hooks.nri_events import EVENT_NAMES
from runtimeproxy.hooks.kinds import HOOK, NRI, PluginKind
from runtimeproxy.hooks.stats import KindStats, LatencyHistogram
from runtimeproxy.hooks.names import HOOK_NAMES

PREFIX = "runtimeproxy"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ProxyCollector(Collector):
    def __init__(self, parts: ProxyParts) -> None:
        self._parts = parts

    def collect(self) -> Iterator[Metric]:
        yield from self._frontend_calls()
        yield from self._plugin_calls()
        yield from self._plugins()
        yield from self._nri_plugins()
        yield from self._backend_and_store()
        info = GaugeMetricFamily(f"{PREFIX}_build_info", "Version of the running proxy; always 1.",
                                 labels=["version", "python_version"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info

    def _frontend_calls(self) -> Iterator[Metric]:
        for series in self._parts.report.call_series():
            labels = list(series.key_labels)
            calls = CounterMetricFamily(f"{PREFIX}_{series.name}", series.help,
                                        labels=[*labels, series.outcome_label])
            latency = HistogramMetricFamily(f"{PREFIX}_{series.latency_name}", series.latency_help, labels=labels)
            tally = series.tally
            tally.fold()
            for counted, count in sorted(tally.calls.items()):
                calls.add_metric(list(counted), count)
            for key, histogram in sorted(tally.latency.items()):
                _add_histogram(latency, list(key), histogram)
            yield calls
            yield latency

    def _plugin_calls(self) -> Iterator[Metric]:
        """Every plugin kind's calls from the core's one table, each kind under its published names."""
        table = self._parts.hooks.stats
        for names in CALL_FAMILIES:
            yield from _kind_calls(names, table.of_kind(names.kind.name))
        collisions = CounterMetricFamily(
            f"{PREFIX}_hook_collisions", "Calls where two plugins of one chain set a field to different values "
            "(the later plugin's stands), by hook, plugin pair and field (map keys as [*]).",
            labels=["hook", "plugin", "overridden_plugin", "field"])
        for (hook, earlier, later, family), count in sorted(table.collisions.items()):
            collisions.add_metric([hook, later, earlier, family], count)
        yield collisions
        evictions = CounterMetricFamily(
            f"{PREFIX}_nri_evictions", "Containers NRI plugins asked to evict, by plugin and outcome (ok: stopped; "
            "failed; unknown: not a container the proxy knows; shadow: the plugin is in shadow, not carried out).",
            labels=["plugin", "outcome"])
        for (plugin, outcome), count in sorted(table.evictions.items()):
            evictions.add_metric([plugin, outcome], count)
        yield evictions

    def _plugins(self) -> Iterator[Metric]:
        hooks = self._parts.hooks
        plugins = hooks.registry.plugins
        allows = hooks.toggles.allows
        disabled = sum(1 for p in plugins if not any(allows(p.name, hook) for hook in p.config.hooks))
        yield GaugeMetricFamily(f"{PREFIX}_plugins_registered", "Plugins with a valid config file.",
                                value=len(plugins))
        yield GaugeMetricFamily(f"{PREFIX}_plugins_disabled",
                                "Registered plugins whose every hook is toggled off on this node.", value=disabled)
        hooks_off = GaugeMetricFamily(f"{PREFIX}_hooks_disabled",
                                      "Registered hooks toggled off on this node, by hook.", labels=["hook"])
        for hook in HOOK_NAMES:
            off = sum(1 for p in hooks.registry.plugins_for(hook) if not allows(p.name, hook))
            hooks_off.add_metric([hook], off)
        yield hooks_off
        yield GaugeMetricFamily(f"{PREFIX}_plugin_configs_rejected",
                                "Plugin config files whose current content is invalid (last good version kept).",
                                value=len(hooks.registry.config_problems()))

    def _nri_plugins(self) -> Iterator[Metric]:
        nri = self._parts.hooks.nri
        yield GaugeMetricFamily(f"{PREFIX}_nri_plugins", "NRI plugins attached (registered, configured, "
                                "synchronized).", value=len(nri.statuses()))
        yield from self._nri_toggles()

    def _nri_toggles(self) -> Iterator[Metric]:
        """As plugins_disabled and hooks_disabled, for the attached NRI plugins and the events they subscribed."""
        hooks = self._parts.hooks
        allows = hooks.toggles.allows
        attached = hooks.nri.statuses()
        yield GaugeMetricFamily(f"{PREFIX}_nri_plugins_disabled", "Attached NRI plugins whose every subscribed "
                                "event is toggled off on this node.",
                                value=sum(1 for p in attached if not any(allows(p.toggle_name, event)
                                                                         for event in p.events or ("",))))
        events_off = GaugeMetricFamily(f"{PREFIX}_nri_events_disabled", "Subscribed events of attached NRI plugins "
                                       "toggled off on this node, by event.", labels=["event"])
        for event in EVENT_NAMES:
            events_off.add_metric([event], sum(1 for p in attached if event in p.events
                                               and not allows(p.toggle_name, event)))
        yield events_off

    def _backend_and_store(self) -> Iterator[Metric]:
        reachable = GaugeMetricFamily(f"{PREFIX}_backend_reachable", "1 while the backend runtime socket is "
                                      "connected and answers the liveness probe (gRPC health SERVING).",
                                      labels=["role"])
        for backend in self._parts.backend_problems():
            reachable.add_metric([backend.role], 0 if backend.problem else 1)
        yield reachable
        store = self._parts.hooks.store
        yield GaugeMetricFamily(f"{PREFIX}_store_pods", "Pods in the hook context store.", value=store.pod_count)
        yield GaugeMetricFamily(f"{PREFIX}_store_containers", "Containers in the hook context store.",
                                value=store.container_count)
        missed = self._parts.hooks.missed
        by_plugin = GaugeMetricFamily(f"{PREFIX}_objects_missing_plugin", "Pods and containers the runtime still has "
                                      "that were created without the answer of a plugin failing under Ignore.",
                                      labels=["plugin"])
        for plugin, count in sorted(missed.by_plugin().items()):
            by_plugin.add_metric([plugin], count)
        yield by_plugin
        yield CounterMetricFamily(f"{PREFIX}_objects_missed_plugin", "Pods and containers created without the answer "
                                  "of a plugin failing under Ignore, since the start.", value=missed.noted_total)
        yield GaugeMetricFamily(f"{PREFIX}_uptime_seconds", "Seconds since the proxy started.",
                                value=self._parts.uptime_seconds)


@dataclass(frozen=True)
class CallFamilies:
    """One plugin kind's call series: their names and help as first published (hook plugins' without a kind
    word for the shadow series, NRI plugins' with `nri_`)."""

    kind: PluginKind
    calls: str
    calls_help: str
    scope_label: str  # "hook", "event"
    latency: str
    latency_help: str
    shadow_prefix: str
    plugins: str  # as the help names them
    changed_what: str  # what a change changes
    changes: str = ""  # the series of answers that changed the call, if the kind has one
    changes_help: str = ""


CALL_FAMILIES = (
    CallFamilies(HOOK, "hook_calls", "Hook plugin calls, by plugin file, hook and outcome (ok or the gRPC code).",
                 "hook", "hook_call_duration_seconds", "Time a plugin took to answer a hook.", "", "plugins",
                 "request", "hook_changes_applied", "Pre-hook answers that changed the CRI request."),
    CallFamilies(NRI, "nri_calls", "NRI plugin calls, by plugin (index-name), NRI event and outcome (ok, detached, "
                 "conflict, refused, invalid or the ttrpc code).", "event", "nri_call_duration_seconds",
                 "Time an NRI plugin took to answer an event.", "nri_", "NRI plugins", "container"),
)


def _kind_calls(names: CallFamilies, rows: KindStats) -> Iterator[Metric]:
    labels = ["plugin", names.scope_label]
    calls = CounterMetricFamily(f"{PREFIX}_{names.calls}", names.calls_help, labels=[*labels, "outcome"])
    latency = HistogramMetricFamily(f"{PREFIX}_{names.latency}", names.latency_help, labels=labels)
    changes = CounterMetricFamily(f"{PREFIX}_{names.changes}", names.changes_help, labels=labels) \
        if names.changes else None
    shadow_changes = CounterMetricFamily(
        f"{PREFIX}_{names.shadow_prefix}shadow_changes", f"Answers of {names.plugins} in shadow that would have "
        f"changed the {names.changed_what} (never applied).", labels=labels)
    disagreements = CounterMetricFamily(
        f"{PREFIX}_{names.shadow_prefix}shadow_disagreements", f"Answers of {names.plugins} in shadow that would "
        "have set a field to another value than the one applied.", labels=labels)
    for (plugin, scope), stats in rows.items():
        for outcome, count in sorted(stats.outcomes.items()):
            calls.add_metric([plugin, scope, outcome], count)
        if stats.latency.count:
            _add_histogram(latency, [plugin, scope], stats.latency)
        if changes is not None and stats.changes:
            changes.add_metric([plugin, scope], stats.changes)
        if stats.shadow_changes or stats.shadow_disagreements:
            shadow_changes.add_metric([plugin, scope], stats.shadow_changes)
            disagreements.add_metric([plugin, scope], stats.shadow_disagreements)
    yield calls
    yield latency
    if changes is not None:
        yield changes
    yield shadow_changes
    yield disagreements


def _add_histogram(family: HistogramMetricFamily, labels: list[str], histogram: LatencyHistogram) -> None:
    family.add_metric(labels, [(bound, float(count)) for bound, count in histogram.cumulative()],
                      histogram.total_seconds)


class ProxyMetrics:
    """A private registry (not prometheus_client's global one) holding the proxy's collector."""

    def __init__(self, parts: ProxyParts) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProxyCollector(parts))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
