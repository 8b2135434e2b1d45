"""The kubelet's own CRI client (k8s.io/cri-client, driven by the crilifecycle peer: rplab/kubelet.py) over a pod's
life, against real containerd 1.6 directly and through the proxy: bare, with the echo plugin on all seven hooks
(policy Fail), and hosting the no-op NRI plugin (launched by the proxy) on every event; with the client's streaming
list calls on and off. Every step's answer through the proxy must equal direct's, the gRPC calls the client made
for it included (with streaming on: each Stream* call answered UNIMPLEMENTED by containerd 1.6, then the List call
it falls back to). Each comparison runs twice: a pod whose env values are all UTF-8 (a kubelet's usual pod), and
one with an env value that is not UTF-8 (cri-api 0.37 sends it as bytes): directly, containerd gives the container
U+FFFD for each bad byte, and the container must get the same through the proxy.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from rplab.conformance import NRI_PLUGIN_ID, echo_hooked_proxy_in, echo_record_in, nri_hosting_proxy_in
from rplab.containerd import ContainerdInstance
from rplab.kubelet import (BINARY_ENV_IN_CONTAINER, BINARY_ENV_SENT, Lifecycle,
                           differences, run_lifecycle)
from rplab.process import ProxyProcess
from runtimeproxy.admin.ctl import main as ctl_main
from runtimeproxy.hooks.names import HOOK_NAMES

TARGETS = ("proxy", "proxy+plugin", "proxy+nri")
# The client's list calls and the streaming call each tries first when streaming is on.
STREAM_OF = {"ListPodSandbox": "StreamPodSandboxes", "ListContainers": "StreamContainers",
             "ListContainerStats": "StreamContainerStats", "ListPodSandboxStats": "StreamPodSandboxStats"}
# The NRI events the sequence causes (every lifecycle event; the Post* ones after the runtime answered; the pod
# resize's pair although containerd 1.6 answers UpdatePodSandboxResources UNIMPLEMENTED: the proxy does 2.2+'s part).
NRI_EVENTS = {"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer", "PostCreateContainer",
              "StartContainer", "PostStartContainer", "UpdateContainer", "PostUpdateContainer", "StopContainer",
              "RemoveContainer", "UpdatePodSandbox", "PostUpdatePodSandbox"}


@dataclass
class Targets:
    """Where the driver goes: containerd's socket and three proxies in front of it."""

    sockets: dict[str, Path]
    echo_record: Path
    nri_admin: Path


@pytest.fixture(scope="module")
def targets(containerd: ContainerdInstance, proxy_process: ProxyProcess, workdir: Path,
            kubelet_client: Path) -> Iterator[Targets]:
    with ExitStack() as stack:
        hooked = stack.enter_context(echo_hooked_proxy_in(workdir / "kcl-echo", containerd.address))
        hosting = stack.enter_context(nri_hosting_proxy_in(workdir / "kcl-nri", containerd.address))
        yield Targets({"direct": Path(containerd.address), "proxy": proxy_process.listen_path,
                       "proxy+plugin": hooked.listen_path, "proxy+nri": hosting.listen_path},
                      echo_record_in(workdir / "kcl-echo"), hosting.admin_path)


Run = Callable[..., Lifecycle]


@pytest.fixture(scope="module")
def lifecycle(targets: Targets, workdir: Path) -> Run:
    """``lifecycle(target, streaming, binary_env=False)``: the driver's run against a target; each run once per
    module, with a pod name of its own. Without ``binary_env`` every env value is UTF-8 (a kubelet's usual pod)."""
    runs: dict[tuple[str, bool, bool], Lifecycle] = {}

    def run(target: str, streaming: bool, binary_env: bool = False) -> Lifecycle:
        key = (target, streaming, binary_env)
        if key not in runs:
            name = "-".join(("kcl", target.replace("+", "-"), "streaming" if streaming else "unary",
                             "binary" if binary_env else "utf8"))
            runs[key] = run_lifecycle(targets.sockets[target], workdir / "kcl-logs" / name, pod_name=name,
                                      streaming=streaming, binary_env=binary_env)
        return runs[key]

    return run


@pytest.fixture(params=[False, True], ids=["unary", "streaming"])
def streaming(request: pytest.FixtureRequest) -> bool:
    return request.param


