"""koordinator's own koord-runtime-proxy v1.8.0 as the differential reference: the program this proxy replaces, run
beside it (rplab.koord_proxy: in its private mount namespace, with a private plugin directory).

The same hook plugin (the example plugin, recording every request it receives and answering with edits: an env var,
annotations, CPU shares and a memory limit, the pod's cgroup parent, a memory limit on updates) is registered the
same way with both proxies, and the same pod lives are driven through each against the same containerd: the
kubelet's own (rplab.kubelet_node: v1.35.8 standalone with two static pods, on a containerd of its own), crictl's,
the kubelet's CRI client's (rplab.kubelet; once with an env value that is not UTF-8), one over runtime.v1alpha2, one
with each proxy restarted between create and start, a pod with the skip label, calls containerd refuses; then a
plugin answering with only what it changes, two plugins on every hook, and a plugin failing under policy Fail. What
each plugin received (which hooks, every field of every request) and what the pod and its container ended up with
(the OCI spec: env, resources, cgroups path; the pod's and the container's labels and annotations; every call's
answer) are compared leaf by leaf (rplab.koord_differential).

Every difference is either made equal or is a row of DIFFERENCES, with why and the tests that show it; each test
fails on a difference the table does not list for it and on a listed difference that is gone. docs/differences.md's
table is this table (``test_the_differences_page_lists_exactly_what_the_tests_saw``)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.rpc import status_pb2

from rplab.containerd import ContainerdInstance, lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.differential import outcome_of, unexplained
from rplab.example_plugin import ExamplePlugin, ExampleSettings, registration
from rplab.images import BUSYBOX_IMAGE
from rplab.koord_differential import HookedRun, differences, request_view
from rplab.koord_proxy import KoordProxyProcess, host_traces
from rplab.kubelet import BINARY_ENV_IN_CONTAINER, run_lifecycle
from rplab.kubelet_node import PEER as KUBELET_PEER
from rplab.kubelet_node import KubeletNode, wait_until
from rplab.kubelet_pods import TIME_KEYS, UID_KEYS, NodePorts, kubelet_view, node_pods, runtime_view
from rplab.loop import LoopThread
from rplab.peers import PeerBuildError, peer_binary
from rplab.process import ProxyProcess
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.options import DEFAULT_SKIP_LABEL_KEY, DEFAULT_SKIP_LABEL_VALUE

from tests.kits.docs import doc_page, table_rows
from tests.kits.machine import IMAGE_CACHE, built_peer, skip_or_fail
from test_crictl import HOST_NETWORK, container_config, crictl_on, write_json

MiB = 1024 * 1024
POD_PARENT = "/rp-koord-diff"  # the pods' cgroup parent as the drivers send it
HOOKED_PARENT = f"{POD_PARENT}/hooked"  # where the plugin moves them
SETTINGS = ExampleSettings(pod_cgroup_parent=HOOKED_PARENT, update_memory_limit_in_bytes=96 * MiB)
REGISTRATION = "10-example.json"
REFERENCE, OURS = "koord-runtime-proxy", "runtimeproxy"
_serial = itertools.count()
POD_PREFIX = "koord-diff-"  # every pod's name starts so: "koord-diff-<n>-<proxy>"


@dataclass(frozen=True)
class Known:
    """A difference the tests saw: the row of docs/differences.md (what, why, the tests that show it) and the view
    paths it accounts for (``*`` matches any part of a path)."""

    difference: str
    why: str
    tests: tuple[str, ...]
    paths: tuple[str, ...]
    # Shows on some runs only (the Go proxy's map order): never reported as gone.
    sometimes: bool = False


CRICTL = "test_a_crictl_pod_life_through_both"
KUBELET = "test_the_kubelet_clients_pod_life_through_both"
RESTART = "test_a_proxy_restarted_between_create_and_start"
V1ALPHA2 = "test_a_v1alpha2_pod_life_through_both"
BINARY_ENV = "test_an_env_value_that_is_not_utf8"
REFUSED = "test_calls_containerd_refuses"
TWO = "test_two_plugins_on_every_hook"
SKIPPED = "test_a_pod_with_the_skip_label"
SPARSE_ANSWER = "test_a_sparse_answer"
KUBELET_NODE = "test_the_kubelets_static_pods_through_both"
FAILING_PLUGIN = "test_a_plugin_failing_under_policy_fail"
LIVES = (CRICTL, KUBELET, RESTART)
# koord-runtime-proxy (the reference) vs this proxy: what differs, and why. docs/differences.md's table is this one,
# row for row: edit both.
DIFFERENCES: tuple[Known, ...] = (
    Known("A container of a pod that PreRunPodSandbox moved to another cgroup parent is created in its pod's "
          "cgroup, and container hooks get that parent. The Go proxy creates it under the parent the kubelet sent, "
          "outside its pod's cgroup, and tells the hooks that parent.",
          "A container belongs in its pod's cgroup: pod-level limits and koordlet's QoS placement act there. The Go "
          "proxy takes the parent from the create request's sandbox config, which still holds the kubelet's.",
          (*LIVES, REFUSED), ("*Container*.pod_cgroup_parent", "*.runtimeSpec.linux.cgroupsPath")),
    Known("Hooks get the pod's resources as the kubelet sends them in the sandbox config (`resources` of pod hooks, "
          "`pod_resources` of container hooks); the Go proxy leaves both empty.",
          "The protocol has the fields and koordlet reads them; the Go proxy never fills them.",
          (KUBELET, BINARY_ENV, SPARSE_ANSWER, KUBELET_NODE),
          ("*PreRunPodSandbox.resources.*", "*PostStopPodSandbox.resources.*", "*.pod_resources.*")),
    Known("After UpdateContainerResources, hooks show the container's swap limit as containerd set it (a new memory "
          "limit without swap sets swap to that limit); the Go proxy shows none.",
          "Plugins see the container as it is, not the kubelet's sparse update laid over the create request.",
          (*LIVES, SPARSE_ANSWER), ("PreUpdateContainerResources.container_resources.memory_swap_limit_in_bytes",
                  "PostStopContainer.container_resources.memory_swap_limit_in_bytes")),
    Known("The container's env keeps the kubelet's order, the plugins' new variables after it; the Go proxy writes "
          "it in Go map order, different from one create to the next.",
          "A stable order keeps a container's OCI spec the same from one create to the next.",
          LIVES, ("*.config.envs", "*.runtimeSpec.process.env", "*[ExecSync[env]].answer.stdout"), sometimes=True),
    Known("After a proxy restart, hooks for a container created before it still carry its env, resources and cgroup "
          "parent (read back from containerd's verbose status); the Go proxy rebuilds its store from List calls "
          "and sends none of them, nor the pod's cgroup parent in PostStopPodSandbox.",
          "A plugin acting on a container must not lose what it knows of it because the proxy restarted.",
          (RESTART,), ("*Container*.container_envs.*", "*Container*.container_resources.*",
                       "*Container*.pod_cgroup_parent", "PostStopPodSandbox.cgroup_parent")),
    Known("After a proxy restart, a plugin's PreUpdateContainerResources answer still lands; the Go proxy drops "
          "it, and the container keeps the kubelet's values.",
          "The Go proxy merges the answer into the resources it recorded, and after a restart it recorded none.",
          (RESTART,), ("container.info.runtimeSpec.linux.resources.memory.*",
                       "container.status.resources.linux.memory*")),
    Known("Hooks run on CRI runtime.v1alpha2 calls as on runtime.v1 ones; the Go proxy passes runtime.v1alpha2 "
          "through untouched: no hook is called and no plugin edit lands.",
          "Kubelets before 1.26 speak runtime.v1alpha2 to containerd 1.6; the Go proxy's hooks are for "
          "runtime.v1 only.",
          (V1ALPHA2,), ("hooks", "Pre*", "Post*", "container.*", "pod.*")),
    Known("A container env value that is not UTF-8 (kubelets on cri-api 0.34.9, 0.35.6, 0.36.2 and later send env "
          "values as bytes) reaches containerd as the kubelet sent it; the Go proxy (cri-api 0.35.2: a string) "
          "fails CreateContainer with INTERNAL `string field contains invalid UTF-8`, and the pod lives on "
          "without its container.",
          "The proxy relays the kubelet's bytes; containerd accepts the value (its JSON OCI spec shows each bad "
          "byte as U+FFFD), so the kubelet's pod starts as it does without a proxy.",
          (BINARY_ENV,), ("hooks", "P*Container*", "[*", "binary_env.*")),
    Known("A plugin raising a container's memory limit raises its swap limit with it (on cgroup v1, kubelets since "
          "1.28 send a swap limit equal to the memory limit: no swap); the Go proxy keeps the kubelet's swap limit, "
          "now below the memory limit, and runc refuses to start the container (`memory.memsw.limit_in_bytes`): the "
          "pod crash-loops.",
          "The swap limit is memory plus swap: the proxy keeps what the kubelet asked for (no swap stays no swap) "
          "whatever memory limit the plugins set.",
          (KUBELET_NODE,), ("OCI specs[guaranteed*].resources.memory.swap", "kubelet.guaranteed.*",
                            "runtime.guaranteed.*", "guaranteed *")),
    Known("The kubelet stops a pod's sandbox more than once, and each StopPodSandbox calls PostStopPodSandbox; the "
          "Go proxy calls it on the first only (it forgets the pod there).",
          "A pod is known until RemovePodSandbox, as its containers are until RemoveContainer.",
          (KUBELET_NODE,), ("* hook calls.PostStopPodSandbox",), sometimes=True),
    Known("Post-hooks follow only calls containerd carried out; the Go proxy calls them after a refused call too "
          "(PostStartContainer after a StartContainer that failed).",
          "A post-hook tells the plugin what happened, and a container whose start failed has not started.",
          (REFUSED,), ("hooks", "PostStartContainer.*", "PostStartContainer#2.*")),
    Known("A container stays known until RemoveContainer: StopContainer of a container already stopped calls "
          "PostStopContainer again, StartContainer or UpdateContainerResources of an exited one call their "
          "pre-hooks. The Go proxy forgets a container at its first StopContainer (even one that fails) and calls "
          "no hook for it after.",
          "containerd keeps the container until it is removed, and a stop retried after one that failed must still "
          "reach the plugins.",
          (REFUSED,), ("hooks", "PreStartContainer#3.*", "PreUpdateContainerResources.*", "PostStopContainer#2.*")),
    Known("All plugins registered for a hook are called, chained in file-name order, each seeing what the ones "
          "before it left; the Go proxy calls one of them (the first its map gives), so one plugin's edits land.",
          "Several plugins can share a node (koordlet and another resource manager); the chain and its collision "
          "reports are described in [Hook plugins](plugins.md).",
          (TWO,), ("plugins called per hook.*", "plugin envs in the container")),
    Known("A plugin failing a pre-hook under policy Fail fails the CRI call with the plugin's own status code, a "
          "message naming the hook, the plugin file and its endpoint, and a `google.rpc.ErrorInfo` in the status "
          "details; the Go proxy answers UNKNOWN `hook server err: ...`, without details. Neither creates anything.",
          "The kubelet's events and logs then say which plugin refused what, and a client can tell a plugin's "
          "refusal from the runtime's.",
          (FAILING_PLUGIN,), ("RunPodSandbox.code", "RunPodSandbox.message", "RunPodSandbox.status details")),
)


def report(found: dict[str, tuple[Any, Any]], paths: list[str]) -> str:
    return "\n".join(f"{path}\n    {REFERENCE}: {json.dumps(found[path][0])[:300]}\n    {OURS}: "
                     f"{json.dumps(found[path][1])[:300]}" for path in paths)


def check_against_the_table(test: str, reference: HookedRun, ours: HookedRun) -> None:
    """Every difference of the two runs is a row of DIFFERENCES for ``test``, and each such row still shows."""
    found = differences(reference, ours)
    rows = [known for known in DIFFERENCES if test in known.tests]
    new, _ = unexplained(found, [path for known in rows for path in known.paths])
    assert not new, f"new differences (fix the proxy, or add to DIFFERENCES with a reason):\n{report(found, new)}"
    gone = [known.difference for known in rows
            if not known.sometimes and unexplained(found, known.paths)[1] == list(known.paths)]
    assert not gone, f"differences gone (remove them from DIFFERENCES and docs/differences.md): {gone}"


# -- the two proxies, each with its own example plugins ------------------------------------------------------------


@dataclass
class Side:
    """One proxy in front of the lab's containerd, with its own example plugins, by registration file name (the
    first is ``plugin``, REGISTRATION in most tests)."""

    name: str
    proxy: ProxyProcess
    plugins: dict[str, ExamplePlugin]

    @property
    def plugin(self) -> ExamplePlugin:
        return next(iter(self.plugins.values()))

    def registered_line(self, registration_name: str) -> str:
        if isinstance(self.proxy, KoordProxyProcess):
            return self.proxy.registered_line(registration_name)
        return f"plugin {registration_name} registered"

    def start(self) -> None:
        """Start the proxy and wait until it has read every plugin's registration."""
        seen = {name: self.proxy.log_count(self.registered_line(name)) for name in self.plugins}
        self.proxy.start()
        for name, times in seen.items():
            self.proxy.wait_for_log(self.registered_line(name), times + 1)

    def restart(self) -> None:
        assert self.proxy.stop() == 0, self.proxy.log_tail()
        self.start()

    def requests_since(self, mark: int) -> list[tuple[str, dict[str, Any]]]:
        return [(entry.hook, request_view(entry.request)) for entry in self.plugin.seen[mark:]]


