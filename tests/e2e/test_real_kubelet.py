"""The real kubelet (k8s.io/kubernetes/cmd/kubelet, standalone: rplab.kubelet_node) with a node's worth of static pods
(rplab.kubelet_pods: exec, HTTP and TCP probes, a failing readiness probe, a liveness restart, a crash loop, an init
container, a pod that completes, a guaranteed pod, a pod removed and re-added), once straight to containerd and once
through the proxy with the example plugin on all seven hooks under policy Fail and NRI's real stub plugin hosted by
the proxy. The kubelet's view (its /pods: phase, Ready, per container ready, restartCount and states) and the
runtime's (CRI's lists of sandboxes and containers: states, labels, annotations) must be the same both ways, except
for the plugins' edits, which must be there through the proxy: an annotation on every sandbox and container, and in
every container an env var each, the hook plugin's CPU shares and memory limit. After each run the host is as found.

The kubelet stops every pod of its runtime it does not know: it gets a containerd of its own, which it shares with
no other test.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ANNOTATION, ExampleSettings, plugin_process, registration
from rplab.kubelet_node import KUBELET_VERSION, NODE_NAME, PEER, KubeletNode, KubeletNodeError
from rplab.kubelet_pods import NodeOutcome, NodePorts, run_node
from rplab.nri_stub import StubPlugin
from rplab.process import ProxyProcess
from rplab.registry import free_port
from runtimeproxy.hooks.names import HOOK_NAMES

from tests.kits.machine import IMAGE_CACHE, built_peer

NRI_ANNOTATION = "nri.runtimeproxy.test/kubelet"
NRI_ENV = "NRI_STUB=kubelet"
HOOK_ENV = "EXAMPLE_PLUGIN=" + ExampleSettings().envs["EXAMPLE_PLUGIN"]
# The hooks a pod's life under the kubelet calls (it never resizes: no PreUpdateContainerResources).
LIFECYCLE_HOOKS = {"PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
                   "PostStopContainer", "PostStopPodSandbox"}
PROBED = ("exec-probes", "app")  # the container whose OCI spec is read while the pods are settled


@dataclass
class Run:
    """One run's outcome, with what was read while the pods were settled."""

    outcome: NodeOutcome
    specs: dict[str, Any] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    hooks: Counter[str] = field(default_factory=Counter)
    nri_events: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    kubelet_log: str = ""  # the kubelet's log lines a comparison reports when it differs


@pytest.fixture(scope="module")
def kubelet_binary() -> Path:
    return built_peer(PEER, "the kubelet")


@pytest.fixture(scope="module")
def node_runtime(workdir: Path) -> Iterator[ContainerdInstance]:
    """A containerd for the kubelet alone (it stops whatever pods it does not know)."""
    with lab_containerd(workdir / "kubelet-ctd", IMAGE_CACHE) as instance:
        yield instance


@pytest.fixture(scope="module")
def ports() -> NodePorts:
    return NodePorts.free()


def spec_reader(runtime: Path, into: dict[str, Any]) -> Any:
    """A while_settled callback: the OCI spec of the PROBED container, read from the runtime itself."""
    def read(node: KubeletNode) -> None:
        client = CriClient(open_channel(runtime))
        with client.channel:
            for sandbox in node.sandboxes(client):
                if sandbox.metadata.name != f"{PROBED[0]}-{NODE_NAME}" or sandbox.state != client.api.SANDBOX_READY:
                    continue
                for container_id in client.container_ids(sandbox.id):
                    status = client.container_status(container_id, verbose=True)
                    if status.status.metadata.name == PROBED[1]:
                        into.update(json.loads(status.info["info"])["runtimeSpec"])
    return read


def timed_run(node: KubeletNode, ports: NodePorts, runtime: Path) -> Run:
    started = time.monotonic()
    specs: dict[str, Any] = {}
    outcome = run_node(node, ports, runtime, while_settled=spec_reader(runtime, specs))
    return Run(outcome, specs, seconds=round(time.monotonic() - started, 1))


@pytest.fixture(scope="module")
def direct(node_runtime: ContainerdInstance, kubelet_binary: Path, ports: NodePorts, workdir: Path) -> Run:
    runtime = Path(node_runtime.address)
    return timed_run(KubeletNode(runtime, workdir / "kl-direct", binary=kubelet_binary), ports, runtime)


