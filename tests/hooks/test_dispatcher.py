"""The dispatcher against real in-process gRPC plugins and a real PluginRegistry."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from tests.kits.hooks import PluginBench, ScriptedPlugin
from runtimeproxy.hooks import dispatcher, names
from runtimeproxy.cri.failures import ERROR_DOMAIN, ERROR_REASON, trailing_metadata
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.plugin import grpc_target, plugin_channel_options
from runtimeproxy.hooks.registry import DEFAULT_PLUGIN_MAX_MESSAGE_BYTES
from rplab.example_plugin import ANNOTATION, ExamplePlugin, ExampleSettings
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

ALL_POINTS = [
    dispatcher.PRE_RUN_POD_SANDBOX, dispatcher.POST_STOP_POD_SANDBOX, dispatcher.PRE_CREATE_CONTAINER,
    dispatcher.PRE_START_CONTAINER, dispatcher.POST_START_CONTAINER, dispatcher.PRE_UPDATE_CONTAINER_RESOURCES,
    dispatcher.POST_STOP_CONTAINER,
]


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns"),
        container_meta=hooks.ContainerMetadata(name="app"),
        container_annotations={"c": "1"},
        container_resources=hooks.LinuxContainerResources(cpu_shares=2, memory_limit_in_bytes=64 << 20),
        pod_cgroup_parent="/kubepods/pod-u-1",
        container_envs={"ORIGINAL": "1"},
    )


def pod_request() -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns"),
        labels={"app": "web"}, annotations={"a": "1"}, cgroup_parent="/kubepods/pod-u-1",
    )


def request_for(point: dispatcher.HookPoint) -> object:
    return pod_request() if point.request_type is hooks.PodSandboxHookRequest else container_request()


def test_hook_points_match_the_service() -> None:
    service = hooks.DESCRIPTOR.services_by_name["RuntimeHookService"]
    assert {point.path for point in ALL_POINTS} == {
        f"/{service.full_name}/{method.name}" for method in service.methods
    }
    for point in ALL_POINTS:
        method = service.methods_by_name[point.path.rsplit("/", 1)[1]]
        assert method.input_type is point.request_type.DESCRIPTOR
        assert method.output_type is point.response_type.DESCRIPTOR
        assert point.is_pre == point.name.startswith("Pre") == (point.name in names.PRE_HOOKS)


def test_no_plugins_returns_the_request_as_is(bench: PluginBench) -> None:
    request = container_request()
    assert not bench.dispatcher.has_plugins(dispatcher.PRE_CREATE_CONTAINER)
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request) is request
    assert not bench.dispatcher.outcomes


def test_plugins_chain_in_file_name_order_each_seeing_previous_changes(bench: PluginBench) -> None:
    first = ExamplePlugin(ExampleSettings(cpu_shares=300, memory_limit_in_bytes=100 << 20, envs={"FIRST": "1"}))
    second = ExamplePlugin(ExampleSettings(cpu_shares=700, memory_limit_in_bytes=0, envs={"SECOND": "2"}))
    first_socket, second_socket = bench.serve(first), bench.serve(second)
    # Registered in the opposite order: the file name decides, not the registration time.
    bench.register("20-second.json", second_socket, ["PreCreateContainer"])
    bench.register("10-first.json", first_socket, ["PreCreateContainer"])
    assert [plugin.name for plugin in bench.registry.plugins_for("PreCreateContainer")] == [
        "10-first.json", "20-second.json"]

    result = bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())

    assert first.seen_by("PreCreateContainer") == [container_request()]
    seen_by_second = second.seen_by("PreCreateContainer")[0]
    assert seen_by_second.container_resources.cpu_shares == 300
    assert seen_by_second.container_resources.memory_limit_in_bytes == 100 << 20
    assert dict(seen_by_second.container_envs) == {"ORIGINAL": "1", "FIRST": "1"}
    assert seen_by_second.container_annotations[ANNOTATION] == "PreCreateContainer"

    assert result.container_resources.cpu_shares == 700
    assert result.container_resources.memory_limit_in_bytes == 100 << 20  # 0 is not taken
    assert dict(result.container_envs) == {"ORIGINAL": "1", "FIRST": "1", "SECOND": "2"}
    assert result.container_meta == container_request().container_meta
    assert bench.dispatcher.outcomes == {
        ("10-first.json", "PreCreateContainer", "ok"): 1, ("20-second.json", "PreCreateContainer", "ok"): 1}


def test_pod_hooks_chain_too(bench: PluginBench) -> None:
    first = ExamplePlugin(ExampleSettings(pod_cgroup_parent="/kubepods/koord-first"))
    second = ScriptedPlugin({"PreRunPodSandbox": lambda request, _: hooks.PodSandboxHookResponse(
        labels={"second": request.cgroup_parent})})
    bench.register("a.json", bench.serve(first), ["PreRunPodSandbox"])
    bench.register("b.json", bench.serve(second), ["PreRunPodSandbox"])
    result = bench.run(dispatcher.PRE_RUN_POD_SANDBOX, pod_request())
    assert second.seen_by("PreRunPodSandbox")[0].cgroup_parent == "/kubepods/koord-first"
    assert dict(result.labels) == {"app": "web", "second": "/kubepods/koord-first"}
    assert result.cgroup_parent == "/kubepods/koord-first"
    assert result.annotations[ANNOTATION] == "PreRunPodSandbox"


def test_only_plugins_registered_for_the_hook_are_called(bench: PluginBench) -> None:
    plugin = ExamplePlugin()
    bench.register("10-example.json", bench.serve(plugin), ["PreRunPodSandbox"])
    request = container_request()
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request) is request
    assert plugin.seen == []


@pytest.mark.parametrize("fault", ["error", "dead"])
def test_ignore_skips_a_failing_plugin(bench: PluginBench, fault: str) -> None:
    before = ExamplePlugin(ExampleSettings(cpu_shares=300, envs={"BEFORE": "1"}))
    after = ScriptedPlugin()
    bench.register("10-before.json", bench.serve(before), ["PreCreateContainer"])
    if fault == "error":
        broken = bench.serve(ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.INTERNAL)))
    else:
        broken = bench.socket("nobody")
    bench.register("20-broken.json", broken, ["PreCreateContainer"], "Ignore")
    bench.register("30-after.json", bench.serve(after), ["PreCreateContainer"])

    result = bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())

    # The third plugin sees what the first left; the broken one changed nothing.
    (seen,) = after.seen_by("PreCreateContainer")
    assert seen.container_resources.cpu_shares == 300 and seen.container_envs["BEFORE"] == "1"
    # ScriptedPlugin answers with an empty response: only the always-taken fields are affected (none set).
    assert result == seen
    code = "INTERNAL" if fault == "error" else "UNAVAILABLE"
    assert bench.dispatcher.outcomes[("20-broken.json", "PreCreateContainer", code)] == 1
    assert bench.dispatcher.outcomes[("30-after.json", "PreCreateContainer", "ok")] == 1


def test_ignore_failure_leaves_the_request_as_it_was(bench: PluginBench) -> None:
    plugin = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.PERMISSION_DENIED))
    bench.register("10-broken.json", bench.serve(plugin), ["PreRunPodSandbox"])
    request = pod_request()
    assert bench.run(dispatcher.PRE_RUN_POD_SANDBOX, request) == pod_request()
    assert len(plugin.seen) == 1


@pytest.mark.parametrize("fault", ["error", "dead"])
def test_fail_on_a_pre_hook_raises_with_plugin_hook_and_code(bench: PluginBench, fault: str) -> None:
    later = ScriptedPlugin()
    if fault == "error":
        socket = bench.serve(ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.RESOURCE_EXHAUSTED)))
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
    else:
        socket = bench.socket("nobody")
        code = grpc.StatusCode.UNAVAILABLE
    bench.register("10-strict.json", socket, ["PreCreateContainer"], "Fail")
    bench.register("20-later.json", bench.serve(later), ["PreCreateContainer"])

    with pytest.raises(HookFailed) as raised:
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())

    failure = raised.value
    assert failure.plugin.name == "10-strict.json"
    assert failure.point is dispatcher.PRE_CREATE_CONTAINER
    assert failure.code is code
    message = str(failure)
    assert "PreCreateContainer" in message and "10-strict.json" in message and code.name in message
    assert f"unix://{socket}" in message
    if fault == "error":
        assert "example plugin refuses PreCreateContainer" in failure.details
    assert later.seen == []  # the chain stops at a Fail failure

    ((key, value),) = trailing_metadata(failure)
    assert key == "grpc-status-details-bin"
    status = status_pb2.Status.FromString(value)
    assert status.code == code.value[0]
    assert status.message == message
    info = error_details_pb2.ErrorInfo()
    assert len(status.details) == 1 and status.details[0].Unpack(info)
    assert info.reason == ERROR_REASON == "RUNTIME_HOOK_FAILED"
    assert info.domain == ERROR_DOMAIN
    assert dict(info.metadata) == {
        "plugin": "10-strict.json", "hook": "PreCreateContainer",
        "endpoint": f"unix://{socket}", "plugin-code": code.name,
    }
    assert bench.dispatcher.outcomes[("10-strict.json", "PreCreateContainer", code.name)] == 1


# --- answers that decode but are unsafe to apply (hooks.validate) ------------------------------------


def lying_answer(request: hooks.ContainerResourceHookRequest, _: object) -> hooks.ContainerResourceHookResponse:
    """Echoes the request with a good annotation and a cpuset the kernel cannot parse."""
    resources = hooks.LinuxContainerResources()
    resources.CopyFrom(request.container_resources)
    resources.cpuset_cpus = "abc"
    return hooks.ContainerResourceHookResponse(container_annotations={"liar": "1"}, container_resources=resources)


def test_an_invalid_answer_under_ignore_is_skipped_whole(bench: PluginBench) -> None:
    after = ScriptedPlugin()
    bench.register("10-liar.json", bench.serve(ScriptedPlugin({"PreCreateContainer": lying_answer})),
                   ["PreCreateContainer"], "Ignore")
    bench.register("20-after.json", bench.serve(after), ["PreCreateContainer"])
    result = bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    # A value is judged once over the chain's result (the later plugin saw it, and echoed it): the liar's answer
    # is then dropped whole, not even the good annotation, and the echo is no change of the later plugin's.
    assert after.seen_by("PreCreateContainer")[0].container_resources.cpuset_cpus == "abc"
    assert result == container_request()
    assert bench.dispatcher.outcomes == {("10-liar.json", "PreCreateContainer", "INTERNAL"): 1,
                                         ("20-after.json", "PreCreateContainer", "ok"): 1}


def test_an_invalid_answer_under_fail_names_plugin_hook_and_field(bench: PluginBench) -> None:
    socket = bench.serve(ScriptedPlugin({"PreCreateContainer": lying_answer}))
    bench.register("10-liar.json", socket, ["PreCreateContainer"], "Fail")
    with pytest.raises(HookFailed) as raised:
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    failure = raised.value
    assert failure.code is grpc.StatusCode.INTERNAL
    assert "PreCreateContainer hook of plugin 10-liar.json" in str(failure)
    assert 'invalid answer: container_resources.cpuset_cpus: "abc" is not a cpu list' in str(failure)
    ((_, value),) = trailing_metadata(failure)
    info = error_details_pb2.ErrorInfo()
    assert status_pb2.Status.FromString(value).details[0].Unpack(info)
    assert dict(info.metadata) == {
        "plugin": "10-liar.json", "hook": "PreCreateContainer", "endpoint": f"unix://{socket}",
        "plugin-code": "INTERNAL", "field": "container_resources.cpuset_cpus",
    }


def test_post_hook_answers_are_not_validated(bench: PluginBench) -> None:
    bench.register("10-liar.json", bench.serve(ScriptedPlugin({"PostStartContainer": lying_answer})),
                   ["PostStartContainer"], "Fail")
    assert bench.run(dispatcher.POST_START_CONTAINER, container_request()) == container_request()
    assert bench.dispatcher.outcomes == {("10-liar.json", "PostStartContainer", "ok"): 1}


@pytest.mark.parametrize("point", [dispatcher.POST_STOP_POD_SANDBOX, dispatcher.POST_START_CONTAINER,
                                   dispatcher.POST_STOP_CONTAINER], ids=lambda point: point.name)
def test_fail_on_a_post_hook_does_not_raise(bench: PluginBench, point: dispatcher.HookPoint) -> None:
    plugin = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.INTERNAL))
    bench.register("10-strict.json", bench.serve(plugin), [point.name], "Fail")
    request = request_for(point)
    assert bench.run(point, request) is request
    assert len(plugin.seen) == 1
    assert bench.dispatcher.outcomes == {("10-strict.json", point.name, "INTERNAL"): 1}


def test_post_hook_responses_are_not_merged(bench: PluginBench) -> None:
    plugin = ScriptedPlugin({"PostStartContainer": lambda request, _: hooks.ContainerResourceHookResponse(
        container_annotations={"post": "1"}, pod_cgroup_parent="/elsewhere", container_envs={"X": "1"})})
    bench.register("10-post.json", bench.serve(plugin), ["PostStartContainer"], "Fail")
    request = container_request()
    assert bench.run(dispatcher.POST_START_CONTAINER, request) == container_request()


def test_timeout_is_capped_by_the_callers_remaining_time(bench: PluginBench) -> None:
    plugin = ExamplePlugin(ExampleSettings(hang=True))
    bench.register("10-slow.json", bench.serve(plugin), ["PreCreateContainer"], "Ignore", timeout=5)
    request = container_request()
    started = time.monotonic()
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request, time_remaining=0.3) is request
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.0, elapsed
    assert bench.dispatcher.outcomes == {("10-slow.json", "PreCreateContainer", "DEADLINE_EXCEEDED"): 1}


def test_timeout_is_the_plugins_when_the_caller_has_more_time(bench: PluginBench) -> None:
    plugin = ExamplePlugin(ExampleSettings(hang=True))
    bench.register("10-slow.json", bench.serve(plugin), ["PreRunPodSandbox"], "Fail", timeout=0.2)
    started = time.monotonic()
    with pytest.raises(HookFailed) as raised:
        bench.run(dispatcher.PRE_RUN_POD_SANDBOX, pod_request(), time_remaining=30)
    elapsed = time.monotonic() - started
    assert 0.15 <= elapsed < 1.0, elapsed
    assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_timeout_without_a_caller_deadline_is_the_plugins(bench: PluginBench) -> None:
    plugin = ExamplePlugin(ExampleSettings(hang=True))
    bench.register("10-slow.json", bench.serve(plugin), ["PreStartContainer"], "Ignore", timeout=0.2)
    started = time.monotonic()
    bench.run(dispatcher.PRE_START_CONTAINER, container_request(), time_remaining=None)
    assert time.monotonic() - started < 1.0
    assert bench.dispatcher.outcomes[("10-slow.json", "PreStartContainer", "DEADLINE_EXCEEDED")] == 1


class RawPlugin:
    """Answers one hook with fixed bytes, whatever they are."""

    def __init__(self, method: str, answer: bytes) -> None:
        self.method = method
        self.answer = answer
        self._server: grpc.aio.Server | None = None

    async def start(self, socket) -> None:  # type: ignore[no-untyped-def]
        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return self.answer

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "runtime.v1alpha1.RuntimeHookService", {self.method: grpc.unary_unary_rpc_method_handler(answer)}),))
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_an_undecodable_response_is_a_plugin_failure(bench: PluginBench, policy: str) -> None:
    socket = bench.serve(RawPlugin("PreCreateContainerHook", b"\xff\xff\xff"))
    bench.register("10-garbage.json", socket, ["PreCreateContainer"], policy)
    request = container_request()
    if policy == "Ignore":
        assert bench.run(dispatcher.PRE_CREATE_CONTAINER, request) is request
        assert bench.dispatcher.outcomes == {("10-garbage.json", "PreCreateContainer", "INTERNAL"): 1}
        return
    # grpc.aio does not raise on an undecodable response (it logs and returns None): still a failure.
    with pytest.raises(HookFailed) as raised:
        bench.run(dispatcher.PRE_CREATE_CONTAINER, request)
    assert raised.value.plugin.name == "10-garbage.json"
    assert raised.value.code is grpc.StatusCode.INTERNAL
    assert "ContainerResourceHookResponse" in raised.value.details


def test_outcomes_count_every_call(bench: PluginBench) -> None:
    good = ExamplePlugin()
    bad = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.UNAVAILABLE))
    bench.register("10-good.json", bench.serve(good))
    bench.register("20-bad.json", bench.serve(bad), ["PreCreateContainer", "PostStopContainer"])
    for _ in range(3):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    bench.run(dispatcher.POST_STOP_CONTAINER, container_request())
    bench.run(dispatcher.PRE_RUN_POD_SANDBOX, pod_request())
    assert bench.dispatcher.outcomes == {
        ("10-good.json", "PreCreateContainer", "ok"): 3,
        ("20-bad.json", "PreCreateContainer", "UNAVAILABLE"): 3,
        ("10-good.json", "PostStopContainer", "ok"): 1,
        ("20-bad.json", "PostStopContainer", "UNAVAILABLE"): 1,
        ("10-good.json", "PreRunPodSandbox", "ok"): 1,
    }


def test_every_hook_point_reaches_its_rpc(bench: PluginBench) -> None:
    plugin = ScriptedPlugin()
    bench.register("10-all.json", bench.serve(plugin))
    for point in ALL_POINTS:
        bench.run(point, request_for(point))
    assert [hook for hook, _ in plugin.seen] == [point.name for point in ALL_POINTS]
    for (hook, seen), point in zip(plugin.seen, ALL_POINTS):
        assert seen == request_for(point), hook


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_a_socket_of_an_untrusted_owner_is_not_called(bench: PluginBench, policy: str) -> None:
    plugin = ScriptedPlugin()
    socket = bench.serve(plugin)
    os.chown(socket, 65534, 65534)  # someone else's socket: it would see every container's env
    bench.register("10-foreign.json", socket, ["PreCreateContainer"], policy)

    if policy == "Fail":
        with pytest.raises(HookFailed) as raised:
            bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
        assert raised.value.code is grpc.StatusCode.PERMISSION_DENIED
        assert f"socket {socket} is owned by uid 65534, not a trusted owner" in raised.value.details
    else:
        assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()) == container_request()
    assert plugin.seen == []
    assert bench.dispatcher.outcomes[("10-foreign.json", "PreCreateContainer", "PERMISSION_DENIED")] == 1


def test_a_plugin_that_starts_late_is_called_by_the_next_hook(bench: PluginBench) -> None:
    socket = bench.socket("late")
    bench.register("10-late.json", socket, ["PreCreateContainer"])
    (registered,) = bench.registry.plugins
    assert not registered.channel.is_open  # nothing connects before a call needs it
    bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert bench.dispatcher.outcomes[("10-late.json", "PreCreateContainer", "UNAVAILABLE")] == 1
    assert not registered.channel.is_open  # dropped: a dead plugin is not retried in the background

    plugin = ScriptedPlugin()
    bench.serve(plugin, socket)
    bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert bench.dispatcher.outcomes[("10-late.json", "PreCreateContainer", "ok")] == 1
    assert len(plugin.seen) == 1


def test_a_plugin_that_starts_late_is_called_while_a_dropped_channel_still_closes(bench: PluginBench) -> None:
    """The dropped channel closes in the background (a grace period for calls still on it); held open here, as a
    busy loop leaves it, its subchannel waits out gRPC's reconnect backoff. The next call's channel has subchannels
    of its own: it connects at once (with gRPC's shared pool it failed UNAVAILABLE for a second or more)."""
    socket = bench.socket("late")
    lingering = bench.loop.run(_failed_channel(socket))  # a dropped channel's twin: same target, same options
    try:
        bench.register("10-late.json", socket, ["PreCreateContainer"])
        plugin = ScriptedPlugin()
        bench.serve(plugin, socket)
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
        assert bench.dispatcher.outcomes[("10-late.json", "PreCreateContainer", "ok")] == 1
    finally:
        bench.loop.run(lingering.close())


async def _failed_channel(socket: Path) -> grpc.aio.Channel:
    """A channel in the process-wide subchannel pool, as the plugin's were, after a call to `socket` failed."""
    shared = [option for option in plugin_channel_options(DEFAULT_PLUGIN_MAX_MESSAGE_BYTES)
              if option[0] != "grpc.use_local_subchannel_pool"]
    channel = grpc.aio.insecure_channel(grpc_target(socket), options=shared)
    with pytest.raises(grpc.aio.AioRpcError):
        await channel.unary_unary("/runtime.v1alpha1.RuntimeHookService/PreCreateContainerHook")(b"", timeout=5)
    return channel


def test_a_plugin_unregistered_while_picked_is_a_failed_call(bench: PluginBench) -> None:
    bench.register("10-leaving.json", bench.serve(ScriptedPlugin()), ["PreCreateContainer"])
    (leaving,) = bench.registry.plugins
    bench.loop.run(leaving.channel.close())  # what a config removal does while a call is starting
    assert bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request()) == container_request()
    assert bench.dispatcher.outcomes[("10-leaving.json", "PreCreateContainer", "UNAVAILABLE")] == 1
