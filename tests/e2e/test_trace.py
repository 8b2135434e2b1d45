"""The decision trace, shadow plugins and collisions through the proxy, against real containerd
(`runtimeproxyctl trace` over the admin socket), and what a proxy restart keeps."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ExampleSettings, registration
from runtimeproxy.admin.ctl import EXIT_NO_SUCH_PLUGIN, main as ctl
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from test_hooks import Lab, lab, run_pod_with_container, spec_of  # noqa: F401 (lab: the fixture)

CREATE = "PreCreateContainer"


def invalid_cpuset(request: hooks.ContainerResourceHookRequest, context: object) -> hooks.ContainerResourceHookResponse:
    return hooks.ContainerResourceHookResponse(container_resources=hooks.LinuxContainerResources(cpuset_cpus="7-x"))


def runtimeproxyctl(lab: Lab, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = ctl([*args, "--admin-endpoint", str(lab.proxy.admin_path)], out=out)
    return code, out.getvalue()


def register_shadow(lab: Lab, name: str, socket: Path, hooks_: list[str]) -> None:
    (lab.proxy.hook_config_dir / name).write_bytes(registration(socket, hooks_, "Fail", shadow=True))
    lab.proxy.wait_for_log(f"plugin {name} ")


def test_trace_shows_each_plugins_changes_a_shadow_a_collision_and_a_refusal(
    lab: Lab, log_dir: Path, cleanup_pods: list[str]
) -> None:
    _, first = lab.plugin(ExampleSettings(cpu_shares=512))
    _, second = lab.plugin(ExampleSettings(cpu_shares=1024, memory_limit_in_bytes=0, envs={"SECOND": "2"}))
    _, bad = lab.plugin(ExampleSettings(answers={CREATE: invalid_cpuset}, empty=True))
    _, trial = lab.plugin(ExampleSettings(cpu_shares=2048, envs={"EXAMPLE_PLUGIN": "hello", "SECOND": "2"}))
    lab.register("10-cpu.json", first, [CREATE, "PostStopContainer"])
    lab.register("20-mem.json", second, [CREATE])
    lab.register("30-bad.json", bad, [CREATE])
    register_shadow(lab, "40-next.json", trial, [CREATE])

    pod_id, container_id = run_pod_with_container(lab.client, log_dir, cleanup_pods)
    assert spec_of(lab.client, container_id)["linux"]["resources"]["cpu"]["shares"] == 1024  # the later plugin

    code, text = runtimeproxyctl(lab, "trace", container_id[:12])
    print(text)  # docs/operating.md quotes it
    assert code == 0, text
    assert "PreCreateContainer  container app" in text
    assert "10-cpu.json   ok" in text and "set container_resources.cpu_shares: 0 -> 512" in text
    assert "20-mem.json   ok" in text and "set container_resources.cpu_shares: 512 -> 1024" in text
    assert 'set container_envs["SECOND"]: (unset) -> "2"' in text
    assert "30-bad.json   refused" in text and "INTERNAL: invalid answer: container_resources.cpuset_cpus" in text
    assert "40-next.json  ok (shadow: not applied)" in text
    assert "would set container_resources.cpu_shares: 1024 -> 2048" in text
    assert "differs from applied: container_resources.cpu_shares: applied 1024, shadow 2048" in text
    assert ("COLLISION container_resources.cpu_shares: 10-cpu.json set 512, 20-mem.json set 1024; "
            "20-mem.json wins") in text
    assert "=> sent to the runtime without the answer of 30-bad.json (policy Ignore: not re-applied):\n" in text
    assert "       container_resources.cpu_shares: 0 -> 1024\n" in text
    assert "both set container_resources.cpu_shares" in lab.proxy.log_path.read_text()

    code, as_json = runtimeproxyctl(lab, "trace", pod_id, "-o", "json")
    document = json.loads(as_json)
    assert code == 0 and document["sandbox_ids"] == [pod_id] and document["containers"][0]["id"] == container_id
    [entry] = document["entries"]
    assert [(s["plugin"], s["outcome"], s["shadow"]) for s in entry["steps"]] == [
        ("10-cpu.json", "ok", False), ("20-mem.json", "ok", False), ("30-bad.json", "refused", False),
        ("40-next.json", "ok", True)]

    # An operator's shadow setting outlives the restart; the trace does not.
    assert runtimeproxyctl(lab, "shadow", "30-bad")[0] == 0
    assert lab.proxy.stop() == 0
    lab.proxy.start()
    code, _ = runtimeproxyctl(lab, "trace", pod_id)
    assert code == EXIT_NO_SUCH_PLUGIN
    code, status = runtimeproxyctl(lab, "status", "-o", "json")
    plugins = {p["file"]: p for p in json.loads(status)["plugins"]}
    assert plugins["30-bad.json"]["shadow"] and plugins["40-next.json"]["shadow"]
    assert not plugins["10-cpu.json"]["shadow"]
    # The pod's context is rebuilt from containerd: a post-hook after the restart still knows the pod.
    client = CriClient(open_channel(lab.proxy.listen_path))
    client.stop_container(container_id)
    client.channel.close()
    code, text = runtimeproxyctl(lab, "trace", container_id)
    assert code == 0, text
    assert "PostStopContainer  container app" in text and "=> post-hook" in text
