"""kill -9 of the proxy in the middle of a container's create or start, on a real containerd: the restarted proxy
finishes what its predecessor left (hooks.journal, hooks.reconcile). Starts containerd (session), the proxy as a
process, and in-process the example plugin or the project's NRI plugin, which hold the call (a hook or an event
that never answers) until the kill."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from google.protobuf.message import Message

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ExamplePlugin, ExampleSettings
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from runtimeproxy.nri.session import event_mask
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri
from rplab.nri_plugin import NriPlugin
from runtimeproxy.plugin.registration import registration

HOLD_SECONDS = 3600


def status(proxy: ProxyProcess) -> dict:
    result = subprocess.run([sys.executable, "-m", "runtimeproxy.admin.ctl", f"--admin-endpoint={proxy.admin_path}",
                             "status", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_until(condition, what: str, proxy: ProxyProcess, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}\n{proxy.log_tail()}"
        time.sleep(0.05)


def created_containers(direct: CriClient, pod_id: str) -> list[str]:
    """What the kubelet would see in state Created in the pod: containers no one will start."""
    api = direct.api
    listed = direct.runtime.ListContainers(api.ListContainersRequest(filter=api.ContainerFilter(
        pod_sandbox_id=pod_id)), timeout=30).containers
    return [c.id for c in listed if c.state == api.CONTAINER_CREATED]


def start_in_background(client: CriClient, container_id: str) -> threading.Thread:
    """The kubelet's StartContainer, which the kill cuts off (its error is the kubelet's, not the test's)."""
    def start() -> None:
        try:
            client.start_container(container_id, timeout=120)
        except grpc.RpcError:
            pass
    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    return thread


def test_a_kill_mid_start_leaves_no_created_orphan_and_no_missed_post_start(
    containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread, log_dir: Path,
    cleanup_pods: list[str], direct_channel: grpc.Channel,
) -> None:
    base = workdir / "crash-reconcile"
    proxy = ProxyProcess(base / "rp.sock", containerd.address)
    hold = {"PreStartContainer": True, "PostStartContainer": True}
    post_started: list[str] = []

    def held(hook: str):  # type: ignore[no-untyped-def]
        async def scripted(request: hooks.ContainerResourceHookRequest, context: object) -> Message:
            if hold[hook]:
                await asyncio.sleep(HOLD_SECONDS)
            if hook == "PostStartContainer":
                post_started.append(request.container_meta.id)
            return hooks.ContainerResourceHookResponse()  # no change
        return scripted

    plugin = ExamplePlugin(ExampleSettings(answers={hook: held(hook) for hook in hold}))
    plugin_socket = base / "holder.sock"
    base.mkdir(parents=True, exist_ok=True)
    loop_thread.run(plugin.start(plugin_socket))
    direct = CriClient(direct_channel)
    try:
        proxy.start()
        (proxy.hook_config_dir / "holder.json").write_bytes(
            registration(plugin_socket, list(hold), "Ignore", timeout=HOLD_SECONDS))
        wait_until(lambda: any(p["file"] == "holder.json" for p in status(proxy)["plugins"]), "registered", proxy)
        with open_channel(proxy.listen_path) as channel:
            client = CriClient(channel)
            pod_config = client.pod_config("crashed-mid-start", log_dir)
            pod_id = client.run_pod(pod_config)
            cleanup_pods.append(pod_id)
            never_started = client.create_container(pod_id, client.container_config("app"), pod_config)
            started = client.create_container(pod_id, client.container_config("sidecar"), pod_config)
            # 1. held in PreStartContainer: the runtime never gets the start; the kill leaves it Created.
            start_in_background(client, never_started)
            wait_until(lambda: plugin.calls["PreStartContainer"] == 1, "PreStart held", proxy)
            proxy.kill()
        # The sidecar is Created too, but its start is still to come: not an orphan.
        orphans_before = [cid for cid in created_containers(direct, pod_id) if cid != started]
        assert orphans_before == [never_started]

        hold["PreStartContainer"] = False
        proxy.start()
        wait_until(lambda: status(proxy)["reconciliation"]["done"], "reconciled", proxy)
        reconciled = status(proxy)["reconciliation"]
        assert (reconciled["interrupted_calls"], reconciled["removed"]) == (1, 1), reconciled
        orphans_after = [cid for cid in created_containers(direct, pod_id) if cid != started]
        assert orphans_after == [] and created_containers(direct, pod_id) == [started]

        # 2. held in PostStartContainer: the runtime started it; the kill leaves its post-start never run.
        with open_channel(proxy.listen_path) as channel:
            start_in_background(CriClient(channel), started)
            wait_until(lambda: plugin.calls["PostStartContainer"] == 1, "PostStart held", proxy)
            proxy.kill()
        hold["PostStartContainer"] = False
        proxy.start()
        wait_until(lambda: status(proxy)["reconciliation"]["done"], "reconciled", proxy)
        assert status(proxy)["reconciliation"]["post_started"] == 1
        assert post_started == [started]
        running = direct.container_status(started).status.state
        assert running == direct.api.CONTAINER_RUNNING and created_containers(direct, pod_id) == []
        print(f"\nkill -9 mid-start: Created orphans {len(orphans_before)} -> {len(orphans_after)}; "
              f"post-starts missed 1 -> {1 - len(post_started)}")
    finally:
        proxy.stop()
        loop_thread.run(plugin.stop())


