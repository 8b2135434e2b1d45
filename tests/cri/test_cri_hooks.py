"""The hooked CRI calls' policy, without a transport (tests.kits.cri): each call through its hook to a recording
backend, as the proxy's relay would send it; the gRPC server and relay around them are tested in test_forwarding.py,
test_server.py and the e2e suites."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from tests.kits.hooks import (
    AttachedNri, ScriptedPlugin, fill, mark_unknown, refresh_on_loop, register, unknown_marks,
)
from rplab.cri import env_entry
from rplab.example_plugin import ANNOTATION, ExamplePlugin, ExampleSettings
from rplab.loop import LoopThread
from tests.kits.cri import HookedCalls, RecordingBackend
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.edits import ImageFacts, ImageIdentity
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as v1
from runtimeproxy.pb.cri.runtime.v1alpha2 import api_pb2 as v1alpha2
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

VERSIONS = ["runtime.v1", "runtime.v1alpha2"]
API = {"runtime.v1": v1, "runtime.v1alpha2": v1alpha2}


def path(version: str, method: str) -> str:
    return f"/{version}.RuntimeService/{method}"


class Plugins:
    """In-process plugins registered in the hook service's config dir (refreshed on the loop)."""

    def __init__(self, loop: LoopThread, calls: HookedCalls, base: Path) -> None:
        self.loop = loop
        self.service = calls.service
        self.base = base
        self.config_dir = self.service.registry.config_dir
        self._started: list[Any] = []

    @property
    def registry(self):  # type: ignore[no-untyped-def]
        return self.service.registry

    @property
    def outcomes(self):  # type: ignore[no-untyped-def]
        return self.service.dispatcher.outcomes

    def serve(self, plugin: Any) -> Path:
        socket = self.base / f"plugin{len(self._started)}.sock"
        self.loop.run(plugin.start(socket))
        self._started.append(plugin)
        return socket

    def register(self, name: str, socket: Path, hooks_: list[str], policy: str = "Ignore",
                 timeout: float | None = None) -> None:
        register(self.config_dir, name, socket, hooks_, policy, timeout)
        refresh_on_loop(self.loop, self.registry)
        assert name in [plugin.name for plugin in self.registry.plugins]

    def close(self) -> None:
        for plugin in self._started:
            self.loop.run(plugin.stop())


@pytest.fixture
def client(loop_thread: LoopThread, backend: RecordingBackend, tmp_path: Path) -> Iterator[HookedCalls]:
    calls = HookedCalls(loop_thread, tmp_path, backend)
    yield calls
    calls.close()


@pytest.fixture
def plugins(loop_thread: LoopThread, client: HookedCalls, tmp_path: Path) -> Iterator[Plugins]:
    plugins = Plugins(loop_thread, client, tmp_path)
    yield plugins
    plugins.close()


def answer_with(message: Any):  # type: ignore[no-untyped-def]
    data = message.SerializeToString()

    async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return data

    return answer


@pytest.fixture
def backend() -> RecordingBackend:
    """A backend answering the hooked calls like a runtime (same bytes for both versions). The hook core's runtime
    knows no pods or containers (tests.kits.hooks.StubRuntime): its store holds only what the tests' calls made."""
    answers = RecordingBackend()
    for version in VERSIONS:
        answers.unary[path(version, "RunPodSandbox")] = answer_with(v1.RunPodSandboxResponse(pod_sandbox_id="p1"))
        answers.unary[path(version, "CreateContainer")] = answer_with(v1.CreateContainerResponse(container_id="c1"))
        for method in ("StopPodSandbox", "RemovePodSandbox", "StartContainer", "StopContainer", "RemoveContainer",
                       "UpdateContainerResources"):
            response = getattr(v1, f"{method}Response")()
            answers.unary[path(version, method)] = answer_with(response)
    return answers


def call(client: HookedCalls, method_path: str, data: bytes) -> bytes:
    return client.call(method_path, data)


def received(backend: RecordingBackend, method_path: str) -> bytes:
    (only,) = backend.calls_to(method_path)
    return only.request


def pod_config(api: Any, **linux: Any) -> Any:
    return api.PodSandboxConfig(
        metadata=api.PodSandboxMetadata(name="web", uid="u-1", namespace="ns"),
        labels={"app": "web"}, annotations={"a": "1"},
        linux=api.LinuxPodSandboxConfig(cgroup_parent="/kubepods/pod-u-1", **linux),
    )