@pytest.fixture(scope="module")
def koord_binary() -> Path:
    return built_peer(REFERENCE, "koordinator's koord-runtime-proxy")


# What a side's plugins are: registration file name -> (settings, failure policy).
Plugins = dict[str, tuple[ExampleSettings, str]]
ONE_PLUGIN: Plugins = {REGISTRATION: (SETTINGS, "Fail")}


def side_of(name: str, proxy: ProxyProcess, plugins: Plugins, loop: LoopThread) -> Side:
    side = Side(name, proxy, {})
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    for index, (registration_name, (settings, policy)) in enumerate(plugins.items()):
        plugin = side.plugins[registration_name] = ExamplePlugin(settings)
        socket = proxy.listen_path.parent / f"plugin{index}.sock"
        loop.run(plugin.start(socket))
        (proxy.hook_config_dir / registration_name).write_bytes(registration(socket, list(HOOK_NAMES), policy))
    side.start()
    return side


@contextmanager
def both_proxies(base: Path, containerd: ContainerdInstance, loop: LoopThread, koord_binary: Path,
                 plugins: Plugins) -> Iterator[dict[str, Side]]:
    """koord-runtime-proxy and this proxy in front of the lab's containerd, each with its own ``plugins``."""
    made: dict[str, Side] = {}
    try:
        koord = KoordProxyProcess(base / "koord" / "koord.sock", containerd.address, binary=koord_binary)
        made[REFERENCE] = side_of(REFERENCE, koord, plugins, loop)
        made[OURS] = side_of(OURS, ProxyProcess(base / "ours" / "rp.sock", containerd.address), plugins, loop)
        yield made
    finally:
        for side in made.values():
            code = side.proxy.stop()
            for plugin in side.plugins.values():
                loop.run(plugin.stop())
            assert code == 0, side.proxy.log_tail()
        remove_pods_left(containerd)
        remove_cgroup_parents()


