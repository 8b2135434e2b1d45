"""The decision trace's own cost per hooked call, measured in-process: what `Dispatcher.run` adds with the trace
on for one plugin whose answer changes a koordlet-like set of fields (the startup case's no-op plugin changes
nothing, so its end-to-end gap shows only the floor)."""

from __future__ import annotations

import time

from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.merge import merge_container_response
from runtimeproxy.hooks.trace import OK, TraceRecorder, pod_key
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def _request(index: int) -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name=f"pod-{index}", uid=f"uid-{index}", namespace="default"),
        container_meta=hooks.ContainerMetadata(name="app"),
        container_annotations={f"io.kubernetes.container.{k}": "x" * 20 for k in ("hash", "restartCount", "ports")},
        container_resources=hooks.LinuxContainerResources(cpu_period=100000, cpu_quota=50000, cpu_shares=512,
                                                          memory_limit_in_bytes=256 << 20, oom_score_adj=900),
        pod_labels={f"label-{k}": "v" for k in range(6)},
        pod_cgroup_parent="/kubepods/burstable/pod-uid",
        container_envs={f"ENV_{k}": "value" for k in range(12)},
    )


_ANSWER = hooks.ContainerResourceHookResponse(
    container_resources=hooks.LinuxContainerResources(cpuset_cpus="0-3", cpu_shares=1024),
    container_annotations={"node.koordinator.sh/cpuset": "0-3"},
)


def traced_call_microseconds(calls: int = 3000, pods: int = 200) -> dict[str, float]:
    """Per call: the merge alone (what the dispatcher does anyway) and the merge plus the trace's recording."""
    requests = [_request(i) for i in range(pods)]
    recorder = TraceRecorder()

    def untraced(request: hooks.ContainerResourceHookRequest) -> None:
        merge_container_response(request, _ANSWER)

    def traced(request: hooks.ContainerResourceHookRequest) -> None:
        record = ChainRecord("PreCreateContainer", request, True)
        record.step("koordlet.json", OK, 0.001)
        merged = merge_container_response(request, _ANSWER)
        record.applied(request, merged)
        collisions = record.collisions()
        who = pod_key(request)
        recorder.record(who, record.entry(who.target, merged, collisions, "sent to the runtime", True))

    figures = {}
    for name, body in (("untraced_us", untraced), ("traced_us", traced)):
        started = time.perf_counter()
        for index in range(calls):
            body(requests[index % pods])
        figures[name] = (time.perf_counter() - started) / calls * 1e6
    figures["trace_us_per_call"] = figures["traced_us"] - figures["untraced_us"]
    return figures


if __name__ == "__main__":
    print(traced_call_microseconds())