def test_a_kill_between_the_runtimes_create_and_its_answer_leaves_no_created_orphan(
    containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread, log_dir: Path,
    cleanup_pods: list[str], direct_channel: grpc.Channel,
) -> None:
    """containerd created the container; the proxy is held after it (an NRI plugin that never answers its
    PostCreateContainer) and killed: the kubelet never gets the ID, never starts it, and creates the next
    attempt. The restarted proxy finds it by pod, name and attempt and removes it; the next attempt stays."""
    base = workdir / "crash-create"
    proxy = ProxyProcess(base / "rp.sock", containerd.address, extra_args=[
        f"--nri-socket={base / 'nri.sock'}", "--nri-request-timeout=600"])
    held = asyncio.Event()

    async def stall(plugin: NriPlugin, event: Message) -> Message:
        held.set()
        await plugin.shut_down.wait()  # never, while the proxy lives
        return nri.Empty()

    plugin = NriPlugin(name="holder", index="10", events=event_mask(nri.POST_CREATE_CONTAINER),
                       methods={"StateChange": (nri.StateChangeEvent, stall)})
    direct = CriClient(direct_channel)
    try:
        proxy.start()
        proxy.wait_for_log("NRI: serving plugins")
        loop_thread.run(plugin.connect(base / "nri.sock"))
        proxy.wait_for_log("NRI plugin 10-holder attached")
        with open_channel(proxy.listen_path) as channel:
            client = CriClient(channel)
            pod_config = client.pod_config("crashed-mid-create", log_dir)
            pod_id = client.run_pod(pod_config)
            cleanup_pods.append(pod_id)
            created = threading.Thread(target=lambda: _create_cut_off(client, pod_id, pod_config), daemon=True)
            created.start()
            wait_until(held.is_set, "PostCreateContainer held", proxy)
            proxy.kill()
        loop_thread.run(_close(plugin))
        orphans_before = created_containers(direct, pod_id)
        assert len(orphans_before) == 1
        # The kubelet's next attempt, straight to containerd while the proxy is down (as a kubelet would
        # after the restart): it must survive the reconciliation.
        retry = direct.container_config("app")
        retry.metadata.attempt, retry.log_path = 1, "app/1.log"
        next_attempt = direct.create_container(pod_id, retry, pod_config)
        proxy.start()
        wait_until(lambda: status(proxy)["reconciliation"]["done"], "reconciled", proxy)
        reconciled = status(proxy)["reconciliation"]
        assert (reconciled["interrupted_calls"], reconciled["removed"]) == (1, 1), reconciled
        orphans_after = [cid for cid in created_containers(direct, pod_id) if cid != next_attempt]
        assert orphans_after == [] and created_containers(direct, pod_id) == [next_attempt]
        print(f"\nkill -9 between containerd's create and the answer: Created orphans {len(orphans_before)} -> "
              f"{len(orphans_after)}")
    finally:
        proxy.stop()


def _create_cut_off(client: CriClient, pod_id: str, pod_config: object) -> None:
    try:
        client.create_container(pod_id, client.container_config("app"), pod_config, timeout=120)
    except grpc.RpcError:
        pass


async def _close(plugin: NriPlugin) -> None:
    plugin.close()