@pytest.fixture(scope="module")
def sides(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread,
          koord_binary: Path) -> Iterator[dict[str, Side]]:
    """Both proxies, each with the example plugin on every hook (policy Fail)."""
    with both_proxies(workdir / "koord-diff", containerd, loop_thread, koord_binary, ONE_PLUGIN) as made:
        yield made


def remove_pods_left(containerd: ContainerdInstance) -> None:
    """This module's pods a failed test left behind (every driver removes its own), directly."""
    client = CriClient(open_channel(containerd.address))
    pods = client.runtime.ListPodSandbox(client.api.ListPodSandboxRequest(), timeout=30).items
    client.discard_pods(pod.id for pod in pods if pod.metadata.name.startswith(POD_PREFIX))
    client.channel.close()


def remove_cgroup_parents() -> None:
    """The pods' cgroup parents outlive them (cgroup v1 leaves the empty directories)."""
    for parent in (HOOKED_PARENT, POD_PARENT):
        for directory in Path("/sys/fs/cgroup").glob(f"*{parent}"):
            try:
                directory.rmdir()
            except OSError:
                pass


# -- the drivers ------------------------------------------------------------------------------------------------


def crictl_life(crictl_binary: Path, side: Side, base: Path, restart: bool = False,
                labels: dict[str, str] | None = None) -> HookedRun:
    """A pod with one container through ``side``'s proxy, with crictl: run, create, (the proxy restarted,) start,
    update, inspect, stop, remove. The view: what the plugin received, and crictl's inspect of the pod and the
    container while running (after the update)."""
    crictl = crictl_on(crictl_binary, side.proxy.listen_path)
    name = f"{POD_PREFIX}{next(_serial)}-{side.name}"
    base.mkdir(parents=True, exist_ok=True)
    mark = len(side.plugin.seen)
    pod = write_json(base / f"{name}.json", {
        "metadata": {"name": name, "namespace": "koord-diff", "uid": f"uid-{name}"},
        "log_directory": str(base / name), "labels": {"app": "koord-diff", **(labels or {})},
        "annotations": {"note": "pod"},
        "linux": {"cgroup_parent": POD_PARENT, "security_context": {"namespace_options": HOST_NETWORK}}})
    container = container_config(base, name, BUSYBOX_IMAGE, ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                                 envs=[{"key": "KEEP", "value": "me"}], labels={"tier": "app"},
                                 annotations={"note": "container"},
                                 linux={"resources": {"cpu_shares": 256, "memory_limit_in_bytes": 64 * MiB}})
    pod_id = crictl("runp", pod).strip()
    container_id = crictl("create", pod_id, container, pod).strip()
    if restart:
        side.restart()
    crictl("start", container_id)
    crictl("update", "--cpu-share", "300", "--memory", str(80 * MiB), container_id)
    state = {"container": inspected(json.loads(crictl("inspect", container_id))),
             "pod": inspected(json.loads(crictl("inspectp", pod_id)))}
    crictl("stop", container_id)
    crictl("stopp", pod_id)
    crictl("rm", container_id)
    crictl("rmp", pod_id)
    tokens = {pod_id: "<pod-id>", container_id: "<container-id>", name: "<pod-name>", str(base): "<base>"}
    return HookedRun(side.requests_since(mark), state, tokens)


