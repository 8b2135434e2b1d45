"""Post-hooks and the kubelet's answer, against real containerd (issue 17: a proxy killed during a post-hook).

The answer waits for the post-hooks, as koord-runtime-proxy's does: a SIGTERM lets a running post-hook finish
and the caller gets its answer; a proxy killed during one leaves the caller with UNAVAILABLE for a call the
runtime carried out, and the restarted proxy shows the runtime's real state with full hook context.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
from google.protobuf.message import Message

from rplab.cri import CriClient, open_channel
from rplab.process import ProxyProcess

from tests.kits.hooks import ScriptedPlugin
from test_hooks import Lab, lab  # noqa: F401 (lab: the fixture)

WAIT_SECONDS = 20.0


class HeldPostStart:
    """A plugin whose PostStartContainer answers only when released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.plugin = ScriptedPlugin({"PostStartContainer": self._hold})

    async def _hold(self, request: Message, context: grpc.aio.ServicerContext) -> None:
        self.entered.set()
        await asyncio.to_thread(self.release.wait, WAIT_SECONDS)


def start_in_background(client: CriClient, container_id: str) -> Future[None]:
    executor = ThreadPoolExecutor(1)
    future = executor.submit(client.start_container, container_id)
    executor.shutdown(wait=False)
    return future


def created_container(lab: Lab, held: HeldPostStart, log_dir: Path, cleanup: list[str]) -> tuple[str, str]:
    socket = lab.base / "held.sock"
    lab.loop.run(held.plugin.start(socket))
    lab.plugins.append(held.plugin)  # type: ignore[arg-type]  # stopped with the lab
    lab.register("10-held.json", socket, ["PostStartContainer", "PostStopContainer"], timeout=WAIT_SECONDS)
    client = lab.client
    pod_config = client.pod_config(f"post{time.monotonic_ns()}", log_dir)
    pod_id = client.run_pod(pod_config)
    cleanup.append(pod_id)
    container_id = client.create_container(pod_id, client.container_config("app", envs={"KEEP": "me"}), pod_config)
    return pod_id, container_id


def test_a_sigterm_during_a_post_hook_lets_it_finish_and_the_caller_gets_its_answer(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    held = HeldPostStart()
    _, container_id = created_container(lab, held, log_dir, cleanup_pods)
    started = start_in_background(lab.client, container_id)
    assert held.entered.wait(WAIT_SECONDS)
    assert not started.done()  # the answer waits for the post-hook
    assert lab.proxy.pid is not None
    os.kill(lab.proxy.pid, signal.SIGTERM)
    held.release.set()
    started.result(WAIT_SECONDS)  # OK, not UNAVAILABLE
    assert lab.proxy.stop() == 0


def test_a_proxy_killed_during_a_post_hook_leaves_the_runtime_state_readable_after_a_restart(
    lab: Lab, direct_channel: grpc.Channel, log_dir: Path, cleanup_pods: list[str]
) -> None:
    held = HeldPostStart()
    _, container_id = created_container(lab, held, log_dir, cleanup_pods)
    started = start_in_background(lab.client, container_id)
    assert held.entered.wait(WAIT_SECONDS)
    kill_hard(lab.proxy)
    try:
        started.result(WAIT_SECONDS)
        raise AssertionError("StartContainer succeeded although the proxy was killed before answering")
    except grpc.RpcError as error:
        assert error.code() is grpc.StatusCode.UNAVAILABLE
    held.release.set()
    # The runtime carried the call out; the restarted proxy shows it, and hooks still get full context.
    direct = CriClient(direct_channel)
    running = direct.api.CONTAINER_RUNNING
    assert direct.container_status(container_id).status.state == running
    lab.proxy.start()
    with open_channel(lab.proxy.listen_path) as channel:
        client = CriClient(channel)
        assert client.container_status(container_id).status.state == running
        client.stop_container(container_id)
    (stopped,) = held.plugin.seen_by("PostStopContainer")
    assert stopped.container_meta.id == container_id and stopped.container_envs["KEEP"] == "me"


def kill_hard(proxy: ProxyProcess) -> None:
    assert proxy.pid is not None
    os.kill(proxy.pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECONDS
    while proxy.returncode() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