def create_request(api: Any, envs: dict[str, str] | dict[str, str | bytes] | None = None) -> Any:
    return api.CreateContainerRequest(
        pod_sandbox_id="p1",
        config=api.ContainerConfig(
            metadata=api.ContainerMetadata(name="app"),
            image=api.ImageSpec(image="busybox"),
            envs=[env_entry(api, k, v) for k, v in (envs or {"KEEP": "me"}).items()],
            linux=api.LinuxContainerConfig(resources=api.LinuxContainerResources(cpu_shares=2)),
        ),
        sandbox_config=pod_config(api),
    )


# --- requests that cannot be decoded ----------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("method", ["RunPodSandbox", "CreateContainer", "StopContainer", "UpdateContainerResources"])
def test_a_garbled_hooked_request_is_invalid_argument(client: HookedCalls, backend: RecordingBackend,
                                                      version: str, method: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path(version, method), b"\xff\xff\xff")
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert f"{method}Request" in raised.value.details()
    assert backend.calls_to(path(version, method)) == []


def test_a_garbled_request_is_refused_with_plugins_too(client: HookedCalls, backend: RecordingBackend,
                                                       plugins: Plugins) -> None:
    plugin = ExamplePlugin()
    plugins.register("10-example.json", plugins.serve(plugin), ["PreRunPodSandbox", "PreCreateContainer"])
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path("runtime.v1", "CreateContainer"), b"\xff\xff\xff")
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "CreateContainerRequest" in raised.value.details()
    assert plugin.seen == [] and backend.calls_to(path("runtime.v1", "CreateContainer")) == []


# --- the kubelet's bytes go upstream untouched unless a plugin changed something ----------------------


def non_canonical_run_pod_sandbox(api: Any) -> bytes:
    """runtime_handler before config, plus an unknown field: re-encoding would reorder or could drop it."""
    handler = api.RunPodSandboxRequest(runtime_handler="runc").SerializeToString()
    config = api.RunPodSandboxRequest(config=pod_config(api)).SerializeToString()
    unknown = b"\xf8\x06\x2a"  # field 111, varint 42
    data = handler + config + unknown
    assert data != api.RunPodSandboxRequest.FromString(data).SerializeToString()
    return data


@pytest.mark.parametrize("version", VERSIONS)
def test_without_plugins_the_backend_gets_the_exact_bytes(client: HookedCalls, backend: RecordingBackend,
                                                           version: str) -> None:
    data = non_canonical_run_pod_sandbox(API[version])
    response = call(client, path(version, "RunPodSandbox"), data)
    assert v1.RunPodSandboxResponse.FromString(response).pod_sandbox_id == "p1"
    assert received(backend, path(version, "RunPodSandbox")) == data


def test_a_plugin_that_changes_nothing_leaves_the_bytes_alone(client: HookedCalls, backend: RecordingBackend,
                                                               plugins: Plugins) -> None:
    def echo(request: hooks.PodSandboxHookRequest, _: Any) -> hooks.PodSandboxHookResponse:
        return hooks.PodSandboxHookResponse(labels=request.labels, annotations=request.annotations,
                                            cgroup_parent=request.cgroup_parent)

    plugin = ScriptedPlugin({"PreRunPodSandbox": echo})
    plugins.register("10-echo.json", plugins.serve(plugin), ["PreRunPodSandbox"])
    data = non_canonical_run_pod_sandbox(v1)
    call(client, path("runtime.v1", "RunPodSandbox"), data)
    assert len(plugin.seen) == 1
    assert received(backend, path("runtime.v1", "RunPodSandbox")) == data


def test_an_ignored_failing_plugin_leaves_the_bytes_alone(client: HookedCalls, backend: RecordingBackend,
                                                           plugins: Plugins) -> None:
    plugins.register("10-dead.json", plugins.base / "nobody.sock", ["PreRunPodSandbox"], "Ignore")
    data = non_canonical_run_pod_sandbox(v1alpha2)
    call(client, path("runtime.v1alpha2", "RunPodSandbox"), data)
    assert received(backend, path("runtime.v1alpha2", "RunPodSandbox")) == data
    assert plugins.outcomes[("10-dead.json", "PreRunPodSandbox", "UNAVAILABLE")] == 1


# --- plugin changes reach the backend, for both CRI versions ------------------------------------------