@pytest.fixture(scope="module")
def proxied(direct: Run, node_runtime: ContainerdInstance, kubelet_binary: Path, ports: NodePorts,
            workdir: Path, kubelet_summary: list[str]) -> Iterator[Run]:
    """The same run through the proxy, with the example plugin on all seven hooks (Fail) and NRI's stub plugin."""
    base = workdir / "kl-proxied"
    base.mkdir(parents=True, exist_ok=True)
    hook_socket, hook_record = base / "hook.sock", base / "hook-requests.jsonl"
    metrics_port = free_port()
    proxy = ProxyProcess(base / "proxy" / "rp.sock", node_runtime.address, extra_args=[
        f"--nri-socket={base / 'nri.sock'}", f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--log-level=info"])
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    (proxy.hook_config_dir / "example.json").write_bytes(registration(hook_socket, list(HOOK_NAMES), "Fail"))
    stub = StubPlugin("v0.12", base / "nri-events.jsonl", name="kubelet", index="10",
                      flags=[f"-env={NRI_ENV}", f"-annotation={NRI_ANNOTATION}=yes"])
    runtime = Path(node_runtime.address)
    with plugin_process(hook_socket, hook_record):
        proxy.start()
        try:
            proxy.wait_for_log("NRI: serving plugins", timeout=30)
            stub.connect(base / "nri.sock")
            proxy.wait_for_log(f"NRI plugin {stub.plugin_id} attached", timeout=30)
            run = timed_run(KubeletNode(proxy.listen_path, base / "node", binary=kubelet_binary), ports, runtime)
            run.calls = cri_calls(metrics_port)
        finally:
            stub.stop()
            assert proxy.stop() == 0, proxy.log_tail()
    run.hooks = Counter(json.loads(line)["hook"] for line in hook_record.read_text().splitlines())
    run.nri_events = Counter(stub.events())
    kubelet_summary += [summary_line("direct", direct), summary_line("proxied", run),
                        "CRI calls through the proxy: " + ", ".join(f"{m} {n}" for m, n in run.calls.most_common()),
                        "hook calls: " + ", ".join(f"{h} {n}" for h, n in run.hooks.most_common())]
    yield run


def cri_calls(port: int) -> Counter[str]:
    """The proxy's relayed CRI calls by method, from its metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    calls: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("runtimeproxy_cri_calls_total{"):
            labels, value = line.rsplit(" ", 1)
            method = labels.split('method="', 1)[1].split('"', 1)[0]
            calls[method] += int(float(value))
    return calls


def summary_line(name: str, run: Run) -> str:
    figures = ", ".join(f"{what} {seconds} s" for what, seconds in run.outcome.figures.items())
    return f"kubelet {KUBELET_VERSION} {name}: {figures}; run {run.seconds} s"


def without_edits(view: dict[str, Any], nri: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The runtime view without the plugins' annotations (the NRI plugin's too when `nri`), and where one of them
    was missing."""
    missing = []
    stripped = json.loads(json.dumps(view))
    for pod, sandbox in stripped.items():
        if sandbox["annotations"].pop(ANNOTATION, None) != "PreRunPodSandbox":
            missing.append(f"{pod}: sandbox {ANNOTATION}")
        for name, container in sandbox["containers"].items():
            if container["annotations"].pop(ANNOTATION, None) != "PreCreateContainer":
                missing.append(f"{pod}/{name}: {ANNOTATION}")
            if nri and container["annotations"].pop(NRI_ANNOTATION, None) != "yes":
                missing.append(f"{pod}/{name}: {NRI_ANNOTATION}")
    return stripped, missing


def test_directly_every_pod_settles_as_it_should(direct: Run) -> None:
    assert direct.outcome.problems == []
    assert direct.outcome.ok(), direct.outcome.summary()


def test_through_the_proxy_the_kubelet_sees_what_it_sees_directly(direct: Run, proxied: Run) -> None:
    assert proxied.outcome.problems == []
    assert proxied.outcome.kubelet == direct.outcome.kubelet


def test_through_the_proxy_the_runtime_holds_the_same_pods_plus_the_plugins_annotations(
        direct: Run, proxied: Run) -> None:
    stripped, missing = without_edits(proxied.outcome.runtime)
    assert missing == []
    assert stripped == direct.outcome.runtime
    assert not any(ANNOTATION in pod["annotations"] for pod in direct.outcome.runtime.values())


def test_the_plugins_env_and_resources_land_in_the_container(direct: Run, proxied: Run) -> None:
    env, resources = proxied.specs["process"]["env"], proxied.specs["linux"]["resources"]
    assert HOOK_ENV in env and NRI_ENV in env
    assert resources["cpu"]["shares"] == ExampleSettings().cpu_shares
    assert resources["memory"]["limit"] == ExampleSettings().memory_limit_in_bytes
    assert HOOK_ENV not in direct.specs["process"]["env"] and NRI_ENV not in direct.specs["process"]["env"]
    assert direct.specs["linux"]["resources"]["cpu"]["shares"] != ExampleSettings().cpu_shares


def test_every_lifecycle_hook_and_nri_event_was_called(proxied: Run) -> None:
    assert LIFECYCLE_HOOKS <= set(proxied.hooks), proxied.hooks
    assert {"RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "StopPodSandbox"} <= \
        set(proxied.nri_events), proxied.nri_events
    assert proxied.calls["ListContainers"] > 0 and proxied.calls["ExecSync"] > 0, proxied.calls


@pytest.mark.parametrize("run_name", ["direct", "proxied"])
def test_the_host_is_left_as_found(run_name: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(run_name)
    assert run.outcome.host_changes == []
    # What the kubelet did change, it changed in its own mount namespace: the sysctls it sets were caught there.
    assert run.outcome.written_sysctls.get("vm/overcommit_memory") == "1"


def test_a_runtime_with_pods_of_others_is_refused(node_runtime: ContainerdInstance, kubelet_binary: Path,
                                                  workdir: Path) -> None:
    client = CriClient(open_channel(node_runtime.address))
    pod_id = client.run_pod(client.pod_config("someone-elses", workdir / "kl-foreign-logs"))
    try:
        node = KubeletNode(Path(node_runtime.address), workdir / "kl-foreign", binary=kubelet_binary)
        with pytest.raises(KubeletNodeError, match=r"holds 1 pod\(s\) of others \(.*someone-elses.*\): the kubelet"):
            node.start()
        assert node.host_before is None  # nothing was started or changed
    finally:
        client.discard_pods([pod_id])
        client.channel.close()
