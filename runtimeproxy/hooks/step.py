"""One chain step, the same for every plugin kind (hooks.kinds): toggle, shadow, timing, statistics, trace, failure.

The hook dispatcher (hooks.dispatcher) and the NRI registry (runtimeproxy.nri) call their plugins in their own
protocol, then hand each call's outcome here; what differs per kind comes from its row in hooks.kinds, never
from a branch on the kind:

- toggled off: `toggled_off` asks the node's toggles under the kind's toggle name (`koordlet.json`,
  `nri:10-name`) and, traced, shows the plugin `skipped: toggled off` with the toggle's reason;
- shadow: `in_shadow` is the operator's word (`runtimeproxyctl shadow NAME`) over the plugin's own setting;
- timing and statistics: `started()` then `ok` or `failed` record the latency and the outcome (keyed by the
  plugin's own name and the scope: a hook, or an NRI event) and the trace step (under the toggle name);
- failure: `fails_call` applies the kind's failure rule, `failure` builds the one `HookFailed` the frontends turn
  into their error, worded in the kind's terms;
- end of the chain: `finish` counts the shadows' outcomes (each by its own kind), applies the ownership rule to
  collisions (counted and logged when the later plugin wins, across kinds too; a kind whose conflicts fail the
  call failed it while folding) and keeps the entry in the pod's trace.

One kubelet call is one chain: a CreateContainer's or an UpdateContainerResources' hook plugins and then its NRI
plugins record their steps into one `ChainRecord` (the hook chain's, hooks.dispatcher.Dispatcher.chain), which is
finished once: one trace entry listing both kinds' steps, collisions across kinds named with both owners.

Validation (hooks.validate) in two steps. Per answer, before it is folded, each protocol checks what only the answer
shows (hooks.validate.answer_only_problem; in shadow the whole answer alone): its refusal is a
`failed(..., refused=True)` step. Once over the result, after the chain's last plugin of any kind
(hooks.chain.ChainRecord.settle): a problem is blamed on the plugin that set the offending field last (of two
related fields, the later owner), whose kind refuses its answer through `refused`, under the kind's failure rule
(the call fails; or, policy Ignore, the result is folded again without that answer and validated again).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Protocol

import grpc
from google.protobuf.message import Message

from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.kinds import Ownership, PluginKind
from runtimeproxy.hooks.stats import OK, CallStats
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.hooks.trace import (
    FAILED, OK as STEP_OK, REFUSED, SKIPPED_TOGGLE, Collision, Step, TraceRecorder, field_family, pod_key,
)
from runtimeproxy.hooks.validate import printable

log = logging.getLogger(__name__)


class PluginRef(Protocol):
    """What a failure names of a plugin, of any kind."""

    @property
    def name(self) -> str: ...

    @property
    def endpoint(self) -> Path: ...


class PointRef(Protocol):
    """What a failure names of the call: a hook point, or an NRI event as the trace shows it."""

    @property
    def name(self) -> str: ...


class HookFailed(Exception):
    """A plugin failed a call its kind's failure rule fails: the frontend fails the call (the core's one failure)."""

    def __init__(self, point: PointRef, plugin: PluginRef, code: grpc.StatusCode, details: str,
                 field: str = "", text: str = "", clause: str = " under failure-policy Fail") -> None:
        """`text`: the kind's wording (KindSteps.failure); without it, a hook plugin's under failure-policy Fail.
        `clause`: why the failure fails the call, as the trace's result says it (the kind's `fails_clause`)."""
        self.point = point
        self.clause = clause
        self.logged = False  # logged where it was raised (an NRI plugin's), not again by the hook point
        self.plugin = plugin
        self.code = code
        self.details = details = printable(details)  # the CRI status message the kubelet gets and logs
        self.field = field  # the answer's offending field, when the answer was invalid
        super().__init__(text or f"runtimeproxy: {point.name} hook of plugin {plugin.name} "
                                 f"(unix://{plugin.endpoint}) failed with failure-policy Fail: {code.name}: {details}")


class StepToggles(Protocol):
    """What a step asks of the node's toggles (hooks.toggles.Toggles)."""

    def allows(self, plugin: str, hook: str) -> bool: ...

    def reason_for(self, plugin: str, hook: str | None = None) -> str: ...

    def shadow_override(self, plugin: str) -> bool | None: ...


