"""The decision trace in Docker mode: cri-dockerd's requests replayed through the proxy to a private dockerd,
`runtimeproxyctl trace` shows the same story as in CRI mode (the trace lives in the hook core)."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

from rplab.cridockerd_replay import CriDockerdReplay
from rplab.cridockerd_requests import PodShape
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.example_plugin import ExamplePlugin, ExampleSettings, registration
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from rplab.loop import LoopThread
from runtimeproxy.admin.ctl import EXIT_NO_SUCH_PLUGIN, main as ctl


HOOKS = ["PreRunPodSandbox", "PreCreateContainer", "PostStopContainer"]


def runtimeproxyctl(proxy: DockerModeProxy, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    return ctl([*args, "--admin-endpoint", str(proxy.admin_path)], out=out), out.getvalue()


def test_trace_in_docker_mode(dockerd: DockerdInstance, workdir: Path, loop_thread: LoopThread) -> None:
    base = workdir / "dktrace"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=["--log-level=debug"])
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    live, trial = ExamplePlugin(ExampleSettings(cpu_shares=512)), ExamplePlugin(ExampleSettings(cpu_shares=900))
    for plugin, socket in ((live, base / "live.sock"), (trial, base / "trial.sock")):
        loop_thread.run(plugin.start(socket))
    pod = PodShape(name="rp-trace", uid=str(uuid.uuid4()), cgroup_parent="/rp-docker", labels={"app": "rp-trace"},
                   annotations={}, sandbox_image=PAUSE_IMAGE, image=BUSYBOX_IMAGE)
    try:
        with proxy:
            (proxy.hook_config_dir / "10-live.json").write_bytes(registration(base / "live.sock", HOOKS))
            (proxy.hook_config_dir / "20-trial.json").write_bytes(
                registration(base / "trial.sock", HOOKS, "Fail", shadow=True))
            proxy.wait_for_log("plugin 20-trial.json registered")
            with CriDockerdReplay(proxy.listen_path) as replay:
                sandbox_id = replay.run_pod_sandbox(pod)
                container_id = replay.create_container(pod, sandbox_id)
                replay.start_container(container_id)
                replay.stop_container(container_id)
                code, text = runtimeproxyctl(proxy, "trace", f"default/{pod.name}")
                print(text)
                assert code == 0, text
                assert json.loads(dockerd.docker("inspect", container_id).stdout)[0]["HostConfig"]["CpuShares"] == 512
                code, as_json = runtimeproxyctl(proxy, "trace", container_id[:12], "-o", "json")
                document = json.loads(as_json)
                assert document["pod_uid"] == pod.uid and sandbox_id in document["sandbox_ids"]
                assert [e["hook"] for e in document["entries"]] == HOOKS
                create = document["entries"][1]
                assert [(s["plugin"], s["outcome"], s["shadow"]) for s in create["steps"]] == [
                    ("10-live.json", "ok", False), ("20-trial.json", "ok", True)]
                assert {"field": "container_resources.cpu_shares", "before": "512", "after": "900"} in (
                    create["steps"][1]["disagreements"])
                assert "would set container_resources.cpu_shares: 512 -> 900" in text
                replay.remove_pod_sandbox(sandbox_id)
            assert runtimeproxyctl(proxy, "trace", pod.uid)[0] == EXIT_NO_SUCH_PLUGIN  # dropped with the pod
    finally:
        for plugin in (live, trial):
            loop_thread.run(plugin.stop())