def test_v1alpha2_run_pod_sandbox_gets_the_annotation_and_nothing_else(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ExamplePlugin()
    plugins.register("10-example.json", plugins.serve(plugin), ["PreRunPodSandbox"])
    original = fill(v1alpha2.RunPodSandboxRequest())
    call(client, path("runtime.v1alpha2", "RunPodSandbox"), original.SerializeToString())

    upstream = v1alpha2.RunPodSandboxRequest.FromString(received(backend, path("runtime.v1alpha2", "RunPodSandbox")))
    expected = v1alpha2.RunPodSandboxRequest()
    expected.CopyFrom(original)
    expected.config.annotations[ANNOTATION] = "PreRunPodSandbox"
    assert upstream == expected
    # What the plugin saw is the v1alpha2 request, field for field.
    (seen,) = plugin.seen_by("PreRunPodSandbox")
    assert seen.pod_meta.uid == original.config.metadata.uid
    assert seen.runtime_handler == original.runtime_handler
    assert dict(seen.labels) == dict(original.config.labels)
    assert seen.cgroup_parent == original.config.linux.cgroup_parent
    assert seen.resources.SerializeToString(deterministic=True) == \
        original.config.linux.resources.SerializeToString(deterministic=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_create_container_gets_the_plugins_changes(client: HookedCalls, backend: RecordingBackend,
                                                   plugins: Plugins, version: str) -> None:
    plugin = ExamplePlugin(ExampleSettings(cpu_shares=700, memory_limit_in_bytes=64 << 20, envs={"ADDED": "1"}))
    plugins.register("10-example.json", plugins.serve(plugin), ["PreCreateContainer"])
    api = API[version]
    original = create_request(api, {"Z": "1", "A": "2"})
    response = call(client, path(version, "CreateContainer"), original.SerializeToString())
    assert v1.CreateContainerResponse.FromString(response).container_id == "c1"

    upstream = api.CreateContainerRequest.FromString(received(backend, path(version, "CreateContainer")))
    expected = api.CreateContainerRequest()
    expected.CopyFrom(original)
    expected.config.annotations[ANNOTATION] = "PreCreateContainer"
    expected.config.linux.resources.cpu_shares = 700
    expected.config.linux.resources.memory_limit_in_bytes = 64 << 20
    expected.config.envs.append(env_entry(api, "ADDED", "1"))
    assert upstream == expected
    # The pod was unknown to the store: the plugin got its context from sandbox_config.
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert seen.pod_meta.uid == "u-1" and seen.pod_cgroup_parent == "/kubepods/pod-u-1"
    assert dict(seen.pod_labels) == {"app": "web"}


# --- env values that are not UTF-8 (cri-api v0.36.2 on: bytes, e.g. a Secret's data) ---------------------

SECRET = b"\x00\xff\xfepass\xe2\x82"  # Secrets hold any bytes, NUL too; \xe2\x82 is a character cut short
SHOWN_SECRET = "\x00\ufffd\ufffdpass\ufffd\ufffd"  # one U+FFFD per byte, as containerd's JSON spec has it


def binary_env_request() -> Any:
    return create_request(v1, {"PLAIN": "text", "SECRET": SECRET})


def upstream_envs(backend: RecordingBackend) -> list[tuple[str, bytes]]:
    upstream = v1.CreateContainerRequest.FromString(received(backend, path("runtime.v1", "CreateContainer")))
    return [(kv.key, kv.value) for kv in upstream.config.envs]


def test_a_binary_env_value_passes_a_bare_proxy_byte_for_byte(client: HookedCalls,
                                                              backend: RecordingBackend) -> None:
    data = binary_env_request().SerializeToString()
    call(client, path("runtime.v1", "CreateContainer"), data)
    assert received(backend, path("runtime.v1", "CreateContainer")) == data


def test_a_plugin_sees_a_binary_env_value_as_the_container_will_and_echoing_it_keeps_the_bytes(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    def echo_env_and_annotate(request: hooks.ContainerResourceHookRequest, _: Any) -> Any:
        return hooks.ContainerResourceHookResponse(container_envs=request.container_envs,
                                                   container_annotations={"touched": "yes"})

    plugin = ScriptedPlugin({"PreCreateContainer": echo_env_and_annotate})
    plugins.register("10-echo.json", plugins.serve(plugin), ["PreCreateContainer"], "Fail")
    call(client, path("runtime.v1", "CreateContainer"), binary_env_request().SerializeToString())
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert dict(seen.container_envs) == {"PLAIN": "text", "SECRET": SHOWN_SECRET}
    assert upstream_envs(backend) == [("PLAIN", b"text"), ("SECRET", SECRET)]


@pytest.mark.parametrize(("answer", "expected"), [
    ({"PLAIN": "text"}, [("PLAIN", b"text")]),  # SECRET removed
    ({"PLAIN": "text", "SECRET": "new"}, [("PLAIN", b"text"), ("SECRET", b"new")]),
    ({"PLAIN": "changed", "SECRET": SHOWN_SECRET}, [("PLAIN", b"changed"), ("SECRET", SECRET)]),
])
def test_a_plugin_may_remove_or_replace_a_binary_env_value(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins,
    answer: dict[str, str], expected: list[tuple[str, bytes]]
) -> None:
    plugin = ScriptedPlugin({"PreCreateContainer": lambda request, _: hooks.ContainerResourceHookResponse(
        container_envs=answer)})
    plugins.register("10-env.json", plugins.serve(plugin), ["PreCreateContainer"], "Fail")
    call(client, path("runtime.v1", "CreateContainer"), binary_env_request().SerializeToString())
    assert upstream_envs(backend) == expected


def test_the_pod_recorded_at_run_pod_sandbox_is_the_context_of_its_containers(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ExamplePlugin(ExampleSettings(pod_cgroup_parent="/kubepods/koord-be"))
    plugins.register("10-example.json", plugins.serve(plugin), ["PreRunPodSandbox", "PreCreateContainer",
                                                                 "PostStopContainer", "PostStopPodSandbox"])
    call(client, path("runtime.v1", "RunPodSandbox"), v1.RunPodSandboxRequest(config=pod_config(v1)).SerializeToString())
    upstream_pod = v1.RunPodSandboxRequest.FromString(received(backend, path("runtime.v1", "RunPodSandbox")))
    assert upstream_pod.config.linux.cgroup_parent == "/kubepods/koord-be"

    call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert seen.pod_cgroup_parent == "/kubepods/koord-be"  # the hooked pod, not the kubelet's sandbox_config
    assert seen.pod_annotations[ANNOTATION] == "PreRunPodSandbox"
    upstream = v1.CreateContainerRequest.FromString(received(backend, path("runtime.v1", "CreateContainer")))
    assert upstream.sandbox_config.linux.cgroup_parent == "/kubepods/koord-be"

    call(client, path("runtime.v1", "StopContainer"), v1.StopContainerRequest(container_id="c1").SerializeToString())
    call(client, path("runtime.v1", "StopPodSandbox"), v1.StopPodSandboxRequest(pod_sandbox_id="p1").SerializeToString())
    (stopped,) = plugin.seen_by("PostStopContainer")
    assert stopped.container_meta.id == "c1" and stopped.container_meta.name == "app"
    assert stopped.container_envs["EXAMPLE_PLUGIN"] == "hello" and stopped.container_envs["KEEP"] == "me"
    assert stopped.pod_cgroup_parent == "/kubepods/koord-be"
    (pod_stopped,) = plugin.seen_by("PostStopPodSandbox")
    assert pod_stopped.cgroup_parent == "/kubepods/koord-be" and pod_stopped.pod_meta.uid == "u-1"


# --- failure policies through the proxy ---------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dead_fail_plugin_stops_run_pod_sandbox_before_the_backend(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins, version: str
) -> None:
    socket = plugins.base / "nobody.sock"
    plugins.register("10-dead.json", socket, ["PreRunPodSandbox"], "Fail")
    api = API[version]
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path(version, "RunPodSandbox"), api.RunPodSandboxRequest(config=pod_config(api)).SerializeToString())
    error = raised.value
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "PreRunPodSandbox hook of plugin 10-dead.json" in error.details()
    status = status_pb2.Status.FromString(dict(error.trailing_metadata())["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "RUNTIME_HOOK_FAILED"
    assert info.metadata["plugin"] == "10-dead.json" and info.metadata["hook"] == "PreRunPodSandbox"
    assert backend.calls_to(path(version, "RunPodSandbox")) == []


def test_a_failing_fail_plugin_stops_create_container_before_the_backend(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.FAILED_PRECONDITION))
    plugins.register("10-strict.json", plugins.serve(plugin), ["PreCreateContainer"], "Fail")
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())
    assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert backend.calls_to(path("runtime.v1", "CreateContainer")) == []


def test_a_post_hook_failure_under_fail_does_not_fail_stop_container(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ExamplePlugin(ExampleSettings(fail_with=grpc.StatusCode.INTERNAL))
    plugins.register("10-strict.json", plugins.serve(plugin), ["PostStopContainer", "PostStopPodSandbox"], "Fail")
    call(client, path("runtime.v1", "RunPodSandbox"), v1.RunPodSandboxRequest(config=pod_config(v1)).SerializeToString())
    call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())

    stop = v1.StopContainerRequest(container_id="c1", timeout=3).SerializeToString()
    assert call(client, path("runtime.v1", "StopContainer"), stop) == b""
    assert received(backend, path("runtime.v1", "StopContainer")) == stop
    (seen,) = plugin.seen_by("PostStopContainer")
    assert seen.container_meta.id == "c1"
    assert plugins.outcomes[("10-strict.json", "PostStopContainer", "INTERNAL")] == 1

    stop_pod = v1.StopPodSandboxRequest(pod_sandbox_id="p1").SerializeToString()
    assert call(client, path("runtime.v1", "StopPodSandbox"), stop_pod) == b""
    assert plugin.seen_by("PostStopPodSandbox")[0].pod_meta.uid == "u-1"
    assert plugins.outcomes[("10-strict.json", "PostStopPodSandbox", "INTERNAL")] == 1


def test_a_backend_failure_is_relayed_and_skips_the_post_hook(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such container")
        return b""

    backend.unary[path("runtime.v1", "StopContainer")] = refuse
    plugin = ExamplePlugin()
    plugins.register("10-example.json", plugins.serve(plugin), ["PreCreateContainer", "PostStopContainer"])
    call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path("runtime.v1", "StopContainer"), v1.StopContainerRequest(container_id="c1").SerializeToString())
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    assert raised.value.details() == "no such container"
    assert plugin.seen_by("PostStopContainer") == []


def test_update_container_resources_hook_sees_the_requested_resources(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ExamplePlugin()
    plugins.register("10-example.json", plugins.serve(plugin), ["PreCreateContainer", "PreUpdateContainerResources",
                                                                 "PostStopContainer"])
    call(client, path("runtime.v1alpha2", "CreateContainer"), create_request(v1alpha2).SerializeToString())
    update = v1alpha2.UpdateContainerResourcesRequest(
        container_id="c1", linux=v1alpha2.LinuxContainerResources(cpu_shares=256, memory_limit_in_bytes=96 << 20))
    call(client, path("runtime.v1alpha2", "UpdateContainerResources"), update.SerializeToString())

    (seen,) = plugin.seen_by("PreUpdateContainerResources")
    assert seen.container_meta.id == "c1"
    assert seen.container_resources.cpu_shares == 256 and seen.container_resources.memory_limit_in_bytes == 96 << 20
    upstream = v1alpha2.UpdateContainerResourcesRequest.FromString(
        received(backend, path("runtime.v1alpha2", "UpdateContainerResources")))
    assert upstream.linux == update.linux
    assert upstream.annotations[ANNOTATION] == "PreUpdateContainerResources"

    call(client, path("runtime.v1alpha2", "StopContainer"), v1alpha2.StopContainerRequest(container_id="c1").SerializeToString())
    (stopped,) = plugin.seen_by("PostStopContainer")
    assert stopped.container_resources.cpu_shares == 256  # the store follows the update


# --- the pod's hooked cgroup parent follows it into CreateContainer --------------------------------------


def test_a_pod_moved_by_pre_run_pod_sandbox_takes_its_containers_along(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    """containerd puts a container under CreateContainer's sandbox_config cgroup parent, not the sandbox's."""
    plugin = ExamplePlugin(ExampleSettings(pod_cgroup_parent="/kubepods/koord-be"))
    plugins.register("10-pod-only.json", plugins.serve(plugin), ["PreRunPodSandbox"])
    call(client, path("runtime.v1", "RunPodSandbox"), v1.RunPodSandboxRequest(config=pod_config(v1)).SerializeToString())
    original = create_request(v1)
    call(client, path("runtime.v1", "CreateContainer"), original.SerializeToString())

    upstream = v1.CreateContainerRequest.FromString(received(backend, path("runtime.v1", "CreateContainer")))
    expected = v1.CreateContainerRequest()
    expected.CopyFrom(original)
    expected.sandbox_config.linux.cgroup_parent = "/kubepods/koord-be"
    assert upstream == expected


def test_create_container_bytes_untouched_when_the_pod_was_not_moved(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugin = ScriptedPlugin()  # answers PreRunPodSandbox with an empty response: no change
    plugins.register("10-noop.json", plugins.serve(plugin), ["PreRunPodSandbox", "PreCreateContainer"])
    call(client, path("runtime.v1", "RunPodSandbox"), v1.RunPodSandboxRequest(config=pod_config(v1)).SerializeToString())
    data = create_request(v1).SerializeToString() + b"\xf8\x06\x2a"  # an unknown field, kept as sent
    call(client, path("runtime.v1", "CreateContainer"), data)
    assert len(plugin.seen) == 2
    assert received(backend, path("runtime.v1", "CreateContainer")) == data


def test_a_skipped_pod_is_not_moved(client: HookedCalls, backend: RecordingBackend, plugins: Plugins) -> None:
    plugin = ExamplePlugin(ExampleSettings(pod_cgroup_parent="/kubepods/koord-be"))
    plugins.register("10-example.json", plugins.serve(plugin), ["PreRunPodSandbox", "PreCreateContainer"])
    config = pod_config(v1)
    config.labels["runtimeproxy.koordinator.sh/skip-hookserver"] = "true"
    run = v1.RunPodSandboxRequest(config=config).SerializeToString()
    call(client, path("runtime.v1", "RunPodSandbox"), run)
    create = create_request(v1)
    create.sandbox_config.CopyFrom(config)
    call(client, path("runtime.v1", "CreateContainer"), create.SerializeToString())
    assert plugin.seen == []
    assert received(backend, path("runtime.v1", "RunPodSandbox")) == run
    assert received(backend, path("runtime.v1", "CreateContainer")) == create.SerializeToString()


# --- CreateContainer's edits: decoded once, the image read only while an NRI plugin is attached -------------

BUSYBOX = ImageFacts(("/entry",), ("sh",), ImageIdentity("busybox:1.36", "sha256:index", "sha256:cfg"))


@pytest.mark.parametrize("events", [None, (), (nri_events.CREATE_CONTAINER,)],
                         ids=["no NRI plugin", "attached elsewhere", "subscribed to CreateContainer"])
def test_a_create_s_edits_are_decoded_once_with_the_image_only_while_an_nri_plugin_is_attached(
        client: HookedCalls, events: tuple[str, ...] | None) -> None:
    """The config has no command: the argv is the image's, read (one ImageStatus) only for an attached NRI plugin,
    which may see it at CreateContainer or later from the model."""
    client.runtime.image = BUSYBOX
    nri = AttachedNri(events or ())
    if events is not None:
        client.service.nri = nri
    call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())
    record = client.service.store.container("c1")
    assert record is not None and record.edits is not None
    if events is None:
        assert client.runtime.images_read == [] and record.edits.args == () and record.edits.image is None
    else:
        assert client.runtime.images_read == ["busybox"] and record.edits.args == ("/entry", "sh")
        assert record.edits.image == BUSYBOX.identity
    assert nri.shown == ([record.edits] if events else [])  # CreateContainer's plugin saw what the model records


# --- UpdateContainerResources: plugins see, and the store keeps, the effective resources ----------------


def test_update_hook_sees_the_effective_resources_and_the_backend_only_the_changes(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    def add_period(request: hooks.ContainerResourceHookRequest, _: Any) -> hooks.ContainerResourceHookResponse:
        resources = hooks.LinuxContainerResources()
        resources.CopyFrom(request.container_resources)
        resources.cpu_period = 50_000
        return hooks.ContainerResourceHookResponse(container_resources=resources)

    plugin = ScriptedPlugin({"PreUpdateContainerResources": add_period})
    plugins.register("10-period.json", plugins.serve(plugin), ["PreUpdateContainerResources", "PostStopContainer"])
    create = create_request(v1)
    create.config.linux.resources.memory_limit_in_bytes = 96 << 20
    call(client, path("runtime.v1", "CreateContainer"), create.SerializeToString())

    update_path = path("runtime.v1", "UpdateContainerResources")
    shares_only = v1.UpdateContainerResourcesRequest(container_id="c1", linux=v1.LinuxContainerResources(cpu_shares=300))
    call(client, update_path, shares_only.SerializeToString())
    (seen,) = plugin.seen_by("PreUpdateContainerResources")
    assert seen.container_resources == hooks.LinuxContainerResources(cpu_shares=300, memory_limit_in_bytes=96 << 20)
    # The kubelet's sparse update plus the plugin's change; the echoed memory limit is not sent.
    (sent,) = backend.calls_to(update_path)
    assert v1.UpdateContainerResourcesRequest.FromString(sent.request).linux == \
        v1.LinuxContainerResources(cpu_shares=300, cpu_period=50_000)

    quota_only = v1.UpdateContainerResourcesRequest(container_id="c1", linux=v1.LinuxContainerResources(cpu_quota=20_000))
    call(client, update_path, quota_only.SerializeToString())
    assert plugin.seen_by("PreUpdateContainerResources")[1].container_resources == hooks.LinuxContainerResources(
        cpu_shares=300, memory_limit_in_bytes=96 << 20, cpu_period=50_000, cpu_quota=20_000)

    call(client, path("runtime.v1", "StopContainer"), v1.StopContainerRequest(container_id="c1").SerializeToString())
    (stopped,) = plugin.seen_by("PostStopContainer")
    assert stopped.container_resources == plugin.seen_by("PreUpdateContainerResources")[1].container_resources


def test_the_store_follows_updates_without_plugins_too(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    call(client, path("runtime.v1", "CreateContainer"), create_request(v1).SerializeToString())
    plugin = ScriptedPlugin()
    plugins.register("10-stop.json", plugins.serve(plugin), ["PostStopContainer"])
    update = v1.UpdateContainerResourcesRequest(container_id="c1", linux=v1.LinuxContainerResources(cpuset_cpus="1"))
    call(client, path("runtime.v1", "UpdateContainerResources"), update.SerializeToString())
    assert received(backend, path("runtime.v1", "UpdateContainerResources")) == update.SerializeToString()
    call(client, path("runtime.v1", "StopContainer"), v1.StopContainerRequest(container_id="c1").SerializeToString())
    assert plugin.seen_by("PostStopContainer")[0].container_resources == \
        hooks.LinuxContainerResources(cpu_shares=2, cpuset_cpus="1")


# --- an answer that is unsafe to apply ----------------------------------------------------------------


def escape(request: hooks.PodSandboxHookRequest, _: Any) -> hooks.PodSandboxHookResponse:
    return hooks.PodSandboxHookResponse(labels=request.labels, annotations={"hooked": "1"},
                                        cgroup_parent="../../../../escape")


def test_an_invalid_answer_under_fail_stops_the_call_before_the_backend(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugins.register("10-liar.json", plugins.serve(ScriptedPlugin({"PreRunPodSandbox": escape})),
                     ["PreRunPodSandbox"], "Fail")
    with pytest.raises(grpc.RpcError) as raised:
        call(client, path("runtime.v1", "RunPodSandbox"),
             v1.RunPodSandboxRequest(config=pod_config(v1)).SerializeToString())
    error = raised.value
    assert error.code() is grpc.StatusCode.INTERNAL
    assert "PreRunPodSandbox hook of plugin 10-liar.json" in error.details()
    assert 'cgroup_parent: "../../../../escape" is neither an absolute path' in error.details()
    status = status_pb2.Status.FromString(dict(error.trailing_metadata())["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info) and info.metadata["field"] == "cgroup_parent"
    assert backend.calls_to(path("runtime.v1", "RunPodSandbox")) == []


def test_an_invalid_answer_under_ignore_leaves_the_bytes_alone(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins
) -> None:
    plugins.register("10-liar.json", plugins.serve(ScriptedPlugin({"PreRunPodSandbox": escape})),
                     ["PreRunPodSandbox"], "Ignore")
    data = non_canonical_run_pod_sandbox(v1)
    call(client, path("runtime.v1", "RunPodSandbox"), data)
    assert received(backend, path("runtime.v1", "RunPodSandbox")) == data
    assert plugins.outcomes[("10-liar.json", "PreRunPodSandbox", "INTERNAL")] == 1


# --- fields the proxy's protos do not know reach the backend, also in a request the plugins changed --------

def full_resources(api: Any) -> Any:
    return api.LinuxContainerResources(cpu_shares=2, cpu_quota=50_000, cpu_period=100_000,
                                       memory_limit_in_bytes=64 << 20, cpuset_cpus="0", cpuset_mems="0",
                                       hugepage_limits=[api.HugepageLimit(page_size="2MB", limit=0)],
                                       unified={"memory.high": "max"})


def hooked_requests(api: Any) -> list[tuple[str, Any]]:
    """Each hooked call, in lifecycle order, with its nested messages set (those the proxy re-encodes)."""
    namespaces = api.NamespaceOption(network=2, pid=1)
    pod = pod_config(api, resources=full_resources(api), overhead=full_resources(api),
                     security_context=api.LinuxSandboxSecurityContext(namespace_options=namespaces))
    pod.dns_config.servers.append("10.0.0.10")
    pod.port_mappings.add(container_port=80)
    create = create_request(api)
    create.sandbox_config.CopyFrom(pod)
    config = create.config
    config.linux.resources.CopyFrom(full_resources(api))
    config.linux.security_context.namespace_options.CopyFrom(namespaces)
    config.mounts.add(container_path="/data", host_path="/srv/data")
    config.devices.add(container_path="/dev/null", host_path="/dev/null", permissions="rwm")
    update = api.UpdateContainerResourcesRequest(container_id="c1", linux=full_resources(api))
    return [
        ("RunPodSandbox", api.RunPodSandboxRequest(config=pod, runtime_handler="runc")),
        ("CreateContainer", create),
        ("StartContainer", api.StartContainerRequest(container_id="c1")),
        ("UpdateContainerResources", update),
        ("StopContainer", api.StopContainerRequest(container_id="c1", timeout=1)),
        ("RemoveContainer", api.RemoveContainerRequest(container_id="c1")),
        ("StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id="p1")),
        ("RemovePodSandbox", api.RemovePodSandboxRequest(pod_sandbox_id="p1")),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_fields_in_every_hooked_request_reach_the_backend_also_when_a_plugin_changed_it(
    client: HookedCalls, backend: RecordingBackend, plugins: Plugins, version: str
) -> None:
    """A newer kubelet's fields (unknown to the proxy's protos) must not be dropped by a re-encoded request."""
    plugin = ExamplePlugin(ExampleSettings(pod_cgroup_parent="/kubepods/koord-be", envs={"KEEP": "me", "ADDED": "1"},
                                           update_memory_limit_in_bytes=32 << 20))
    plugins.register("10-example.json", plugins.serve(plugin), list(HOOK_NAMES))
    api = API[version]
    for method, request in hooked_requests(api):
        sent = mark_unknown(request)
        call(client, path(version, method), request.SerializeToString())
        upstream = getattr(api, f"{method}Request").FromString(received(backend, path(version, method)))
        kept = unknown_marks(upstream)
        assert kept == sent, f"{method} lost the unknown fields of {sorted(set(sent) - set(kept))}"
    # The plugin did change the requests the proxy re-encodes.
    changed = {method: getattr(api, f"{method}Request").FromString(received(backend, path(version, method)))
               for method in ("RunPodSandbox", "CreateContainer", "UpdateContainerResources")}
    assert changed["RunPodSandbox"].config.linux.cgroup_parent == "/kubepods/koord-be"
    assert [kv.key for kv in changed["CreateContainer"].config.envs] == ["KEEP", "ADDED"]
    assert changed["CreateContainer"].config.linux.resources.cpu_shares == 512
    assert changed["UpdateContainerResources"].linux.memory_limit_in_bytes == 32 << 20


# --- an in-place pod resize (CRI 1.33's UpdatePodSandboxResources) ------------------------------------------


@pytest.mark.parametrize("code", [None, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND])
def test_a_pod_resize_reaches_the_runtime_as_sent_its_answer_comes_back_and_the_store_follows(
    client: HookedCalls, backend: RecordingBackend, code: grpc.StatusCode | None
) -> None:
    """containerd before 2.2 answers UNIMPLEMENTED (the kubelet takes it as nothing to do): the answer is the
    kubelet's unchanged, and the proxy records the pod's new resources apart, as containerd 2.2+ does; a runtime's
    other error records nothing."""
    resize_path = path("runtime.v1", "UpdatePodSandboxResources")

    async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if code is not None:
            await context.abort(code, "the runtime's own words")
        return v1.UpdatePodSandboxResourcesResponse().SerializeToString()

    backend.unary[resize_path] = answer
    run = v1.RunPodSandboxRequest(config=pod_config(v1, resources=v1.LinuxContainerResources(cpu_shares=1024)))
    call(client, path("runtime.v1", "RunPodSandbox"), run.SerializeToString())
    resize = v1.UpdatePodSandboxResourcesRequest(pod_sandbox_id="p1",
                                                 resources=v1.LinuxContainerResources(cpu_shares=2048))
    if code is None:
        assert call(client, resize_path, resize.SerializeToString()) == b""
    else:
        with pytest.raises(grpc.RpcError) as raised:
            call(client, resize_path, resize.SerializeToString())
        assert (raised.value.code(), raised.value.details()) == (code, "the runtime's own words")
    assert received(backend, resize_path) == resize.SerializeToString()
    record = client.service.store.pod("p1")
    assert record is not None
    # The sandbox config's, which containerd's NRI keeps showing.
    assert record.resources is not None and record.resources.cpu_shares == 1024
    resized = record.resized_resources
    assert (resized.cpu_shares if resized is not None else None) == (None if code is grpc.StatusCode.NOT_FOUND else 2048)
