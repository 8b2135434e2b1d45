"""HookPlugin served on a real unix socket, called over gRPC as the proxy calls it."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.kits.hooks import container_request, pod_request
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc
from runtimeproxy.plugin import HOOKS, HookError, HookPlugin, echoed


class EnvPlugin(HookPlugin):
    def pre_create_container(self, request: hooks.ContainerResourceHookRequest) -> hooks.ContainerResourceHookResponse:
        return hooks.ContainerResourceHookResponse(container_envs={"MY_VAR": "x"})

    async def pre_run_pod_sandbox(self, request: hooks.PodSandboxHookRequest) -> hooks.PodSandboxHookResponse:
        return hooks.PodSandboxHookResponse(annotations={"seen": request.pod_meta.name})

    def post_stop_container(self, request: hooks.ContainerResourceHookRequest) -> None:
        raise HookError("cannot clean up", grpc.StatusCode.UNAVAILABLE)

    def pre_update_container_resources(self, request: hooks.ContainerResourceHookRequest) -> None:
        raise RuntimeError("a bug")


@pytest.fixture
def served(loop_thread: LoopThread, tmp_path: Path) -> Iterator[tuple[Path, hooks_grpc.RuntimeHookServiceStub]]:
    plugin = EnvPlugin()
    socket = tmp_path / "run" / "my-plugin" / "plugin.sock"
    loop_thread.run(plugin.start(socket))
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        yield socket, hooks_grpc.RuntimeHookServiceStub(channel)
    loop_thread.run(plugin.stop())


def test_hook_names_and_methods() -> None:
    assert [(hook.name, hook.method, hook.rpc) for hook in HOOKS][:2] == [
        ("PreRunPodSandbox", "pre_run_pod_sandbox", "PreRunPodSandboxHook"),
        ("PreCreateContainer", "pre_create_container", "PreCreateContainerHook")]
    assert all(hasattr(HookPlugin, hook.method) and hasattr(HookPlugin, hook.rpc) for hook in HOOKS)


def test_implemented_hooks_are_the_ones_a_subclass_defines() -> None:
    assert EnvPlugin.implemented_hooks() == [
        "PreRunPodSandbox", "PreCreateContainer", "PreUpdateContainerResources", "PostStopContainer"]
    assert HookPlugin.implemented_hooks() == []


def test_socket_and_directory_permissions(served: tuple[Path, object]) -> None:
    socket, _ = served
    assert stat.S_ISSOCK(socket.stat().st_mode) and stat.S_IMODE(socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o755


def test_answers_are_the_echo_plus_changes(served: tuple[Path, hooks_grpc.RuntimeHookServiceStub]) -> None:
    _, stub = served
    request = container_request()
    response = stub.PreCreateContainerHook(request)
    assert dict(response.container_envs) == {**request.container_envs, "MY_VAR": "x"}
    assert response.container_resources == request.container_resources
    pod = stub.PreRunPodSandboxHook(pod_request())  # an async hook
    assert dict(pod.annotations) == {**pod_request().annotations, "seen": "web"}
    # A hook the plugin does not define answers the echo; a post-hook answers empty.
    assert stub.PreStartContainerHook(request) == echoed(request, hooks.ContainerResourceHookResponse)
    assert stub.PostStartContainerHook(request) == hooks.ContainerResourceHookResponse()


def test_errors_become_statuses(served: tuple[Path, hooks_grpc.RuntimeHookServiceStub]) -> None:
    _, stub = served
    with pytest.raises(grpc.RpcError) as chosen:
        stub.PostStopContainerHook(container_request())
    assert chosen.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert chosen.value.details() == "PostStopContainer: cannot clean up"  # type: ignore[attr-defined]
    with pytest.raises(grpc.RpcError) as bug:
        stub.PreUpdateContainerResourcesHook(container_request())
    assert bug.value.code() is grpc.StatusCode.INTERNAL  # type: ignore[attr-defined]
    assert "a bug" in bug.value.details()  # type: ignore[attr-defined]


def test_a_stale_socket_is_replaced_another_file_is_not(loop_thread: LoopThread, tmp_path: Path) -> None:
    import socket as sockets

    stale = tmp_path / "stale.sock"
    with sockets.socket(sockets.AF_UNIX) as leftover:
        leftover.bind(str(stale))
    plugin = EnvPlugin()
    loop_thread.run(plugin.start(stale))
    loop_thread.run(plugin.stop())
    regular = tmp_path / "file.sock"
    regular.write_text("")
    with pytest.raises(FileExistsError, match="not a socket"):
        loop_thread.run(EnvPlugin().start(regular))