def test_the_kubelets_client_runs_a_pod_directly(lifecycle: Run, streaming: bool) -> None:
    direct = lifecycle("direct", streaming, binary_env=True)
    assert direct.unexpected_failures() == {}  # containerd 1.6 and 1.7 lack RuntimeConfig, 2.x has it
    assert direct.step("ExecSync", "a failing exec probe")["answer"] == {
        "stdout": "probe\n", "stderr": "failing\n", "exit_code": 3}
    # The bytes that are not UTF-8 reach containerd; its OCI spec (JSON) and so the container have U+FFFD.
    assert direct.binary_env == {"sent_hex": BINARY_ENV_SENT.hex(), "oci_spec_hex": BINARY_ENV_IN_CONTAINER.hex(),
                                 "in_container_hex": BINARY_ENV_IN_CONTAINER.hex()}
    spec = direct.step("ContainerStatus", "resized")["answer"]["info"]["info"]["runtimeSpec"]["linux"]["resources"]
    assert (spec["cpu"]["quota"], spec["cpu"]["shares"], spec["memory"]["limit"]) == (50000, 512, 128 << 20)
    resize = direct.step("UpdatePodSandboxResources")  # containerd before 2.2 has no pod resize
    assert [call["code"] for call in resize["wire"]] in (["OK"], ["UNIMPLEMENTED"]), resize


def test_the_client_uses_the_stream_calls_the_runtime_has_and_falls_back_from_the_others(
        lifecycle: Run, streaming: bool) -> None:
    """containerd before 2.4 answers the Stream* list calls UNIMPLEMENTED and the client falls back to the List
    call; 2.4 serves them."""
    direct = lifecycle("direct", streaming)
    for step in direct.steps:
        if step["step"] in STREAM_OF:
            # (a streaming step's client is new: its first call is the Version check of its connection)
            calls = [(call["method"].split("/")[1], call["code"]) for call in step["wire"]
                     if not call["method"].endswith("/Version")]
            listed = [(step["step"], "OK")]
            if not streaming:
                assert calls == listed, step
            elif calls[:1] == [(STREAM_OF[step["step"]], "OK")]:
                assert calls == [(STREAM_OF[step["step"]], "OK")], step
            else:
                assert calls == [(STREAM_OF[step["step"]], "UNIMPLEMENTED")] + listed, step


@pytest.mark.parametrize("target", TARGETS)
def test_every_step_answers_through_the_proxy_as_directly(
        lifecycle: Run, target: str, streaming: bool, conformance_summary: list[str]) -> None:
    direct, proxied = lifecycle("direct", streaming), lifecycle(target, streaming)
    found = differences(direct, proxied)
    assert not found, "\n".join(found)
    conformance_summary.append(
        f"kubelet's CRI client ({direct.document['client']}, {'streaming' if streaming else 'unary'} lists) x "
        f"{target}: {len(proxied.steps)} steps, {len(proxied.called())} gRPC calls equal to direct")


@pytest.mark.parametrize("target", TARGETS)
def test_an_env_value_not_utf8_reaches_the_container_through_the_proxy_as_directly(
        lifecycle: Run, target: str, streaming: bool) -> None:
    direct, proxied = lifecycle("direct", streaming, binary_env=True), lifecycle(target, streaming, binary_env=True)
    assert proxied.binary_env == direct.binary_env, proxied.step("CreateContainer")
    found = differences(direct, proxied)
    assert not found, "\n".join(found)


def test_the_echo_plugin_saw_every_hook(lifecycle: Run, targets: Targets) -> None:
    lifecycle("proxy+plugin", False)
    hooks = Counter(orjson.loads(line)["hook"] for line in targets.echo_record.read_bytes().splitlines())
    assert set(hooks) == set(HOOK_NAMES), hooks


def test_the_nri_plugin_saw_every_event(lifecycle: Run, targets: Targets) -> None:
    lifecycle("proxy+nri", False)
    out = io.StringIO()
    assert ctl_main([f"--admin-endpoint={targets.nri_admin}", "status", "-o", "json"], out=out) == 0
    plugin, = [p for p in json.loads(out.getvalue())["nri_plugins"] if p["name"] == NRI_PLUGIN_ID]
    calls = {entry["hook"]: entry for entry in plugin["event_stats"]}
    assert {event for event, entry in calls.items() if entry["calls"]} >= NRI_EVENTS, calls
    assert all(entry["failures"] == 0 for entry in calls.values()), calls
