"""koordinator's koordlet v1.8.0, the plugin the proxy exists for, on a small real cluster (rplab.cluster: etcd,
kube-apiserver, koordinator's CRDs) with the real kubelet registered as its node (rplab.kubelet_node) and the proxy
as that kubelet's runtime endpoint, in front of a containerd of its own. Pods are created through the API server, as
``kubectl apply`` would, bound to the node (there is no scheduler).

koordlet registers itself with the proxy as its DaemonSet does: it writes its hookserver.d file into the proxy's
hook directory naming its own socket. The NodeSLO koord-manager would write is written by the test. What koordlet
does is checked in the container's cgroup files, not only in the CRI request.

The cluster's peers (etcd, kube-apiserver, koordlet) take minutes to build cold: where they are not built yet the
tests skip and say how to build them (``.venv/bin/python -m rplab.peers etcd kube-apiserver koordlet``); with
RUNTIMEPROXY_REQUIRE_E2E set they are built and a failure fails.

The differential: every scenario runs through this proxy and through koordinator's own koord-runtime-proxy v1.8.0
(rplab.koord_proxy), the module's ``proxy`` fixture taking each in turn; and a third time with koordlet in NRI mode
on the NRI this proxy hosts in front of containerd 1.6 (its plugin koordlet_nri, index 00; its hook registration in
a directory the proxy does not read), the path docs/runtimes.md recommends where containerd has no NRI of its own. The cluster and the node's containerd stay
up for the module; the proxy, the kubelet registered through it and koordlet are started anew for each. VALUES
states each scenario's cgroup values through each proxy; a difference between the two is fixed in this proxy or is
a row of docs/differences.md naming the test that shows it.

Which of koordlet's hooks cannot act on this machine's kernel (group identity, core scheduling, resctrl, GPUs) is
said by ``test_the_hooks_that_cannot_act_on_this_kernel``, from what the kernel offers.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rplab.cluster import SmallCluster
from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.koord_proxy import KoordProxyProcess
from rplab.koord_proxy import PEER as REFERENCE
from rplab.koordlet import (
    NRI_PLUGIN, OWN_POD, REGISTRATION, SKIP_LABEL, UPDATE_RECEIVED, Koordlet, KERNEL_HOOKS, be_pod, cgroup_file,
    container_cgroup_values, container_spec, hooks_without_kernel_support, koord_manager_writes, lsr_pod, resize,
    sleeper,
)
from rplab.kubelet_node import NODE_NAME, KubeletNode, wait_until
from rplab.peers import PeerBuildError, is_built, peer_binary
from rplab.process import ProxyProcess
from rplab.registry import free_port

from tests.kits.machine import IMAGE_CACHE, REQUIRE_E2E_ENV, skip_or_fail

CLUSTER_PEERS = ("etcd", "kube-apiserver", "kubelet")
BUILD_HINT = (".venv/bin/python -m rplab.peers etcd kube-apiserver kubelet koordlet koord-runtime-proxy "
              "(about 20 minutes cold)")
OURS = "runtimeproxy"
NRI_MODE = "runtimeproxy-nri"  # this proxy hosting NRI, koordlet in NRI mode
PROXIES = (OURS, NRI_MODE, REFERENCE)


def require_peers(names: tuple[str, ...]) -> None:
    """Skips when a peer is not built yet (unless e2e is required: then it is built, and a failure fails)."""
    missing = [name for name in names if not is_built(name)]
    if missing and not os.environ.get(REQUIRE_E2E_ENV):
        pytest.skip(f"the small cluster's peers {', '.join(missing)} are not built: {BUILD_HINT}")
    try:
        for name in names:
            peer_binary(name)
    except PeerBuildError as error:
        skip_or_fail(f"cannot build the small cluster's peers: {error}")


@pytest.fixture(scope="module")
def cluster(workdir: Path, koordlet_summary: list[str]) -> Iterator[SmallCluster]:
    """The cluster, once for the module (both proxies' nodes register with it in turn)."""
    require_peers(CLUSTER_PEERS)
    small = SmallCluster(workdir / "cluster")
    small.start()
    try:
        koordlet_summary.append("cluster: " + ", ".join(f"{what} {seconds}" for what, seconds in small.figures.items()))
        yield small
    finally:
        small.stop()


@pytest.fixture(scope="module")
def node_runtime(workdir: Path) -> Iterator[ContainerdInstance]:
    """A containerd for the registered kubelet alone (it stops whatever pods it does not know); each proxy's
    kubelet removes its pods when it stops, so the next one finds it empty."""
    with lab_containerd(workdir / "koordlet-ctd", IMAGE_CACHE) as instance:
        yield instance


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module", params=PROXIES)
def proxy_name(request: pytest.FixtureRequest) -> str:
    """The proxy the module's scenarios run through: this one, then koordinator's own."""
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def proxy(proxy_name: str, node_runtime: ContainerdInstance, workdir: Path, metrics_port: int
          ) -> Iterator[ProxyProcess]:
    """The proxy in front of the node's containerd; plugins register in its hook directory."""
    directory = workdir / f"kl-{proxy_name}"
    process: ProxyProcess
    if proxy_name in (OURS, NRI_MODE):
        nri = [f"--nri-socket={directory / 'nri.sock'}"] if proxy_name == NRI_MODE else []
        process = ProxyProcess(directory / "rp.sock", node_runtime.address, extra_args=[
            "--log-level=info", f"--metrics-bind-address=127.0.0.1:{metrics_port}", *nri])
    else:
        require_peers((REFERENCE,))
        process = KoordProxyProcess(directory / "kp.sock", node_runtime.address)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_tail()


def registered_line(proxy: ProxyProcess, proxy_name: str) -> str:
    """What the proxy logs once it has read koordlet's registration file (or koordlet's NRI plugin attached)."""
    if isinstance(proxy, KoordProxyProcess):
        return KoordProxyProcess.registered_line(REGISTRATION)
    if proxy_name == NRI_MODE:
        return f"NRI plugin {NRI_PLUGIN} attached"
    return f"plugin {REGISTRATION} registered"


@pytest.fixture(scope="module")
def node(cluster: SmallCluster, proxy: ProxyProcess, proxy_name: str, node_runtime: ContainerdInstance,
         workdir: Path, koordlet_summary: list[str]) -> Iterator[KubeletNode]:
    """The kubelet registered as NODE_NAME, its runtime endpoint the proxy. When it stops, its Node is deleted and
    the sandboxes it stopped but left to its garbage collector are removed: the next proxy's kubelet registers the
    node afresh on an empty runtime."""
    kubelet = KubeletNode(proxy.listen_path, workdir / f"kl-{proxy_name}" / "node",
                          kubeconfig=cluster.kubeconfig("node"))
    started = time.monotonic()
    kubelet.start()
    try:
        cluster.client.wait_for_node(NODE_NAME)
        koordlet_summary.append(f"kubelet registered as {NODE_NAME} through {proxy_name} in "
                                f"{time.monotonic() - started:.1f} s")
        yield kubelet
    finally:
        kubelet.stop()
        cluster.client.delete(f"/api/v1/nodes/{NODE_NAME}")
        remove_pods(node_runtime)
        assert kubelet.host_changes() == []


def remove_pods(runtime: ContainerdInstance) -> None:
    """Every pod left in ``runtime`` (the kubelet removes only its static pods' sandboxes when it stops)."""
    client = CriClient(open_channel(runtime.address))
    with client.channel:
        client.discard_pods(pod.id for pod in client.runtime.ListPodSandbox(client.api.ListPodSandboxRequest(),
                                                                            timeout=30).items)


def hook_counts(port: int, family: str, plugin: str = REGISTRATION) -> Counter[str]:
    """A hook metric of this proxy (``hook_calls`` with outcome ok, ``hook_changes_applied``) for ``plugin``, by
    hook."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith(f"runtimeproxy_{family}_total{{") and f'plugin="{plugin}"' in line \
                and 'outcome="' not in line.replace('outcome="ok"', ""):
            hook = line.split('hook="', 1)[1].split('"', 1)[0]
            counts[hook] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def test_the_cluster_serves_koordinators_resources(cluster: SmallCluster) -> None:
    for path in ("/apis/slo.koordinator.sh/v1alpha1/nodeslos", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
                 "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"):
        assert cluster.client.get(path)["items"] == [], path


def test_the_hooks_that_cannot_act_on_this_kernel(koordlet_summary: list[str]) -> None:
    """koordlet's hooks that need more than cgroups, said rather than hidden: each this machine gives nothing to act
    on, and why (koordlet's own checks skip them alike); one it does offer is not checked by this module either."""
    missing = hooks_without_kernel_support()
    assert set(missing) <= set(KERNEL_HOOKS)
    for hook in KERNEL_HOOKS:
        koordlet_summary.append(f"koordlet's {hook} hook: " + (f"cannot act here: {missing[hook]}" if hook in missing
                                                               else "the machine offers it; not checked here"))


def test_a_pod_created_through_the_api_server_runs_through_the_proxy(
        cluster: SmallCluster, node: KubeletNode, node_runtime: ContainerdInstance, proxy_name: str,
        koordlet_summary: list[str]) -> None:
    started = time.monotonic()
    pod = cluster.client.create_pod(sleeper("plain"))
    koordlet_summary.append(f"a plain pod through {proxy_name}: Running {time.monotonic() - started:.1f} s after "
                            "its creation")
    try:
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [True]
        spec = container_spec(Path(node_runtime.address), pod)
        assert spec["annotations"]["io.kubernetes.cri.sandbox-uid"] == pod["metadata"]["uid"]
    finally:
        cluster.client.delete_pod("plain")


# What koordlet's batch-resource hook makes of the BE pod's batch resources (BE_CPU_MILLI, BE_MEMORY).
BE_CGROUPS = {"cpu.cfs_quota_us": 50_000, "cpu.cfs_period_us": 100_000, "cpu.shares": 512,
              "memory.limit_in_bytes": 256 * 1024 * 1024}
# A BE pod koordlet did not act on: the kubelet's BestEffort values (batch resources are not CPU or memory):
# CPU shares 2, no quota, no memory limit (cgroup v1's "unlimited", the largest page-aligned 64-bit value).
UNLIMITED_MEMORY = 9_223_372_036_854_771_712
KUBELET_BE_CGROUPS = {"cpu.cfs_quota_us": -1, "cpu.cfs_period_us": 100_000, "cpu.shares": 2,
                      "memory.limit_in_bytes": UNLIMITED_MEMORY}
LAST_CPU = str((os.cpu_count() or 1) - 1)  # the LSR pod's cpuset: the machine's last CPU
LSR_CGROUPS = {"cpuset.cpus": LAST_CPU, "cpu.cfs_quota_us": "-1", "cpu.shares": "1024"}
LSR_RESIZED_CGROUPS = {"cpuset.cpus": LAST_CPU, "cpu.cfs_quota_us": "-1", "cpu.shares": "1536"}
# In NRI mode the resize keeps the kubelet's quota for 1.5 CPUs: see NRI_MODE_DIFFERENCES.
LSR_RESIZED_NRI_CGROUPS = {**LSR_RESIZED_CGROUPS, "cpu.cfs_quota_us": "150000"}
BE, SKIPPED, LSR, LSR_RESIZED, DOWN, BACK = ("BE pod", "BE pod with the skip label", "LSR pod",
                                             "LSR pod resized in place", "BE pod while koordlet is down",
                                             "that BE pod once koordlet is back")
# Each scenario's cgroup values through each proxy (the container's cgroup v1 files), as the tests assert them.
VALUES: dict[str, dict[str, dict[str, Any]]] = {
    BE: {OURS: BE_CGROUPS, NRI_MODE: BE_CGROUPS, REFERENCE: BE_CGROUPS},
    SKIPPED: {OURS: KUBELET_BE_CGROUPS, NRI_MODE: KUBELET_BE_CGROUPS, REFERENCE: KUBELET_BE_CGROUPS},
    LSR: {OURS: LSR_CGROUPS, NRI_MODE: LSR_CGROUPS, REFERENCE: LSR_CGROUPS},
    LSR_RESIZED: {OURS: LSR_RESIZED_CGROUPS, NRI_MODE: LSR_RESIZED_NRI_CGROUPS, REFERENCE: LSR_RESIZED_CGROUPS},
    DOWN: {OURS: KUBELET_BE_CGROUPS, NRI_MODE: KUBELET_BE_CGROUPS, REFERENCE: KUBELET_BE_CGROUPS},
    BACK: {OURS: BE_CGROUPS, NRI_MODE: BE_CGROUPS, REFERENCE: BE_CGROUPS},
}
RESIZE_SECONDS = 60.0
RECONCILE_SECONDS = 60.0  # koordlet's reconciler runs every 10 s (--runtime-hooks-reconcile-interval)
BESTEFFORT_SHARES = 2  # the kubelet's CPU shares for a BestEffort container (batch resources are not CPU)


def saw(scenario: str, proxy_name: str, cgroups: dict[str, Any], summary: list[str]) -> None:
    """Records a scenario's cgroup values through a proxy in the summary, and checks them against VALUES."""
    summary.append(f"{scenario} through {proxy_name}: {cgroups}")
    assert cgroups == VALUES[scenario][proxy_name], scenario


# Where koordlet in NRI mode ends with other cgroups than in hook mode, and why (none is the proxy's doing).
NRI_MODE_DIFFERENCES = {
    LSR_RESIZED: "koordlet v1.8.0's NRI UpdateContainer answer carries no container ID (ContainerContext.NriDone "
                 "builds the ContainerUpdate without one), so containerd/nri's result collection takes it for an "
                 "update of another container, \"\", which is carried out nowhere; the proxy does as containerd/nri "
                 "does. The container keeps the quota the kubelet sent; hook mode unsets it.",
}


def test_both_proxies_give_each_scenario_the_same_cgroups() -> None:
    """The differential's claim, as the table states it: no scenario's values differ between the two proxies in
    hook mode; koordlet in NRI mode differs only where NRI_MODE_DIFFERENCES says why."""
    assert [scenario for scenario, by_proxy in VALUES.items() if by_proxy[OURS] != by_proxy[REFERENCE]] == []
    assert [scenario for scenario, by_proxy in VALUES.items()
            if by_proxy[NRI_MODE] != by_proxy[OURS]] == list(NRI_MODE_DIFFERENCES)
    assert all(set(by_proxy) == set(PROXIES) for by_proxy in VALUES.values())


@pytest.fixture(scope="module")
def koordlet(cluster: SmallCluster, node: KubeletNode, proxy: ProxyProcess, proxy_name: str, workdir: Path,
             koordlet_summary: list[str]) -> Iterator[Koordlet]:
    """koordlet in hook mode, registered with the proxy by its own hookserver.d file (in NRI mode attached to the
    proxy's NRI), after what koord-manager would have done for the node: its NodeSLO, the batch resources in its
    status."""
    require_peers(("koordlet",))
    koord_manager_writes(cluster.client)
    # koordlet's own pod, as its DaemonSet's: the proxy skips it (koordlet also waits for a first non-empty pod
    # list from the kubelet before it serves).
    cluster.client.create_pod(sleeper(OWN_POD, labels={SKIP_LABEL: "true"}))
    directory = workdir / f"kl-{proxy_name}"
    nri = proxy_name == NRI_MODE  # its hook registration where no proxy reads it; its NRI plugin on the proxy's
    agent = Koordlet(directory / "koordlet", cluster.kubeconfig("admin"), node,
                     directory / "unread-hookserver.d" if nri else proxy.hook_config_dir,
                     nri_socket=directory / "nri.sock" if nri else None)
    try:
        agent.start()
        proxy.wait_for_log(registered_line(proxy, proxy_name), timeout=30)
        koordlet_summary.append(f"koordlet ready (registered with {proxy_name}) {agent.ready_seconds} s after its "
                                "start")
        yield agent
    finally:
        agent.stop()
        cluster.client.delete_pod(OWN_POD)


def run_and_read(cluster: SmallCluster, runtime: Path, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """Runs ``pod``; its container's OCI resources (what CreateContainer carried) and cgroup files, read at once."""
    running = cluster.client.create_pod(pod)
    spec = container_spec(runtime, running)
    return spec["linux"]["resources"], container_cgroup_values(spec["linux"]["cgroupsPath"])


def test_koordlet_registers_with_the_proxy_as_its_chart_does(koordlet: Koordlet, proxy: ProxyProcess,
                                                             proxy_name: str) -> None:
    if proxy_name == NRI_MODE:  # its NRI plugin attached (the fixture waited for it), its hooks for no proxy
        assert koordlet.hook_config_dir != proxy.hook_config_dir
        assert not (proxy.hook_config_dir / REGISTRATION).exists()
    registration = koordlet.registered_hooks()
    assert registration["remote-endpoint"] == str(koordlet.socket)
    assert registration["failure-policy"] == "Ignore"
    assert {"PreRunPodSandbox", "PreCreateContainer", "PreUpdateContainerResources"} <= \
        set(registration["runtime-hooks"])


def test_a_be_pod_gets_the_batch_resource_hooks_cgroups(
        cluster: SmallCluster, koordlet: Koordlet, node_runtime: ContainerdInstance, proxy_name: str,
        koordlet_summary: list[str]) -> None:
    resources, cgroups = run_and_read(cluster, Path(node_runtime.address), be_pod("be"))
    try:
        saw(BE, proxy_name, cgroups, koordlet_summary)
        assert resources["cpu"]["shares"] == BE_CGROUPS["cpu.shares"]
        assert resources["cpu"]["quota"] == BE_CGROUPS["cpu.cfs_quota_us"]
        assert resources["memory"]["limit"] == BE_CGROUPS["memory.limit_in_bytes"]
    finally:
        cluster.client.delete_pod("be")


def lsr_cgroups(cgroups_path: str) -> dict[str, str]:
    """The LSR container's cpuset, CFS quota and CPU shares."""
    return {name: cgroup_file(cgroups_path, controller, name) for controller, name in
            (("cpuset", "cpuset.cpus"), ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.shares"))}


def test_an_lsr_pod_gets_the_cpuset_koord_scheduler_annotated_and_no_cfs_quota_also_when_resized(
        cluster: SmallCluster, koordlet: Koordlet, node_runtime: ContainerdInstance, proxy_name: str,
        metrics_port: int, koordlet_summary: list[str]) -> None:
    """koordlet's cpuset hook: the CPUs of koord-scheduler's resource-status annotation, and the CFS quota unset
    (the kubelet gives a Guaranteed one-CPU container a quota of 100000), on create and on an in-place resize
    (PreUpdateContainerResources: koordlet's log says it received it, whichever the proxy)."""
    running = cluster.client.create_pod(lsr_pod("lsr", LAST_CPU))
    try:
        spec = container_spec(Path(node_runtime.address), running)
        cgroups_path = spec["linux"]["cgroupsPath"]
        assert spec["linux"]["resources"]["cpu"]["cpus"] == LAST_CPU
        saw(LSR, proxy_name, lsr_cgroups(cgroups_path), koordlet_summary)
        # An in-place resize: the kubelet sends UpdateContainerResources with the new shares and quota; koordlet
        # answers PreUpdateContainerResources with the cpuset and the quota unset again.
        update_line = NRI_UPDATE_RECEIVED if proxy_name == NRI_MODE else UPDATE_RECEIVED
        received_before = koordlet.log_count(update_line)
        changed_before = hook_counts(metrics_port, "hook_changes_applied")["PreUpdateContainerResources"] \
            if proxy_name == OURS else 0
        cluster.client.patch("/api/v1/namespaces/default/pods/lsr/resize", resize("1500m"))
        # The kubelet's status then shows the new requests but keeps the old CPU limit: the runtime reports the
        # container unlimited (koordlet unset its quota), so the limit never reads back as applied.
        wait_until(lambda: cgroup_file(cgroups_path, "cpu", "cpu.shares") == "1536", RESIZE_SECONDS,
                   "the kubelet to resize the LSR pod's CPU shares")
        saw(LSR_RESIZED, proxy_name, lsr_cgroups(cgroups_path), koordlet_summary)
        received = koordlet.log_count(update_line) - received_before
        call = "UpdateContainer" if proxy_name == NRI_MODE else "PreUpdateContainerResources"
        koordlet_summary.append(f"koordlet received {received} {call} calls through {proxy_name} for the resize")
        assert received >= 1
        if proxy_name == OURS:  # this proxy's metric: koordlet's answer changed the request
            changed = hook_counts(metrics_port, "hook_changes_applied")["PreUpdateContainerResources"]
            assert changed - changed_before >= 1
    finally:
        cluster.client.delete_pod("lsr")


# koordlet's log line (at -v=5) in NRI mode for each UpdateContainer (hook mode: rplab.koordlet.UPDATE_RECEIVED).
NRI_UPDATE_RECEIVED = "handle NRI UpdateContainer successfully"


def test_a_pod_with_the_skip_label_is_not_hooked(
        cluster: SmallCluster, koordlet: Koordlet, node_runtime: ContainerdInstance, proxy_name: str,
        koordlet_summary: list[str]) -> None:
    resources, cgroups = run_and_read(cluster, Path(node_runtime.address), be_pod("skipped", {SKIP_LABEL: "true"}))
    try:
        saw(SKIPPED, proxy_name, cgroups, koordlet_summary)
        assert resources["cpu"]["shares"] == BESTEFFORT_SHARES
        assert "quota" not in resources["cpu"] and "limit" not in resources.get("memory", {})
    finally:
        cluster.client.delete_pod("skipped")


def test_koordlet_down_costs_what_ignore_says_and_its_reconciler_mends_the_pod_when_back(
        cluster: SmallCluster, koordlet: Koordlet, proxy: ProxyProcess, node_runtime: ContainerdInstance,
        proxy_name: str, koordlet_summary: list[str]) -> None:
    """Killed, koordlet leaves its registration and a dead socket: the proxy's calls fail, policy Ignore lets the
    BE pod run with the kubelet's values; back, koordlet's reconciler writes the batch cgroups itself."""
    runtime = Path(node_runtime.address)
    koordlet.kill()
    try:
        started = time.monotonic()
        resources, cgroups = run_and_read(cluster, runtime, be_pod("be-down"))
        koordlet_summary.append(f"a BE pod Running {time.monotonic() - started:.1f} s after its creation through "
                                f"{proxy_name} with koordlet down")
        saw(DOWN, proxy_name, cgroups, koordlet_summary)
        assert resources["cpu"]["shares"] == BESTEFFORT_SHARES
    finally:
        koordlet.start()
    started = time.monotonic()
    spec = container_spec(runtime, cluster.client.get("/api/v1/namespaces/default/pods/be-down"))
    cgroups_path = spec["linux"]["cgroupsPath"]
    try:
        wait_until(lambda: container_cgroup_values(cgroups_path) == BE_CGROUPS, RECONCILE_SECONDS,
                   "koordlet's reconciler to write the BE pod's cgroups")
        koordlet_summary.append(f"koordlet back in {koordlet.ready_seconds} s; its reconciler mended the BE pod "
                                f"{time.monotonic() - started:.1f} s later")
        saw(BACK, proxy_name, container_cgroup_values(cgroups_path), koordlet_summary)
    finally:
        cluster.client.delete_pod("be-down")