CRICTL_TIMES = ("createdAt", "startedAt", "finishedAt")


def inspected(document: dict[str, Any]) -> dict[str, Any]:
    """crictl's inspect of a pod or container without what differs by nature (its times)."""
    status = {key: value for key, value in document["status"].items() if key not in CRICTL_TIMES}
    return {"status": status, "info": document.get("info", {})}


def kubelet_life(side: Side, base: Path, binary_env: bool = False) -> HookedRun:
    """The kubelet's CRI client's pod life (rplab.kubelet) through ``side``'s proxy: its document (every step's
    answer, the OCI spec running and resized, normalised by the peer) and what the plugin received."""
    name = f"{POD_PREFIX}{next(_serial)}-{side.name}"
    mark = len(side.plugin.seen)
    life = run_lifecycle(side.proxy.listen_path, base / name, pod_name=name, binary_env=binary_env,
                         extra_args=[f"-cgroup-parent={POD_PARENT}"])
    state = {f"{step['step']}[{step.get('label', '')}]": {key: value for key, value in step.items()
                                                          if key not in ("step", "label")} for step in life.steps}
    state["binary_env"] = life.binary_env
    tokens = {name: "<pod-name>", f"uid-{name}": "<pod-uid>", str(base / name): "<log-dir>"}
    return HookedRun(side.requests_since(mark), state, tokens)



