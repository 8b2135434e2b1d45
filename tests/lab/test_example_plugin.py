"""The example plugin, the one fake plugin server of tests, lab and bench: its echo mode (the whole request comes
back, field by field, nothing edited), scripted answers sent as they are, the empty no-op mode, the call
counts its process writes on SIGUSR1 (what the benchmark reads), and the lab's plugin answering what the proxy
accepts for a real kubelet's pods."""

from __future__ import annotations

import io
import json
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from rplab.example_plugin import (
    LAB_ARGUMENTS, ExamplePlugin, ExampleSettings, ScriptedPlugin, echoed, plugin_process, subtree_parent,
)
from rplab.loop import LoopThread
from runtimeproxy.admin.ctl import main as ctl
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc
from runtimeproxy.plugin import samples

WAIT_SECONDS = 10.0


def call(loop: LoopThread, socket: Path, rpc: str, request: Message) -> Message:
    """One hook call to the plugin on `socket`, as the proxy makes it."""
    async def once() -> Message:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            method: Callable[[Message], Awaitable[Message]] = getattr(hooks_grpc.RuntimeHookServiceStub(channel), rpc)
            return await method(request)
    return loop.run(once())


def serving(loop: LoopThread, plugin: ExamplePlugin, socket: Path) -> ExamplePlugin:
    loop.run(plugin.start(socket))
    return plugin


def test_pod_request_echoed() -> None:
    request = hooks.PodSandboxHookRequest(labels={"app": "a"}, annotations={"k": "v"}, cgroup_parent="/kubepods",
                                          resources=hooks.LinuxContainerResources(cpu_shares=512, cpuset_cpus="0"))
    response = echoed(request, hooks.PodSandboxHookResponse)
    assert response == hooks.PodSandboxHookResponse(labels={"app": "a"}, annotations={"k": "v"},
                                                    cgroup_parent="/kubepods", resources=request.resources)


def test_container_request_echoed_without_inventing_fields() -> None:
    request = hooks.ContainerResourceHookRequest(container_annotations={"a": "1"}, pod_cgroup_parent="/p",
                                                 container_envs={"X": "1"})
    response = echoed(request, hooks.ContainerResourceHookResponse)
    assert dict(response.container_annotations) == {"a": "1"} and dict(response.container_envs) == {"X": "1"}
    assert response.pod_cgroup_parent == "/p"
    assert not response.HasField("container_resources")  # absent in the request: absent in the answer


def test_scripted_answers_go_out_as_they_are_and_unscripted_hooks_answer_empty(
        loop_thread: LoopThread, tmp_path: Path) -> None:
    scripted = hooks.ContainerResourceHookResponse(container_envs={"ONLY": "this"})
    plugin = serving(loop_thread, ScriptedPlugin({"PostStartContainer": lambda request, context: scripted}),
                     tmp_path / "p.sock")
    try:
        request = hooks.ContainerResourceHookRequest(container_envs={"PATH": "/bin"})
        # As it is, even for a post-hook (the kit would answer a post-hook empty): tests make plugins lie.
        assert call(loop_thread, tmp_path / "p.sock", "PostStartContainerHook", request) == scripted
        assert call(loop_thread, tmp_path / "p.sock", "PreCreateContainerHook", request) == \
            hooks.ContainerResourceHookResponse()
        assert [hook for hook, _ in plugin.seen] == ["PostStartContainer", "PreCreateContainer"]
        assert plugin.seen_by("PreCreateContainer") == [request]
    finally:
        loop_thread.run(plugin.stop())


def test_empty_mode_answers_nothing_and_counts_the_calls(loop_thread: LoopThread, tmp_path: Path) -> None:
    plugin = serving(loop_thread, ExamplePlugin(ExampleSettings(empty=True)), tmp_path / "p.sock")
    try:
        request = hooks.PodSandboxHookRequest(annotations={"a": "1"})
        for _ in range(2):
            assert call(loop_thread, tmp_path / "p.sock", "PreRunPodSandboxHook", request) == \
                hooks.PodSandboxHookResponse()
        assert plugin.calls == {"PreRunPodSandbox": 2}
    finally:
        loop_thread.run(plugin.stop())


def test_the_plugin_process_writes_its_counts_on_sigusr1(loop_thread: LoopThread, tmp_path: Path) -> None:
    socket, counts = tmp_path / "noop.sock", tmp_path / "counts.json"
    with plugin_process(socket, None, "--empty", "--counts", str(counts)) as process:
        request = hooks.ContainerResourceHookRequest(container_envs={"PATH": "/bin"})
        assert call(loop_thread, socket, "PreStartContainerHook", request) == hooks.ContainerResourceHookResponse()
        process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + WAIT_SECONDS
        while not counts.exists():
            assert time.monotonic() < deadline, "no counts written"
            time.sleep(0.05)
        assert json.loads(counts.read_text()) == {"PreStartContainer": 1}


@pytest.mark.parametrize("driver", samples.CGROUP_DRIVERS)
def test_the_labs_plugin_answers_what_the_proxy_accepts_for_a_kubelets_pods(driver: str, tmp_path: Path) -> None:
    """`runtimeproxyctl try-plugin` (the kubelet's pod shapes, both cgroup drivers) finds every answer of the
    lab's plugin valid: its pods stay in their hierarchy (the proxy refuses a parent outside `kubepods`)."""
    socket = tmp_path / "lab-plugin.sock"
    with plugin_process(socket, None, *LAB_ARGUMENTS):
        out = io.StringIO()
        code = ctl(["try-plugin", "--endpoint", str(socket), "--cgroup-driver", driver, "-o", "json"], out=out)
    trials = {trial["hook"]: trial for trial in json.loads(out.getvalue())["hooks"]}
    assert sorted(trials) == sorted(HOOK_NAMES)
    assert [(hook, trial["code"], trial["problem"]) for hook, trial in trials.items()
            if trial["code"] != "OK" or trial["problem"]] == []
    moved = {change["field"]: change["after"] for change in trials["PreRunPodSandbox"]["changes"]}
    assert moved["cgroup_parent"] == f'"{subtree_parent(samples.pod_cgroup_parent(driver), LAB_ARGUMENTS[1])}"'
    assert code == 0, out.getvalue()


def test_a_pod_is_moved_within_its_own_hierarchy_keeping_its_own_cgroup() -> None:
    assert subtree_parent("/kubepods/burstable/pod1", "rp") == "/kubepods/rp/pod1"
    assert subtree_parent("/kubepods/pod1", "rp") == "/kubepods/rp/pod1"  # Guaranteed
    assert subtree_parent("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice", "rp") == \
        "/kubepods.slice/kubepods-rp.slice/kubepods-rp-pod1_2.slice"
    assert subtree_parent("/kubepods", "rp") == "/kubepods/rp"
    assert subtree_parent("", "rp") == "/rp"  # no parent: the runtime's default (the lab's own pods)
