"""The dispatcher's trace, shadow plugins and collisions, against real in-process plugins."""

from __future__ import annotations

import logging

import grpc
import pytest

from tests.kits.hooks import PluginBench, ScriptedPlugin
from runtimeproxy.hooks import dispatcher
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.trace import FAILED, OK, REFUSED, SKIPPED_TOGGLE
from rplab.example_plugin import ExamplePlugin, ExampleSettings
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

HOOK = "PreCreateContainer"


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns"),
        container_meta=hooks.ContainerMetadata(name="app"),
        container_resources=hooks.LinuxContainerResources(cpu_shares=2, memory_limit_in_bytes=64 << 20),
        container_envs={"ORIGINAL": "1"},
    )


def invalid_cpuset(request: hooks.ContainerResourceHookRequest, context: object) -> hooks.ContainerResourceHookResponse:
    return hooks.ContainerResourceHookResponse(container_resources=hooks.LinuxContainerResources(cpuset_cpus="7-x"))


def plugin(cpu_shares: int, **envs: str) -> ExamplePlugin:
    return ExamplePlugin(ExampleSettings(cpu_shares=cpu_shares, memory_limit_in_bytes=0, envs=envs))


@pytest.fixture
def chain(bench: PluginBench) -> PluginBench:
    """Two live plugins that collide on cpu_shares, one refused by validation, one shadow that would differ."""
    bench.register("10-a.json", bench.serve(plugin(300, A="1")), [HOOK])
    bench.register("20-b.json", bench.serve(plugin(700, B="2")), [HOOK])
    bench.register("30-bad.json", bench.serve(ScriptedPlugin({HOOK: invalid_cpuset})), [HOOK])
    bench.register("40-next.json", bench.serve(plugin(900, A="1", B="2")), [HOOK], policy="Fail", shadow=True)
    return bench


def test_a_chain_is_traced_plugin_by_plugin(chain: PluginBench, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        result = chain.run(dispatcher.PRE_CREATE_CONTAINER, container_request())

    assert result.container_resources.cpu_shares == 700  # the later plugin wins; the shadow is not applied
    pod = chain.dispatcher.trace.find("ns/web")
    assert pod is not None
    [entry] = pod.entries
    assert entry.hook == HOOK and entry.target == "container app"
    assert 'name="web"' in entry.request_line() and "cpu_shares=2" in entry.request_line()
    assert [(s.plugin, s.outcome, s.shadow) for s in entry.steps] == [
        ("10-a.json", OK, False), ("20-b.json", OK, False), ("30-bad.json", REFUSED, False),
        ("40-next.json", OK, True)]
    a, b, bad, shadow = entry.steps
    assert "container_resources.cpu_shares: 2 -> 300" in map(str, a.changes)
    assert 'container_envs["A"]: (unset) -> "1"' in map(str, a.changes)
    assert "container_resources.cpu_shares: 300 -> 700" in map(str, b.changes)
    assert bad.code == "INTERNAL" and "container_resources.cpuset_cpus" in bad.details and not bad.changes
    assert "container_resources.cpu_shares: 700 -> 900" in map(str, shadow.changes)
    assert [str(c) for c in shadow.disagreements] == ["container_resources.cpu_shares: 700 -> 900"]
    [collision] = entry.collisions
    assert (collision.field, collision.earlier_plugin, collision.later_plugin) == (
        "container_resources.cpu_shares", "10-a.json", "20-b.json")
    # The refused plugin's answer is missing from what was sent, and the entry says so (shadows never miss).
    assert entry.result == "sent to the runtime without the answer of 30-bad.json (policy Ignore: not re-applied)"
    assert "container_resources.cpu_shares: 2 -> 700" in map(str, entry.sent_changes)
    collision_lines = [r.getMessage() for r in caplog.records if "both set" in r.getMessage()]
    assert collision_lines == ["plugins 10-a.json and 20-b.json both set container_resources.cpu_shares on "
                               "PreCreateContainer; 20-b.json's value stands (the later plugin in file-name order "
                               "wins; see runtimeproxyctl trace)"]

    stats = chain.dispatcher.stats
    trial = stats.of("40-next.json", HOOK)
    assert (trial.shadow_changes, trial.shadow_disagreements) == (1, 1)
    assert stats.of("40-next.json", HOOK).changes == 0
    assert stats.collisions == {(HOOK, "10-a.json", "20-b.json", "container_resources.cpu_shares"): 1}

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        chain.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert not [r for r in caplog.records if "both set" in r.getMessage()]  # logged once, counted always
    assert stats.collisions[(HOOK, "10-a.json", "20-b.json", "container_resources.cpu_shares")] == 2


def test_a_failing_shadow_never_fails_the_call_whatever_its_policy(bench: PluginBench) -> None:
    failing = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.UNAVAILABLE))
    bench.register("50-trial.json", bench.serve(failing), [HOOK], policy="Fail", shadow=True)
    request = container_request()
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request) == request
    [entry] = bench.dispatcher.trace.find("u-1").entries  # type: ignore[union-attr]
    [step] = entry.steps
    assert (step.outcome, step.shadow, step.code) == (FAILED, True, "UNAVAILABLE")


def test_shadow_and_unshadow_at_run_time(bench: PluginBench) -> None:
    bench.register("10-a.json", bench.serve(plugin(300)), [HOOK], policy="Fail")
    toggles = bench.dispatcher.toggles
    toggles.set_shadow("10-a", True, configured_shadow=False, author="tester")
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()).container_resources.cpu_shares == 2
    toggles.set_shadow("10-a", False, configured_shadow=False)
    assert toggles.shadow_settings == ()
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()).container_resources.cpu_shares == 300


def test_a_promotion_overrides_the_config_files_shadow_key(bench: PluginBench) -> None:
    bench.register("10-a.json", bench.serve(plugin(300)), [HOOK], shadow=True)
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()).container_resources.cpu_shares == 2
    bench.dispatcher.toggles.set_shadow("10-a.json", False, configured_shadow=True)
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()).container_resources.cpu_shares == 300


def test_toggled_off_plugins_and_fail_policy_failures_are_traced(bench: PluginBench) -> None:
    bench.register("10-off.json", bench.serve(plugin(300)), [HOOK])
    bench.register("20-fail.json", bench.serve(ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.INTERNAL))),
                   [HOOK], policy="Fail")
    bench.dispatcher.toggles.disable("10-off.json", frozenset(), "testing the trace")
    with pytest.raises(HookFailed):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    [entry] = bench.dispatcher.trace.find("u-1").entries  # type: ignore[union-attr]
    assert [(s.plugin, s.outcome, s.details) for s in entry.steps][0] == ("10-off.json", SKIPPED_TOGGLE,
                                                                          "testing the trace")
    assert entry.steps[1].outcome == FAILED and entry.steps[1].code == "INTERNAL"
    assert entry.result.startswith("not sent: 20-fail.json failed under failure-policy Fail")
    assert entry.sent_changes == ()


def test_with_the_trace_off_nothing_is_kept_but_collisions_are_counted(bench: PluginBench) -> None:
    bench.dispatcher.trace.entries_per_pod = 0
    bench.register("10-a.json", bench.serve(plugin(300)), [HOOK])
    bench.register("20-b.json", bench.serve(plugin(700)), [HOOK])
    bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert bench.dispatcher.trace.pod_count == 0
    assert sum(bench.dispatcher.stats.collisions.values()) == 1