def v1alpha2_life(side: Side, base: Path) -> HookedRun:
    """A pod with one container through ``side``'s proxy over CRI runtime.v1alpha2 (what kubelets before 1.26
    speak; containerd 1.6 serves it): run, create, start, update, stop, remove. The view: what the plugin received,
    and the running container's env, resources and cgroups path, and the pod's annotations."""
    client = CriClient(open_channel(side.proxy.listen_path), "v1alpha2")
    name = f"{POD_PREFIX}{next(_serial)}-{side.name}"
    mark = len(side.plugin.seen)
    pod_config = client.pod_config(name, base / name, uid=f"uid-{name}", labels={"app": "koord-diff"},
                                   cgroup_parent=POD_PARENT)
    pod_id = client.run_pod(pod_config)
    try:
        container_id = client.create_container(pod_id, client.container_config("app", envs={"KEEP": "me"}), pod_config)
        client.start_container(container_id)
        client.runtime.UpdateContainerResources(client.api.UpdateContainerResourcesRequest(
            container_id=container_id, linux=client.api.LinuxContainerResources(memory_limit_in_bytes=80 * MiB)))
        spec = json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]
        state = {"container": {"env": spec["process"]["env"], "resources": spec["linux"]["resources"],
                               "cgroupsPath": spec["linux"]["cgroupsPath"],
                               "annotations": dict(client.container_status(container_id).status.annotations)},
                 "pod": {"annotations": dict(client.pod_status(pod_id).status.annotations)}}
        client.stop_container(container_id)
    finally:
        client.discard_pods([pod_id])
        client.channel.close()
    tokens = {pod_id: "<pod-id>", container_id: "<container-id>", name: "<pod-name>"}
    return HookedRun(side.requests_since(mark), state, tokens)


def refused_calls_life(side: Side, base: Path) -> HookedRun:
    """Calls containerd refuses, through ``side``'s proxy: a container whose command does not exist (its start
    fails), and a container started, stopped, then started again and resized (refused or not: containerd's
    answer). The view: what the plugin received, and every call's answer or error."""
    client = CriClient(open_channel(side.proxy.listen_path))
    name = f"{POD_PREFIX}{next(_serial)}-{side.name}"
    mark = len(side.plugin.seen)
    pod_config = client.pod_config(name, base / name, uid=f"uid-{name}", cgroup_parent=POD_PARENT)
    pod_id = client.run_pod(pod_config)
    calls: dict[str, Any] = {}
    tokens = {pod_id: "<pod-id>", name: "<pod-name>"}
    try:
        broken = client.create_container(pod_id, client.container_config("broken", command=["/no/such/program"]),
                                         pod_config)
        stopped = client.create_container(pod_id, client.container_config("stopped"), pod_config)
        tokens.update({broken: "<broken-id>", stopped: "<stopped-id>"})
        api, runtime = client.api, client.runtime
        calls["StartContainer[no such program]"] = outcome_of(lambda: runtime.StartContainer(
            api.StartContainerRequest(container_id=broken), timeout=60))
        client.start_container(stopped)
        client.stop_container(stopped)
        calls["StartContainer[exited]"] = outcome_of(lambda: runtime.StartContainer(
            api.StartContainerRequest(container_id=stopped), timeout=60))
        calls["UpdateContainerResources[exited]"] = outcome_of(lambda: runtime.UpdateContainerResources(
            api.UpdateContainerResourcesRequest(container_id=stopped, linux=api.LinuxContainerResources(
                memory_limit_in_bytes=80 * MiB)), timeout=60))
        calls["StopContainer[exited]"] = outcome_of(lambda: runtime.StopContainer(
            api.StopContainerRequest(container_id=stopped), timeout=60))
    finally:
        client.discard_pods([pod_id])
        client.channel.close()
    return HookedRun(side.requests_since(mark), {"calls": calls}, tokens)


