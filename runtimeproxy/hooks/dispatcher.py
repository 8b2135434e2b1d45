"""Calling the plugins registered for a hook point, in order, under their failure policies.

Plugins registered for the same hook are called one after another in file-name order;
each sees the request as changed by the ones before (the Go reference calls one random
plugin). A failing plugin is skipped under `Ignore`; under `Fail` a pre-hook raises `HookFailed`
naming the plugin and hook, and the frontend fails the call (CRI: cri.failures; Docker: a 500).
An answer that decodes but would apply something unsafe (hooks.validate) is such a failure too: what the
answer shows by itself (for another pod, too large) when it comes, before it is folded; its values and how they
relate once over the chain's result, after the last plugin of any kind (hooks.chain.ChainRecord.settle), blamed
on the plugin that set the offending field last: under `Fail` the call fails naming it and the field, under
`Ignore` the result is folded again without its answer.
What each answer changed is logged at debug level (field, before -> after), and an answer that drops
environment variables the request had is warned about: both frontends go through `Dispatcher.run`.

Each run is collected in a `hooks.chain.ChainRecord` (steps, changes, collisions, shadows) and, with the
trace on, kept in the pod's ring (hooks.trace). `chain` opens a kubelet call's chain for its hook point over
a value (hooks.chain_value: the pod or container in the core's model with its hook projection): the hook plugins
run in it (`run_hooks`: each called with the projection, its answer merged and folded into the value), and the plugins of another kind on the same call (NRI's CreateContainer,
UpdateContainer; hooks.lifecycle) record into the same record before it is finished once. What every plugin kind's step shares (toggle, shadow, timing,
statistics, trace, failure and ownership rules) is hooks.step's, with this kind's row of hooks.kinds. A plugin in shadow (its config's `"shadow": true`, or
`runtimeproxyctl shadow`) is called in its place in the chain, its answer validated alone, merged privately,
counted and traced, never applied; its failures never fail a call whatever its policy.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from runtimeproxy.hooks.chain import ChainRecord, Refusal
from runtimeproxy.hooks.chain_value import ChainValue, RequestValue
from runtimeproxy.hooks.changes import describe, dropped_env_names, field_changes
from runtimeproxy.hooks.kinds import HOOK
from runtimeproxy.hooks.stats import CallStats
from runtimeproxy.hooks.step import HookFailed, KindSteps, PluginRef, PointRef
from runtimeproxy.hooks.trace import SKIPPED_LABEL, Step, TraceRecorder, pod_key
from runtimeproxy.hooks.merge import merge_container_response, merge_pod_response
from runtimeproxy.hooks.validate import Problem, answer_only_problem, answer_problem
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks import names
from runtimeproxy.hooks.config import FailurePolicy
from runtimeproxy.hooks.plugin import Plugin, PluginCallFailed
from runtimeproxy.hooks.registry import PluginRegistry

__all__ = ["Dispatcher", "HookFailed", "HookPoint", "PluginRef"]  # HookFailed, PluginRef: hooks.step's, for callers

log = logging.getLogger(__name__)

HOOK_SERVICE = "runtime.v1alpha1.RuntimeHookService"
# An answer that decodes but is unsafe to apply fails like an undecodable one: the plugin broke
# the protocol's contract. Not INVALID_ARGUMENT: that would blame the kubelet's request.
INVALID_ANSWER_CODE = grpc.StatusCode.INTERNAL

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


@dataclass(frozen=True)
class HookPoint(Generic[Req, Resp]):
    name: str  # one of hooks.names.HOOK_NAMES, as in plugin configs: "PreRunPodSandbox"
    request_type: type[Req]
    response_type: type[Resp]
    # Pre-hooks fold each response into the request; post-hooks have no merge.
    merge: Callable[[Req, Resp], Req] | None

    @property
    def path(self) -> str:
        return f"/{HOOK_SERVICE}/{self.name}Hook"

    @property
    def is_pre(self) -> bool:
        return self.merge is not None


_POD = (hooks.PodSandboxHookRequest, hooks.PodSandboxHookResponse)
_CONTAINER = (hooks.ContainerResourceHookRequest, hooks.ContainerResourceHookResponse)
PRE_RUN_POD_SANDBOX = HookPoint(names.PRE_RUN_POD_SANDBOX, *_POD, merge_pod_response)
POST_STOP_POD_SANDBOX = HookPoint(names.POST_STOP_POD_SANDBOX, *_POD, None)
PRE_CREATE_CONTAINER = HookPoint(names.PRE_CREATE_CONTAINER, *_CONTAINER, merge_container_response)
PRE_START_CONTAINER = HookPoint(names.PRE_START_CONTAINER, *_CONTAINER, merge_container_response)
POST_START_CONTAINER = HookPoint(names.POST_START_CONTAINER, *_CONTAINER, None)
PRE_UPDATE_CONTAINER_RESOURCES = HookPoint(
    names.PRE_UPDATE_CONTAINER_RESOURCES, *_CONTAINER, merge_container_response
)
POST_STOP_CONTAINER = HookPoint(names.POST_STOP_CONTAINER, *_CONTAINER, None)


def report_answer(point: HookPoint, plugin: Plugin, request: Message, response: Message, merged: Message) -> None:
    """Debug: what the plugin's answer changed. Warning: variables it dropped from the environment."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("plugin %s %s changed %s", plugin.name, point.name, describe(field_changes(request, merged)),
                  extra={"plugin": plugin.name, "hook": point.name})
    dropped = dropped_env_names(getattr(request, "container_envs", {}), getattr(response, "container_envs", {}))
    if dropped:
        log.warning(
            "plugin %s %s answered container_envs without %d of the request's %d variables (%s): the answer "
            "replaces the environment, so they are removed; answer every variable to keep it (koordlet echoes "
            "the request), or build answers with runtimeproxy.plugin",
            plugin.name, point.name, len(dropped), len(request.container_envs),  # type: ignore[attr-defined]
            ", ".join(dropped[:_DROPPED_SHOWN]) + (", ..." if len(dropped) > _DROPPED_SHOWN else ""),
            extra={"plugin": plugin.name, "hook": point.name},
        )


