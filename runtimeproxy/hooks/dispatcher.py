"""Calling the plugins registered for a hook point, in order, under their failure policies.

Plugins registered for the same hook are called one after another in file-name order;
each sees the request as changed by the ones before (the Go reference calls one random
plugin). A failing plugin is skipped under `Ignore`; under `Fail` a pre-hook raises `HookFailed`
naming the plugin and hook, and the frontend fails the call (CRI: cri.failures; Docker: a 500).
An answer that decodes but would apply something unsafe (hooks.validate) is such a failure too.
What each answer changed is logged at debug level (field, before -> after), and an answer that drops
environment variables the request had is warned about: both frontends go through `Dispatcher.run`.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from runtimeproxy.hooks.changes import describe, dropped_env_names, field_changes
from runtimeproxy.hooks.merge import merge_container_response, merge_pod_response
from runtimeproxy.hooks.validate import answer_problem
from runtimeproxy.hooks.stats import OK, HookStats
from runtimeproxy.hooks.toggles import Toggles
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks import names
from runtimeproxy.hooks.config import FailurePolicy
from runtimeproxy.hooks.plugin import Plugin, PluginCallFailed
from runtimeproxy.hooks.registry import PluginRegistry

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


class PluginRef(Protocol):
    """What a failure names of a plugin: a hook-protocol Plugin, or a plugin of another kind (hooks.extra)."""

    @property
    def name(self) -> str: ...

    @property
    def endpoint(self) -> Path: ...


class HookFailed(Exception):
    """A plugin with failure policy Fail could not do a pre-hook: the call must fail (the core's one failure)."""

    def __init__(self, point: HookPoint, plugin: PluginRef, code: grpc.StatusCode, details: str,
                 field: str = "") -> None:
        self.point = point
        self.plugin = plugin
        self.code = code
        self.details = details
        self.field = field  # the answer's offending field, when the answer was invalid
        super().__init__(
            f"runtimeproxy: {point.name} hook of plugin {plugin.name} "
            f"(unix://{plugin.endpoint}) failed with failure-policy Fail: {code.name}: {details}"
        )


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


def failure_fields(plugin: PluginRef, point: HookPoint, code: grpc.StatusCode) -> dict[str, str]:
    """Structured log fields of a plugin failure (--log-format json)."""
    return {"plugin": plugin.name, "hook": point.name, "code": code.name}


class Dispatcher:
    def __init__(self, registry: PluginRegistry, toggles: Toggles | None = None) -> None:
        self._registry = registry
        # Operator pieces (runtimeproxyctl, metrics): what is switched off, how calls went (counted there only).
        self.toggles = toggles or Toggles(None)
        self.stats = HookStats()

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

    async def run(self, point: HookPoint[Req, Resp], request: Req, time_remaining: float | None) -> Req:
        """Call every plugin of the hook; returns the request as the plugins left it."""
        for plugin in self._plugins_for(point):
            response = await self._call(point, plugin, request, time_remaining)
            if response is not None and point.merge is not None:
                merged = point.merge(request, response)
                if merged != request:
                    self.stats.changed(plugin.name, point.name)
                report_answer(point, plugin, request, response, merged)
                request = merged
        return request

    async def _call(
        self, point: HookPoint[Req, Resp], plugin: Plugin, request: Req, time_remaining: float | None
    ) -> Resp | None:
        timeout = plugin.timeout_seconds
        if time_remaining is not None:
            timeout = min(timeout, time_remaining)
        started = time.perf_counter()
        try:
            # Raw bytes both ways: we decode the answer ourselves, so a bad one is a plugin failure.
            answer = await plugin.call(point.path, request.SerializeToString(), timeout)
        except PluginCallFailed as error:
            self._failed(point, plugin, error.code, error.details, started)
            return None
        try:
            response = point.response_type.FromString(answer)
        except DecodeError as error:
            self._failed(point, plugin, grpc.StatusCode.INTERNAL,
                         f"undecodable {point.response_type.DESCRIPTOR.name} from the plugin: {error}", started)
            return None
        problem = answer_problem(request, response) if point.is_pre else None
        if problem is not None:
            self._failed(point, plugin, INVALID_ANSWER_CODE, f"invalid answer: {problem}", started, problem.field)
            return None
        self.stats.record(plugin.name, point.name, OK, time.perf_counter() - started)
        return response

    def failures(self, plugin: str) -> int:
        return sum(calls.failures for (name, _), calls in self.stats.items() if name == plugin)

    def _failed(
        self, point: HookPoint, plugin: Plugin, code: grpc.StatusCode, details: str, started: float,
        field: str = "",
    ) -> None:
        self.stats.record(plugin.name, point.name, code.name, time.perf_counter() - started, details)
        if point.is_pre and plugin.failure_policy is FailurePolicy.FAIL:
            raise HookFailed(point, plugin, code, details, field)
        consequence = "the call goes on without it" if point.is_pre else "the response is unaffected"
        log.warning(
            "plugin %s failed %s (policy %s; %s; %d failures so far): %s: %s",
            plugin.name, point.name, plugin.failure_policy.value, consequence,
            self.failures(plugin.name), code.name, details,
            extra=failure_fields(plugin, point, code),
        )