# -- the tests ----------------------------------------------------------------------------------------------------


def test_a_crictl_pod_life_through_both(
        sides: dict[str, Side], crictl_binary: Path, workdir: Path) -> None:
    runs = {name: crictl_life(crictl_binary, side, workdir / "koord-crictl") for name, side in sides.items()}
    assert runs[REFERENCE].hooks() == runs[OURS].hooks()
    check_against_the_table(CRICTL, runs[REFERENCE], runs[OURS])


def test_the_kubelet_clients_pod_life_through_both(
        sides: dict[str, Side], kubelet_client: Path, workdir: Path) -> None:
    runs = {name: kubelet_life(side, workdir / "koord-kubelet") for name, side in sides.items()}
    check_against_the_table(KUBELET, runs[REFERENCE], runs[OURS])


def test_a_proxy_restarted_between_create_and_start(
        sides: dict[str, Side], crictl_binary: Path, workdir: Path) -> None:
    runs = {name: crictl_life(crictl_binary, side, workdir / "koord-restart", restart=True)
            for name, side in sides.items()}
    check_against_the_table(RESTART, runs[REFERENCE], runs[OURS])


def test_a_v1alpha2_pod_life_through_both(sides: dict[str, Side], workdir: Path) -> None:
    runs = {name: v1alpha2_life(side, workdir / "koord-v1alpha2") for name, side in sides.items()}
    check_against_the_table(V1ALPHA2, runs[REFERENCE], runs[OURS])


def test_an_env_value_that_is_not_utf8(sides: dict[str, Side], kubelet_client: Path, workdir: Path) -> None:
    runs = {name: kubelet_life(side, workdir / "koord-binary-env", binary_env=True) for name, side in sides.items()}
    check_against_the_table(BINARY_ENV, runs[REFERENCE], runs[OURS])
    koord_create, our_create = (run.state["CreateContainer[]"] for run in (runs[REFERENCE], runs[OURS]))
    assert "invalid UTF-8" in koord_create["error"]["message"] and "error" not in our_create
    assert runs[OURS].state["binary_env"]["in_container_hex"] == BINARY_ENV_IN_CONTAINER.hex()


def test_calls_containerd_refuses(sides: dict[str, Side], workdir: Path) -> None:
    runs = {name: refused_calls_life(side, workdir / "koord-refused") for name, side in sides.items()}
    check_against_the_table(REFUSED, runs[REFERENCE], runs[OURS])


def test_a_pod_with_the_skip_label(sides: dict[str, Side], crictl_binary: Path, workdir: Path) -> None:
    """Both proxies spare a pod with koordinator's skip label (the same default key and value) every hook."""
    skip = {DEFAULT_SKIP_LABEL_KEY: DEFAULT_SKIP_LABEL_VALUE}
    runs = {name: crictl_life(crictl_binary, side, workdir / "koord-skip", labels=skip) for name, side in sides.items()}
    assert runs[REFERENCE].hooks() == runs[OURS].hooks() == []
    check_against_the_table(SKIPPED, runs[REFERENCE], runs[OURS])


def sparse_create_answer(request: Message, context: Any) -> hooks.ContainerResourceHookResponse:
    """Only what the plugin changes, nothing echoed: CPU shares and one env variable."""
    return hooks.ContainerResourceHookResponse(container_resources=hooks.LinuxContainerResources(cpu_shares=512),
                                               container_envs={"SPARSE": "yes"})


SPARSE: Plugins = {REGISTRATION: (ExampleSettings(answers={"PreCreateContainer": sparse_create_answer}, empty=True),
                                  "Fail")}


def test_a_sparse_answer(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread,
                         koord_binary: Path, kubelet_client: Path) -> None:
    """A plugin answering PreCreateContainer with only what it changes (not the koordlet-style echo), through the
    kubelet client's pod life."""
    with both_proxies(workdir / "koord-sparse", containerd, loop_thread, koord_binary, SPARSE) as made:
        runs = {name: kubelet_life(side, workdir / "koord-sparse" / "pods") for name, side in made.items()}
    check_against_the_table(SPARSE_ANSWER, runs[REFERENCE], runs[OURS])
    # The protocol's merge, alike in both: a non-empty env replaces the kubelet's, resources are taken as answered
    # (oom_score_adj 0 too: proto3 cannot tell it from unset; plugins echo, as koordlet does).
    spec = runs[OURS].state["ContainerStatus[running, verbose: the OCI spec]"]["answer"]["info"]["info"]["runtimeSpec"]
    assert [item for item in spec["process"]["env"] if item.startswith(("SPARSE", "KUBERNETES"))] == ["SPARSE=yes"]
    assert spec["process"].get("oomScoreAdj", 0) == 0 and spec["linux"]["resources"]["cpu"]["shares"] == 512