class KindSteps:
    """The chain steps of one plugin kind: its rows of the statistics, the node's toggles and the pod trace it
    records into (all three shared by every kind)."""

    def __init__(self, kind: PluginKind, toggles: StepToggles | None = None, trace: TraceRecorder | None = None,
                 stats: CallStats | None = None) -> None:
        self.kind = kind
        self.toggles: StepToggles = toggles if toggles is not None else Toggles(None)
        self.trace = trace if trace is not None else TraceRecorder()
        self.stats = (stats if stats is not None else CallStats()).of_kind(kind.name)  # its rows of the one table
        self._collisions_logged: set[tuple[str, str, str, str]] = set()

    def record(self, scope: str, request: Message, traced: bool = True) -> ChainRecord:
        return ChainRecord(self.kind.trace_hook(scope), request, traced and self.trace.enabled)

    def allows(self, plugin: str, scope: str) -> bool:
        return self.toggles.allows(self.kind.toggle_name(plugin), scope)

    def toggled_off(self, record: ChainRecord, plugin: str, scope: str) -> bool:
        """Off by the node's toggles: not called, and (traced) shown skipped with the toggle's reason."""
        name = self.kind.toggle_name(plugin)
        if self.toggles.allows(name, scope):
            return False
        if record.traced:
            record.step(name, SKIPPED_TOGGLE, details=self.toggles.reason_for(name, scope))
        return True

    def in_shadow(self, plugin: str, configured: bool = False) -> bool:
        """On trial: the operator's `shadow`/`unshadow` over the plugin's own setting (a hook config's key)."""
        override = self.toggles.shadow_override(self.kind.toggle_name(plugin))
        return configured if override is None else override

    @staticmethod
    def started() -> float:
        return time.perf_counter()

    def ok(self, record: ChainRecord, plugin: str, scope: str, started: float, shadow: bool,
           details: str = "") -> float:
        seconds = time.perf_counter() - started
        self.stats.record(plugin, scope, OK, seconds)
        name = self.kind.toggle_name(plugin)
        record.step(name, STEP_OK, seconds, shadow, details=details)
        record.of_kind(name, self.kind)
        return seconds

    def shadowed(self, record: ChainRecord, plugin: str, scope: str, before: Message, would_be: Message) -> None:
        """The last ok step (of `plugin`, in shadow) would have left `would_be`: counted here when finished."""
        stats = self.stats
        record.shadowed(before, would_be,
                        lambda changed, disagreed: stats.shadowed(plugin, scope, changed, disagreed))

    def failed(self, record: ChainRecord, plugin: str, scope: str, started: float, shadow: bool, outcome: str,
               details: str, refused: bool = False) -> float:
        """`outcome`: a gRPC code's name, an NRI code's, or the kind's own word ("detached", "conflict", ...)."""
        seconds = time.perf_counter() - started
        self.stats.record(plugin, scope, outcome, seconds, details)
        record.step(self.kind.toggle_name(plugin), REFUSED if refused else FAILED, seconds, shadow, outcome, details)
        return seconds

    def refused(self, step: Step, plugin: str, scope: str, outcome: str, details: str, changed: bool = False) -> None:
        """A step taken as ok whose answer the chain's result refused (hooks.chain.ChainRecord.settle): the step
        says refused with `outcome` and why, the statistics count the call under `outcome` instead of ok."""
        self.stats.refused(plugin, scope, outcome, details, changed)
        step.outcome, step.code, step.details, step.changes = REFUSED, outcome, printable(details), ()

    def fails_call(self, scope: str, shadow: bool, pre_hook: bool = True, policy_fails: bool = True) -> bool:
        """A failure of this call fails the call (never in shadow); the kind's failure rule says when."""
        return not shadow and self.kind.error_fails_call(scope, pre_hook, policy_fails)

    def failure(self, point: PointRef, scope: str, plugin: PluginRef, code: grpc.StatusCode, details: str,
                field: str = "") -> HookFailed:
        text = self.kind.failure_text(point.name, scope, plugin.name, str(plugin.endpoint), code.name,
                                      printable(details))
        return HookFailed(point, plugin, code, details, field, text, self.kind.fails_clause())

    @staticmethod
    def failed_result(failure: HookFailed) -> str:
        """The trace's result of a chain a failure ended (by a plugin of any kind)."""
        return f"not sent: {failure.plugin.name} failed{failure.clause} ({failure.code.name}); the call fails"

    def finish(self, record: ChainRecord, scope: str, final: Message, result: str, written_back: bool,
               failed: bool = False) -> None:
        """Shadows' outcomes counted, collisions by the ownership rule (not for a call a failure ended: no value
        stood), the run kept in the pod's trace."""
        later_wins = self.kind.ownership is Ownership.LATER_WINS
        collisions = record.collisions() if later_wins or record.traced else []  # else: a conflict failed the fold
        if later_wins and not failed:
            for collision in record.counted_collisions(collisions):
                self._collided(scope, collision)
        if record.has_shadows:
            for outcome in record.shadow_outcomes(final):
                if outcome.tally is not None:
                    outcome.tally(outcome.changed, bool(outcome.disagreements))
        if record.traced:
            who = pod_key(record.original)
            self.trace.record(who, record.entry(who.target, final, collisions, result, written_back))

    def _collided(self, scope: str, collision: Collision) -> None:
        """Counted every time; logged at warning the first time per scope, plugin pair and field."""
        earlier, later, field = collision.earlier_plugin, collision.later_plugin, collision.field
        key = (scope, earlier, later, field_family(field))
        self.stats.collided(*key)
        level = logging.DEBUG if key in self._collisions_logged else logging.WARNING
        self._collisions_logged.add(key)
        log.log(level, "plugins %s and %s both set %s on %s; %s's value stands (the later plugin in file-name order "
                "wins; see runtimeproxyctl trace)", earlier, later, field, scope, later,
                extra={"plugin": later, "hook": scope, "field": field, "overridden_plugin": earlier})
