"""One NRI plugin's call of an event whose answer changes the call (hooks.nri_events' `adjusts`: CreateContainer,
UpdateContainer), as one step of the core's chain (hooks.step, NRI's row of hooks.kinds).

containerd/nri's plugin.go owns one plugin's connection (here nri.session); this is what the host makes of one
call: the container as the plugins before it left it, the request, the answer folded into the adjustments
(nri.adjust: what is applied, what is refused, NRI's conflict rule) or, in shadow, into a private copy, timed,
counted and traced; what the answer asks of other containers is returned for the host to carry out (nri.result).
A timeout or a broken connection detaches the plugin (`drop`) and the call goes on; an error, a conflict, a refused
field or an invalid answer fails it (HookFailed, worded as NRI's failure by hooks.kinds).

Validation (hooks.validate), as a hook plugin's answer: when the answer comes, what it shows by itself (a kubelet
key changed, what it adds); the values it leaves, as the container is (no projection through the hook merge), once
over the chain's result (hooks.chain.ChainRecord.settle, which nri.host calls after the last plugin): blamed on
this plugin, its answer fails the call (`refusal`). An answer in shadow, never folded, is judged whole when it
comes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from runtimeproxy.hooks.chain import Refusal
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.hook_messages import container_answer
from runtimeproxy.hooks.model import Resources
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.kinds import NRI
from runtimeproxy.hooks.step import HookFailed, KindSteps
from runtimeproxy.hooks.trace import Step
from runtimeproxy.hooks.validate import Problem, answer_only_problem, result_problem
from runtimeproxy.nri import convert
from runtimeproxy.nri.adjust import AdjustmentConflict, AdjustmentError, Adjustments
from runtimeproxy.nri.events import WireEvent
from runtimeproxy.nri.explain import EventRecord, asked_of_others, edit_changes
from runtimeproxy.nri.result import Asked, Results
from runtimeproxy.nri.validation import Collected
from runtimeproxy.nri.session import PluginDetached, PluginFailed, PluginSession
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NriPluginRef:
    """An NRI plugin as a failure names it (hooks.step.PluginRef)."""

    name: str
    endpoint: Path


@dataclass(frozen=True)
class NriEventRef:
    """An NRI event as a failure names it (hooks.step.PointRef): "NRI CreateContainer", as the trace does."""

    name: str


def failure_outcome(error: BaseException) -> tuple[str, str]:
    """A failed call's outcome as the statistics and the trace count it: "detached", "timeout" (no answer, the
    plugin kept attached by its failure policy), the code the plugin answered, or "conflict", "refused" (a field the request cannot carry), "invalid" (the answer fails
    validation); and its message."""
    if isinstance(error, PluginFailed):
        outcome = "detached" if isinstance(error, PluginDetached) else "timeout"
        message = error.message
    elif isinstance(error, TtrpcError):
        outcome, message = Code(error.code).name, error.message
    else:
        outcome = "conflict" if isinstance(error, AdjustmentConflict) else \
            "refused" if isinstance(error, AdjustmentError) else "invalid"
        message = str(error)
    return outcome, message


class PluginCall:
    """One plugin's call of an adjusting event; `drop` takes a detached plugin out of the host's list."""

    def __init__(self, steps: KindSteps, socket_path: Path, results: Results,
                 drop: Callable[[PluginSession], None]) -> None:
        self.steps = steps
        self.socket_path = socket_path
        self._results = results
        self._drop = drop

    async def adjust_by(self, plugin: PluginSession, wire: WireEvent, pod: nri.PodSandbox, subject: Subject,
                        start: ContainerValue, adjustments: Adjustments, record: EventRecord,
                        collected: Collected | None = None) -> Asked | None:
        """One plugin's answer folded into `adjustments` (in shadow: into a private copy); returns what it asks
        of other containers. Raises HookFailed for an answer that fails the call. `start`: the value the NRI
        plugins began from (its hook projection's pod part is what the chain's record compares and validates
        over). `collected`: the answer is also replayed there for the validators (nri.validation; never a
        shadow's)."""
        event = wire.name
        shadow = self.steps.in_shadow(plugin.plugin_id)
        # A shadow folds into a private copy that owns nothing: it sees the container as the plugins before it left
        # it, and setting what a live plugin set is a disagreement to show, not a conflict (hooks.chain's shadow).
        folded = adjustments.shadow_copy() if shadow else adjustments
        before = start.with_container(folded.container)
        container = convert.event_container(wire, subject, folded.container)
        edits_before = folded.edits
        started = self.steps.started()
        failure: tuple[grpc.StatusCode, str, str] | None = None
        caught: Exception | None = None
        try:
            asked = await self._ask(plugin, wire, pod, container, subject, folded, None if shadow else collected)
        except PluginFailed as error:  # no answer: its failure policy decides (containerd/nri v0.12.5)
            if isinstance(error, PluginDetached):
                self._drop(plugin)
            if not error.fails_request:
                record.failed(plugin.plugin_id, started, shadow, *failure_outcome(error))
                return None
            failure = (grpc.StatusCode.UNKNOWN, f"{Code(error.code).name}: {error.message}", "")
            caught = error
        except TtrpcError as error:
            failure = (grpc.StatusCode.UNKNOWN, f"{Code(error.code).name}: {error.message}", "")
            caught = error
        except AdjustmentError as error:
            code = grpc.StatusCode.UNKNOWN if isinstance(error, AdjustmentConflict) else \
                grpc.StatusCode.FAILED_PRECONDITION
            failure, caught = (code, str(error), error.field), error
        else:
            problem = answer_only_problem(before.request, container_answer(folded.container))
            after = start.with_container(folded.container)
            if problem is None and shadow:  # never folded into the result: judged whole, alone
                problem = result_problem(before.request, after.request)
            if problem is not None:
                failure = (grpc.StatusCode.INTERNAL, f"invalid answer: {problem}", problem.field)
                caught = ValueError(f"invalid answer: {problem}")
        if failure is not None and caught is not None:
            record.failed(plugin.plugin_id, started, shadow, *failure_outcome(caught))
            if not self.steps.fails_call(event, shadow):
                log.warning("NRI plugin %s (in shadow: the call is unaffected) failed %s: %s", plugin.plugin_id,
                            event, failure[1])
                return None
            raise self.failed(event, plugin, *failure)
        record.ok(plugin.plugin_id, started, shadow, edit_changes(edits_before, folded.edits, shadow)
                  + asked_of_others(asked.updates, asked.evictions, shadow))
        # What it left: for the trace, the shadow counts, and the owners the result's validation blames.
        record.changed(plugin.plugin_id, before.request, after.request, shadow,
                       None if shadow else self.refusal(event, plugin, record))
        if shadow:
            self._results.count_shadowed(plugin.plugin_id, asked.evictions)
            return None
        return asked

    async def _ask(self, plugin: PluginSession, wire: WireEvent, pod: nri.PodSandbox, container: nri.Container,
                   subject: Subject, adjustments: Adjustments, collected: Collected | None = None) -> Asked:
        """One plugin's answer folded in; returns its updates of other containers and its evictions. The request
        carries what its message has room for (an update's resources: UpdateContainer), the answer is read by
        what its message has (an adjustment: CreateContainer; updates and evictions)."""
        fields: dict[str, Message] = {"pod": pod, "container": container}
        if wire.carries("linux_resources"):  # the update as containerd's NRI shows it
            fields["linux_resources"] = convert.update_resources(adjustments.container.resources or Resources())
        answer: Any = await plugin.call(wire.row.method, wire.message(**fields), wire.response)
        if wire.answers("adjust"):
            adjustments.apply_adjustment(plugin.plugin_id, answer.adjust, f"a {wire.name}")
        updates = list(answer.update) if wire.row.updates else []
        evictions = list(answer.evict) if wire.answers("evict") else []
        own = [update for update in updates if subject.container_id and update.container_id == subject.container_id]
        for update in own:
            adjustments.apply_update(plugin.plugin_id, update, "an UpdateContainerResources")
        if collected is not None and wire.answers("adjust"):
            collected.add(plugin.plugin_id, answer.adjust, [update for update in updates if update not in own])
        return Asked(plugin.plugin_id, [update for update in updates if update not in own], evictions)

    def refusal(self, event: str, plugin: PluginSession, record: EventRecord) -> Refusal:
        """How the chain's result refuses this plugin's applied answer: its step invalid, the call failed (NRI's
        rule for an adjusting event's invalid answer)."""
        def refuse(step: Step, problem: Problem) -> None:
            details = f"invalid answer: {problem}"
            record.refused(step, plugin.plugin_id, "invalid", details)
            if self.steps.fails_call(event, False):
                raise self.failed(event, plugin, grpc.StatusCode.INTERNAL, details, problem.field)
            log.warning("NRI plugin %s failed %s: %s; the call goes on without its answer", plugin.plugin_id, event,
                        details)
        return refuse

    def failed(self, event: str, plugin: PluginSession, code: grpc.StatusCode, details: str,
                field: str = "") -> HookFailed:
        failure = self.steps.failure(NriEventRef(NRI.trace_hook(event)), event,
                                     NriPluginRef(plugin.plugin_id, self.socket_path), code, details, field)
        log.warning("%s", failure)
        failure.logged = True
        return failure