TWO_PLUGINS: Plugins = {"10-first.json": (ExampleSettings(envs={"FIRST": "1"}), "Fail"),
                        "20-second.json": (ExampleSettings(envs={"SECOND": "2"}), "Fail")}
PLUGIN_ENVS = ("FIRST=1", "SECOND=2")


def test_two_plugins_on_every_hook(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread,
                                   koord_binary: Path, crictl_binary: Path) -> None:
    runs = {}
    with both_proxies(workdir / "koord-two", containerd, loop_thread, koord_binary, TWO_PLUGINS) as made:
        for name, side in made.items():
            life = crictl_life(crictl_binary, side, workdir / "koord-two" / "pods")
            called = Counter(entry.hook for plugin in side.plugins.values() for entry in plugin.seen)
            env = life.state["container"]["info"]["runtimeSpec"]["process"]["env"]
            runs[name] = HookedRun([], {"plugins called per hook": dict(called),
                                        "plugin envs in the container": sum(item in env for item in PLUGIN_ENVS)})
    check_against_the_table(TWO, runs[REFERENCE], runs[OURS])


FAILING: Plugins = {REGISTRATION: (ExampleSettings(fail_with=grpc.StatusCode.RESOURCE_EXHAUSTED), "Fail")}
ERROR_DETAILS = "grpc-status-details-bin"


def test_a_plugin_failing_under_policy_fail(containerd: ContainerdInstance, workdir: Path, loop_thread: LoopThread,
                                            koord_binary: Path) -> None:
    runs = {}
    with both_proxies(workdir / "koord-failing", containerd, loop_thread, koord_binary, FAILING) as made:
        for name, side in made.items():
            client = CriClient(open_channel(side.proxy.listen_path))
            pod_name = f"{POD_PREFIX}{next(_serial)}-{name}"
            config = client.pod_config(pod_name, workdir / "koord-failing" / pod_name)
            with pytest.raises(grpc.RpcError) as refused:
                client.run_pod(config)
            error = refused.value
            details = dict(error.trailing_metadata() or ()).get(ERROR_DETAILS)
            runs[name] = HookedRun([], {"RunPodSandbox": {
                "code": error.code().name, "message": error.details(),
                "status details": [item.type_url for item in status_pb2.Status.FromString(details or b"").details],
                "pods created": [pod.metadata.name for pod in client.runtime.ListPodSandbox(
                    client.api.ListPodSandboxRequest(), timeout=30).items if pod.metadata.name == pod_name]}},
                {str(side.proxy.listen_path.parent): "<proxy-dir>"})
            client.channel.close()
    check_against_the_table(FAILING_PLUGIN, runs[REFERENCE], runs[OURS])


def test_koordinators_proxy_reads_the_tests_directory_and_leaves_the_host_as_it_found_it(
        containerd: ContainerdInstance, workdir: Path, koord_binary: Path) -> None:
    before = host_traces()
    proxy = KoordProxyProcess(workdir / "koord-host" / "koord.sock", containerd.address, binary=koord_binary)
    proxy.start()
    try:
        (proxy.hook_config_dir / "10-x.json").write_bytes(registration(workdir / "none.sock", ["PreRunPodSandbox"]))
        proxy.wait_for_log(proxy.registered_line("10-x.json"))  # its /etc/runtime/hookserver.d is our directory
        assert host_traces() == before
    finally:
        assert proxy.stop() == 0, proxy.log_tail()
    assert host_traces() == before


# The real kubelet (rplab.kubelet_node) as the driver: two of its node's static pods, through each proxy in turn, on
# a containerd of their own (the kubelet stops every pod it does not know).
NODE_PODS = ("exec-probes", "guaranteed")
KUBELET_PLUGIN: Plugins = {REGISTRATION: (ExampleSettings(), "Fail")}  # no cgroup move: the kubelet owns its tree


@pytest.fixture(scope="module")
def kubelet_runtime(workdir: Path) -> Iterator[ContainerdInstance]:
    with lab_containerd(workdir / "koord-kubelet-ctd", IMAGE_CACHE) as instance:
        yield instance