_DROPPED_SHOWN = 10


def failure_fields(plugin: PluginRef, point: PointRef, code: grpc.StatusCode) -> dict[str, str]:
    """Structured log fields of a plugin failure (--log-format json)."""
    return {"plugin": plugin.name, "hook": point.name, "code": code.name}


# Pre-hooks whose merged request the frontend does not write back: the start call carries nothing to change.
_NOT_WRITTEN_BACK = frozenset({names.PRE_START_CONTAINER})


@dataclass
class CallChain(Generic[Req]):
    """One kubelet call's chain at a hook point: its record, the value as the plugins so far left it, and the
    plugins whose failure it went on without (policy Ignore). Plugins of another kind record into `record` and
    hand their result back as `value`."""

    point: HookPoint
    record: ChainRecord
    value: ChainValue[Req]
    without: list[str] = field(default_factory=list)

    @property
    def request(self) -> Req:
        """The value's hook projection: what the chain's record compares and validates over."""
        return self.value.request


class Dispatcher:
    def __init__(self, registry: PluginRegistry, toggles: Toggles | None = None,
                 trace: TraceRecorder | None = None, stats: CallStats | None = None) -> None:
        self._registry = registry
        # Operator pieces (runtimeproxyctl, metrics): what is switched off, how calls went (counted there only).
        self.toggles = toggles or Toggles(None)
        self.steps = KindSteps(HOOK, self.toggles, trace or TraceRecorder(), stats)
        self.stats = self.steps.stats
        self.trace = self.steps.trace

    @property
    def outcomes(self) -> collections.Counter[tuple[str, str, str]]:
        """(plugin, hook, outcome) -> calls, as the statistics counted them (for operators and tests)."""
        return collections.Counter({
            (plugin, hook, outcome): count
            for (plugin, hook), calls in self.stats.items() for outcome, count in calls.outcomes.items()
        })

    def _plugins_for(self, point: HookPoint) -> list[Plugin]:
        """The plugins of a hook that the node's toggles leave on."""
        allows = self.toggles.allows
        return [plugin for plugin in self._registry.plugins_for(point.name) if allows(plugin.name, point.name)]

    def has_plugins(self, point: HookPoint) -> bool:
        return bool(self._plugins_for(point))

    def in_shadow(self, plugin: Plugin) -> bool:
        return self.steps.in_shadow(plugin.name, plugin.config.shadow)

    async def run(self, point: HookPoint[Req, Resp], request: Req, time_remaining: float | None,
                  ignored: list[str] | None = None) -> Req:
        """Call every plugin of the hook; returns the request as the plugins left it. `ignored` gets the plugins
        whose failure the call went on without (policy Ignore; never one in shadow)."""
        async with self.chain(point, RequestValue(request)) as chain:
            await self.run_hooks(chain, time_remaining)
        if ignored is not None:
            ignored.extend(chain.without)
        return chain.request

    @contextlib.asynccontextmanager
    async def chain(self, point: HookPoint[Req, Resp], value: ChainValue[Req]) -> AsyncIterator[CallChain[Req]]:
        """A kubelet call's chain, finished once when the block ends: with a HookFailed of any kind's plugin
        (re-raised), or with the value as it was left, validated once (ChainRecord.settle: a refused answer of
        a plugin under Ignore is folded out of it, one under Fail raises here)."""
        chain = CallChain(point, self.steps.record(point.name, value.request), value)
        try:
            yield chain
            chain.value = chain.value.with_request(chain.record.settle(chain.request))
        except HookFailed as failure:
            self._finish(point, chain.record, chain.request, self.steps.failed_result(failure))
            raise
        self._finish(point, chain.record, chain.request, without=chain.without)

    async def run_hooks(self, chain: CallChain[Req], time_remaining: float | None) -> None:
        """The hook plugins of the chain's point, in order: each called with the value's projection as it is at
        its place, its answer merged into that projection and folded into `chain.value`."""
        point, record = chain.point, chain.record
        for plugin in self._registry.plugins_for(point.name):
            if self.steps.toggled_off(record, plugin.name, point.name):
                continue
            shadow = self.in_shadow(plugin)
            request = chain.request
            response = await self._call(point, plugin, request, time_remaining, record, shadow)
            if response is None and not shadow:
                chain.without.append(plugin.name)
            if response is None or point.merge is None:
                continue
            merged = point.merge(request, response)
            if shadow:
                self.steps.shadowed(record, plugin.name, point.name, request, merged)
                continue
            if merged != request:
                self.stats.changed(plugin.name, point.name)
                record.applied(request, merged, self._refusal(chain, plugin))
            report_answer(point, plugin, request, response, merged)
            chain.value = chain.value.with_request(merged)

    def _refusal(self, chain: CallChain[Req], plugin: Plugin) -> Refusal:
        """How the chain's result refuses this plugin's applied answer: as an invalid answer is refused when it
        comes (the step, the statistics, the failure or the warning), and under Ignore the call goes on without it."""
        point = chain.point

        def refuse(step: Step, problem: Problem) -> None:
            details = f"invalid answer: {problem}"
            self.steps.refused(step, plugin.name, point.name, INVALID_ANSWER_CODE.name, details, changed=True)
            if self.steps.fails_call(point.name, False, point.is_pre, plugin.failure_policy is FailurePolicy.FAIL):
                raise self.steps.failure(point, point.name, plugin, INVALID_ANSWER_CODE, details, problem.field)
            chain.without.append(plugin.name)
            self._went_on(point, plugin, INVALID_ANSWER_CODE, details, False)
        return refuse

    def _finish(self, point: HookPoint, record: ChainRecord, final: Message, failure: str = "",
                without: list[str] | None = None) -> None:
        written_back = point.is_pre and point.name not in _NOT_WRITTEN_BACK and not failure
        self.steps.finish(record, point.name, final, failure or _result(point, without or []), written_back,
                          bool(failure))

    def trace_skipped(self, point: HookPoint, request: Message) -> None:
        """A call of a pod with the skip label: its plugins are not called, the trace says why."""
        if not self.trace.enabled:
            return
        record = ChainRecord(point.name, request, True)
        for plugin in self._registry.plugins_for(point.name):
            record.step(plugin.name, SKIPPED_LABEL)
        who = pod_key(request)
        self.trace.record(who, record.entry(who.target, request, [], "sent to the runtime as it came (skip label)",
                                            False))

    async def _call(
        self, point: HookPoint[Req, Resp], plugin: Plugin, request: Req, time_remaining: float | None,
        record: ChainRecord, shadow: bool = False,
    ) -> Resp | None:
        timeout = plugin.timeout_seconds
        if time_remaining is not None:
            timeout = min(timeout, time_remaining)
        started = self.steps.started()
        try:
            # Raw bytes both ways: we decode the answer ourselves, so a bad one is a plugin failure.
            answer = await plugin.call(point.path, request.SerializeToString(), timeout)
        except PluginCallFailed as error:
            self._failed(point, plugin, error.code, error.details, started, record, shadow)
            return None
        try:
            response = point.response_type.FromString(answer)
        except DecodeError as error:
            self._failed(point, plugin, grpc.StatusCode.INTERNAL,
                         f"undecodable {point.response_type.DESCRIPTOR.name} from the plugin: {error}", started,
                         record, shadow)
            return None
        # Before the fold, what the answer shows by itself; its values once over the result (ChainRecord.settle).
        # In shadow it is never folded: judged whole, alone.
        problem = (answer_problem if shadow else answer_only_problem)(request, response) if point.is_pre else None
        if problem is not None:
            self._failed(point, plugin, INVALID_ANSWER_CODE, f"invalid answer: {problem}", started, record, shadow,
                         problem.field, refused=True)
            return None
        self.steps.ok(record, plugin.name, point.name, started, shadow)
        return response

    def failures(self, plugin: str) -> int:
        return self.stats.failures(plugin)

    def _failed(
        self, point: HookPoint, plugin: Plugin, code: grpc.StatusCode, details: str, started: float,
        record: ChainRecord, shadow: bool = False, field: str = "", refused: bool = False,
    ) -> None:
        self.steps.failed(record, plugin.name, point.name, started, shadow, code.name, details, refused)
        if self.steps.fails_call(point.name, shadow, point.is_pre, plugin.failure_policy is FailurePolicy.FAIL):
            raise self.steps.failure(point, point.name, plugin, code, details, field)
        self._went_on(point, plugin, code, details, shadow)

    def _went_on(self, point: HookPoint, plugin: Plugin, code: grpc.StatusCode, details: str, shadow: bool) -> None:
        if shadow:
            consequence = "in shadow: the call is unaffected"
        else:
            consequence = "the call goes on without it" if point.is_pre else "the response is unaffected"
        log.warning(
            "plugin %s failed %s (policy %s; %s; %d failures so far): %s: %s",
            plugin.name, point.name, plugin.failure_policy.value, consequence,
            self.failures(plugin.name), code.name, details,
            extra=failure_fields(plugin, point, code),
        )


def _result(point: HookPoint, without: list[str]) -> str:
    if not point.is_pre:
        return "post-hook: the runtime's answer is unaffected"
    if point.name in _NOT_WRITTEN_BACK:
        return "sent to the runtime as it came (the start carries nothing to change)"
    if without:
        return f"sent to the runtime without the answer of {', '.join(without)} (policy Ignore: not re-applied)"
    return "sent to the runtime"