def kubelet_node_life(side: Side, base: Path, kubelet_binary: Path) -> HookedRun:
    """The kubelet with NODE_PODS through ``side``'s proxy, from start to stop. The view: per pod, the hooks in the
    order first called and each one's first request, how often each was called, and what the kubelet and the
    runtime showed while the pods were Ready (rplab.kubelet_pods' views), the containers' OCI specs."""
    node = KubeletNode(side.proxy.listen_path, base / f"node-{side.name}", binary=kubelet_binary,
                       node_id=f"kd{next(_serial)}")
    mark = len(side.plugin.seen)
    state: dict[str, Any] = {}
    node.start()
    try:
        for manifest in node_pods(NodePorts.free()):
            if manifest["metadata"]["name"] in NODE_PODS:
                node.write_pod(manifest)
        wait_until(lambda: settled(kubelet_view(node.pod_names())), 90, "the pods Ready or failing", interval=0.2)
        state["kubelet"] = kubelet_view(node.pod_names())
        state["runtime"] = runtime_view(node)
        state["OCI specs"] = container_specs(node)
        tokens = node_tokens(node)
    finally:
        node.stop()
    assert node.host_changes() == []
    requests = side.requests_since(mark)
    tokens.update(HookedRun(requests, {}).all_tokens())
    for pod in NODE_PODS:
        mine = [(hook, request) for hook, request in requests if request["pod_meta"]["name"].startswith(pod)]
        state[f"{pod} hook calls"] = dict(Counter(hook for hook, _ in mine))
        firsts = dict(reversed(mine))  # each hook's first request
        state[f"{pod} hooks"] = list(dict.fromkeys(hook for hook, _ in mine))
        state.update({f"{pod} {hook}": request for hook, request in firsts.items()})
    return HookedRun([], state, tokens)


def node_tokens(node: KubeletNode) -> dict[str, str]:
    """What a node's run chose: its id, its pods' uids, when the kubelet saw them, their sandboxes' IDs."""
    tokens = {node.node_id: "<node>"}
    for pod in node.pods():
        metadata = pod["metadata"]
        tokens[metadata["uid"]] = "<uid>"
        tokens.update({value: "<uid or time>" for key, value in metadata["annotations"].items()
                       if key in UID_KEYS + TIME_KEYS})
    client = node.runtime()
    with client.channel:
        tokens.update({sandbox.id: "<pod-id>" for sandbox in node.sandboxes(client)})
    return tokens


def settled(view: dict[str, Any]) -> bool:
    """Every pod of NODE_PODS Ready, or with a container that failed (its start refused, or it exited)."""
    def failed(container: dict[str, Any]) -> bool:
        return container["lastState"].startswith("terminated") or container["state"].startswith("waiting:Crash")
    return all(pod in view and (view[pod]["ready"] or any(map(failed, view[pod]["containers"].values())))
               for pod in NODE_PODS)


def container_specs(node: KubeletNode) -> dict[str, Any]:
    """The running containers' OCI specs (env, resources, cgroups path, annotations), by pod/container."""
    client = node.runtime()
    with client.channel:
        specs = {}
        for sandbox in node.sandboxes(client):
            for container_id in client.container_ids(sandbox.id):
                status = client.container_status(container_id, verbose=True)
                spec = json.loads(status.info["info"])["runtimeSpec"]
                name = f"{sandbox.metadata.name}/{status.status.metadata.name}"
                specs[name] = {"env": spec["process"]["env"], "resources": spec["linux"]["resources"],
                               "cgroupsPath": spec["linux"]["cgroupsPath"], "annotations": spec.get("annotations", {})}
        return specs


def test_the_kubelets_static_pods_through_both(kubelet_runtime: ContainerdInstance, workdir: Path,
                                                loop_thread: LoopThread, koord_binary: Path) -> None:
    try:
        kubelet_binary = peer_binary(KUBELET_PEER)
    except PeerBuildError as error:
        skip_or_fail(f"cannot build the kubelet: {error}")
    base = workdir / "koord-kubelet-node"
    with both_proxies(base, kubelet_runtime, loop_thread, koord_binary, KUBELET_PLUGIN) as made:
        runs = {name: kubelet_node_life(side, base, kubelet_binary) for name, side in made.items()}
    check_against_the_table(KUBELET_NODE, runs[REFERENCE], runs[OURS])


# -- the page ------------------------------------------------------------------------------------------------------

PAGE_HEADING = "## What the tests saw"


def test_the_differences_page_lists_exactly_what_the_tests_saw() -> None:
    """docs/differences.md's table is DIFFERENCES, row for row: what differs, why, the test that shows it."""
    rows = table_rows(doc_page("differences.md"), PAGE_HEADING)
    assert rows == [[known.difference, known.why, ", ".join(f"`{test}`" for test in known.tests)]
                    for known in DIFFERENCES]
    tests = {name for name in globals() if name.startswith("test_")}
    assert {test for known in DIFFERENCES for test in known.tests} <= tests
