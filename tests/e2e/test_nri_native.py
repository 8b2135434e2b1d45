"""The proxy beside containerd's own NRI (containerd 1.7 with NRI on, 2.x as deployed: on by default), and the proxy's
NRI host measured against it. Real parts: containerd 1.6, 1.7 and 2.4 (rplab.runtimes) in private roots, the
proxy, the example hook plugin, the project's Go plugin on NRI's real stub (peers/nriplugin), the kubelet's own
CRI client (peers/crilifecycle).

- A proxy asked to host NRI on the socket containerd's NRI serves refuses to start and says what to do.
- Hook plugins through the proxy and NRI plugins on containerd's NRI on one node: what the hook plugin answered
  in PreCreateContainer is what the NRI plugin sees in CreateContainer (hooks first, then containerd's NRI).
- Hosted vs native: the same stub plugin over the same kubelet-driven pod's life, once on containerd's NRI (the
  reference: 2.4 and 1.7), once hosted by the proxy (in front of 2.4, of 1.7 with its NRI off, and of 1.6): PAIRS.
  Every event, every field the plugin sees and the OCI spec its adjustments land in are compared, with only what
  differs by nature masked (rplab.nri_differential). What still differs is listed in DIFFERENCES, each with its reason: the test fails when
  a listed difference disappears (drop it from the table, and from docs/runtimes.md) or a new one appears.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ANNOTATION as HOOK_ANNOTATION
from rplab.example_plugin import ExampleSettings, plugin_process, registration
from rplab.images import build_and_import
from rplab.kubelet import run_lifecycle
from rplab.nri_differential import NriRun, differences, unexplained
from rplab.nri_stub import StubPlugin
from rplab.peers import PeerBuildError, peer_binary
from rplab.process import ProxyProcess
from rplab.runtimes import runtime_named
from runtimeproxy.options import DEFAULT_SKIP_LABEL_KEY, DEFAULT_SKIP_LABEL_VALUE

from tests.kits.machine import IMAGE_CACHE, skip_or_fail

WAIT_SECONDS = 15.0
_serial = itertools.count()
# Every lifecycle event, named: a subscription both containerd 1.7's NRI and the stub v0.12 accept ("all" would
# include events 1.7 rejects).
LIFE_EVENTS = ("runpodsandbox,createcontainer,postcreatecontainer,startcontainer,poststartcontainer,updatecontainer,"
               "postupdatecontainer,stopcontainer,removecontainer,stoppodsandbox,removepodsandbox")
POD_LIFE = ["RunPodSandbox", "CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
            "UpdateContainer", "PostUpdateContainer", "StopContainer", "RemoveContainer", "StopPodSandbox",
            "RemovePodSandbox"]
NRI_ANNOTATION = "nri.runtimeproxy.test/native"
# What the differential's plugin adjusts in CreateContainer, so the OCI specs show where adjustments land.
ADJUSTING = [f"-events={LIFE_EVENTS}", "-env=NRI_ADDED=yes", f"-annotation={NRI_ANNOTATION}=yes", "-cpu-shares=300"]
SKIP_LABELS = {DEFAULT_SKIP_LABEL_KEY: DEFAULT_SKIP_LABEL_VALUE}
POD_NAME = "nridiff"  # the same pod in every run: its name, uid and log directory compare as they are

# The pairs compared: (reference run on containerd's own NRI, run hosted by the proxy); a run is (NRI, runtime).
PAIRS = {"2.4": (("native", "containerd-2.4"), ("hosted", "containerd-2.4")),
         "1.7": (("native", "containerd-1.7"), ("hosted", "containerd-1.7")),
         "1.6/1.7": (("native", "containerd-1.7"), ("hosted", "containerd-1.6"))}
ALL = tuple(PAIRS)
MODEL = "gap: to be filled by the core-owned container model"
CANNOT = "gap: proxy cannot know"


@dataclass(frozen=True)
class Known:
    """A known difference: why, and on which pairs it shows."""

    reason: str
    pairs: tuple[str, ...] = ALL


# Hosted vs native, what still differs: path pattern (Event.message.field; `*` matches anything) -> Known. Edit here
# when the proxy closes a gap (and mirror it in docs/runtimes.md, "Hosted NRI vs containerd's own NRI").
DIFFERENCES: dict[str, Known] = {
    # -- what the runtime fills in after the CRI request: the model can carry it once the runtime answered --
    "events of other pods": Known("by design: hosted NRI plugins get no event of a pod with the proxy's skip label "
                                  f"({DEFAULT_SKIP_LABEL_KEY}={DEFAULT_SKIP_LABEL_VALUE}); containerd's NRI knows "
                                  "no such label"),
    "Synchronize.pods": Known("by design: the proxy leaves out pods with its skip label; containerd lists all"),
    "Synchronize(nri-early-skip).pod.*": Known("by design: the proxy leaves out pods with its skip label"),
    "Synchronize.containers": Known("by design: the proxy leaves out the containers of pods with its skip label"),
    "Synchronize(early-skip).container.*": Known("by design: the proxy leaves out the containers of pods with its "
                                                 "skip label"),
    "*.container.env": Known(f"{CANNOT} the image's env (PATH, HOSTNAME) containerd puts first; hosted "
                             "CreateContainer also lists the request's env in another order (it is read from the "
                             "hook request's env map; the spec keeps the request's order)"),
    "*.container.annotations[*]": Known(f"{CANNOT} containerd's io.kubernetes.cri.* annotations of the spec (the "
                                        "model could derive sandbox-id/name/namespace/uid, container-name)"),
    "*.pod.annotations[*]": Known(f"{CANNOT} containerd's io.kubernetes.cri.* sandbox annotations (image, "
                                  "resources, log directory; derivable by the model from RunPodSandbox)"),
    "*.pod.labels.oci_runtime_type": Known(f"{CANNOT} containerd 2.x's oci_runtime_type label", ("2.4",)),
    "CreateContainer.container.id": Known(f"{CANNOT} the container's ID in CreateContainer: containerd chooses it "
                                          "after the request the proxy hooks"),
    "*.container.mounts": Known(f"{CANNOT} the runtime's mounts (/proc, /dev, resolv.conf, ...) without reading "
                                "the OCI spec (verbose ContainerStatus): model"),
    "*.container.linux.namespaces": Known(f"{CANNOT} namespaces (paths hold the sandbox's pid): model, from the "
                                          "spec"),
    "*.pod.linux.namespaces": Known(f"{CANNOT} the sandbox's namespaces: model, from the sandbox's spec"),
    "*.container.linux.cgroups_path": Known(f"{MODEL}: the cgroups path (parent + ID) once the ID is known"),
    "*.pod.linux.cgroups_path": Known(f"{MODEL}: the sandbox's cgroups path (parent + ID)"),
    "*.container.linux.resources.devices": Known(f"{CANNOT} the default device cgroup rule containerd writes"),
    "*.pod.linux.resources.devices": Known(f"{CANNOT} the sandbox's device cgroup rule"),
    "*.pod.linux.resources.cpu.shares.value": Known(f"{CANNOT} the pause container's own shares (2)"),
    "*.container.linux.resources.memory.swap.value": Known(
        "containerd sets swap = memory limit in the spec; the hosted container has none until Update (then the "
        "requested swap)"),
    "*.container.user.additional_gids": Known(f"{CANNOT} the image's groups (user.additional_gids)", ("2.4",)),
    "*.container.image.digest": Known("the lab's images are imported, never pulled: CRI's ImageStatus gives them no "
                                      "repo digest, so hosted has none; containerd's own NRI gives its image "
                                      "record's target digest (a pulled image's repo digest is that digest)", ("2.4",)),
    "StartContainer.container.pid": Known("the proxy tells the plugins before it forwards the start; containerd has "
                                          "created the task by then"),
    "Synchronize(early).container.pid": Known("a container started while no NRI plugin was attached: the proxy reads "
                                              "a pid only while one is (the hook-protocol path pays nothing)"),
    "*.container.image.*": Known("containerd 1.7's NRI has no Container.image; hosted fills it as containerd 2.2 "
                                 "and later do", ("1.7", "1.6/1.7")),
    "Synchronize(early).container.image.*": Known("a container created while no NRI plugin was attached: the proxy "
                                                  "reads its image only while one is (the hook-protocol path pays "
                                                  "nothing)", ("2.4",)),
    "*.pod.pid": Known(f"{MODEL}: the sandbox's pid (verbose PodSandboxStatus)"),
    "*.container.*_at": Known("the proxy sends created/started/finished times as containerd 2.2 and later do; "
                              "containerd 1.7 sends none", ("1.7", "1.6/1.7")),
    "StopContainer.container.finished_at": Known("containerd 2.2 and later tell StopContainer after the stop; the "
                                                 "proxy before it, as 1.7 and 2.1 do", ("2.4",)),
    "RemoveContainer.container.state": Known("hosted says STOPPED; containerd 2.4 sends UNKNOWN (unset)", ("2.4",)),
    "StopContainer.container.state": Known("containerd 2.2 and later say STOPPED (told after the stop); the proxy "
                                           "says RUNNING, the state before the stop, as 1.7 and 2.1 do", ("2.4",)),
    "OCI spec (*).annotations[nri.runtimeproxy.test/native]": Known(
        "hosted, an NRI annotation goes into the CRI request: containerd keeps it in ContainerStatus.annotations, "
        "not in the OCI spec (containerd's NRI writes the spec)"),
    "OCI spec (*).ociVersion": Known("runtime: containerd 1.6 writes OCI spec 1.0.2-dev, 1.7 1.1.0", ("1.6/1.7",)),
}


def expected_for(pair: str) -> dict[str, str]:
    return {pattern: known.reason for pattern, known in DIFFERENCES.items() if pair in known.pairs}


# -- the lab: containerds by runtime, NRI on or off --------------------------------------------------------------


class Lab:
    """containerd instances started on first use (images imported), stopped at the end; runs remembered."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.instances: dict[tuple[str, bool], ContainerdInstance] = {}
        self.runs: dict[tuple[str, str], NriRun] = {}

    def containerd(self, runtime: str, nri: bool) -> ContainerdInstance:
        key = (runtime, nri)
        if key not in self.instances:
            instance = ContainerdInstance(self.base / f"{runtime.split('-')[1]}{'n' if nri else ''}",
                                          runtime=runtime_named(runtime), nri=nri)
            instance.start()
            self.instances[key] = instance
            build_and_import(instance.address, IMAGE_CACHE)
        return self.instances[key]

    def stop(self) -> None:
        for instance in self.instances.values():
            instance.stop()


@pytest.fixture(scope="module")
def lab(workdir: Path) -> Iterator[Lab]:
    for peer in ("nriplugin-v0.12", "crilifecycle"):
        try:
            peer_binary(peer)
        except PeerBuildError as error:
            skip_or_fail(f"cannot build the {peer} peer: {error}")
    lab = Lab(workdir / "nrinative")
    try:
        yield lab
    finally:
        lab.stop()


def containerd_for(lab: Lab, nri: str, runtime: str) -> ContainerdInstance:
    """containerd with its own NRI on where it has one (1.7, 2.x: as deployed), off on 1.6."""
    return lab.containerd(runtime, nri=runtime_named(runtime).major >= 2 or nri == "native")


def wait_synchronized(plugin: StubPlugin) -> None:
    plugin.wait_for("Synchronize", timeout=WAIT_SECONDS)


def started_pod(client: CriClient, base: Path, name: str, labels: dict[str, str]) -> None:
    """A pod "nri-<name>" with a started container "<name>", alike in every run (its uid too)."""
    config = client.pod_config(f"nri-{name}", base / f"{name}-logs", uid=f"uid-nri-{name}", labels=labels)
    pod_id = client.run_pod(config)
    client.start_container(client.create_container(pod_id, client.container_config(name), config))


def run_of(lab: Lab, nri: str, runtime: str) -> NriRun:
    """The kubelet client's pod life with the adjusting stub plugin on containerd's NRI ("native") or hosted by a
    proxy in front of it ("hosted"). Two pods with a started container exist before the plugin attaches (for its
    Synchronize), one with the proxy's skip label; another with the skip label is made before the kubelet client's."""
    if (nri, runtime) in lab.runs:
        return lab.runs[(nri, runtime)]
    ctd = containerd_for(lab, nri, runtime)
    base = lab.base / f"run-{nri}-{runtime}"
    base.mkdir(parents=True)
    proxy = None
    if nri == "hosted":
        proxy = ProxyProcess(base / "proxy" / "rp.sock", ctd.address, extra_args=[f"--nri-socket={base / 'nri.sock'}"])
        proxy.start()
    endpoint = proxy.listen_path if proxy else Path(ctd.address)
    client = CriClient(open_channel(endpoint))
    plugin = StubPlugin("v0.12", base / "events.jsonl", flags=ADJUSTING)
    try:
        for name, labels in (("early", {}), ("early-skip", SKIP_LABELS)):
            started_pod(client, lab.base, name, labels)
        plugin.connect(base / "nri.sock" if proxy else ctd.nri_socket)
        wait_synchronized(plugin)
        started_pod(client, lab.base, "skip", SKIP_LABELS)
        life = run_lifecycle(endpoint, lab.base / "logs", pod_name=POD_NAME, binary_env=False)
        assert life.unexpected_failures() == {}
        plugin.wait_for("RemovePodSandbox")
    finally:
        plugin.stop()
        ctd.remove_all_pods()
        client.channel.close()
        if proxy is not None:
            assert proxy.stop() == 0, proxy.log_tail()
    roots = (str(ctd.base_dir), *((str(base),) if proxy else ()))
    run = lab.runs[(nri, runtime)] = NriRun(plugin.records(), life.document, roots, pod=POD_NAME)
    return run


def report(found: dict[str, tuple[object, object]], paths: list[str]) -> str:
    return "\n".join(f"{path}\n    native: {json.dumps(found[path][0])[:200]}\n    hosted: "
                     f"{json.dumps(found[path][1])[:200]}" for path in paths)


@pytest.mark.parametrize("pair", list(PAIRS))
def test_a_hosted_plugin_sees_what_containerds_own_nri_shows_it_but_the_listed_differences(
        lab: Lab, pair: str) -> None:
    native, hosted = (run_of(lab, *PAIRS[pair][0]), run_of(lab, *PAIRS[pair][1]))
    for run in (native, hosted):
        assert run.events() == ["Configure", "Synchronize", *POD_LIFE]
    found = differences(native, hosted)
    new, gone = unexplained(found, expected_for(pair))
    assert not new, f"new differences (add to DIFFERENCES with a reason, or fix the proxy):\n{report(found, new)}"
    assert not gone, f"differences gone (remove from DIFFERENCES and docs/runtimes.md): {gone}"


def test_the_adjustments_land_in_the_oci_spec_hosted_as_natively(lab: Lab) -> None:
    """What the plugin adjusts reaches the container either way (the annotation aside: DIFFERENCES)."""
    for nri, runtime in {run for pair in PAIRS.values() for run in pair}:
        spec = run_of(lab, nri, runtime).lifecycle
        running = next(s for s in spec["steps"] if s["step"] == "ContainerStatus"
                       and s["label"].startswith("running"))["answer"]
        runtime_spec = running["info"]["info"]["runtimeSpec"]
        assert "NRI_ADDED=yes" in runtime_spec["process"]["env"], (nri, runtime)
        assert runtime_spec["linux"]["resources"]["cpu"]["shares"] == 300, (nri, runtime)
        annotations = running["status"].get("annotations", {}) | runtime_spec.get("annotations", {})
        assert annotations.get(NRI_ANNOTATION) == "yes", (nri, runtime)


# -- the proxy beside containerd's own NRI -----------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["containerd-2.4", "containerd-1.7"])
def test_the_proxy_refuses_to_host_nri_where_containerds_own_nri_serves_and_says_what_to_do(
        lab: Lab, runtime: str) -> None:
    ctd = lab.containerd(runtime, nri=True)
    base = lab.base / f"refuse-{runtime}-{next(_serial)}"
    proxy = ProxyProcess(base / "rp.sock", ctd.address, extra_args=[f"--nri-socket={ctd.nri_socket}"])
    proxy.spawn()
    deadline = time.monotonic() + WAIT_SECONDS
    while proxy.returncode() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proxy.returncode() is None:
        proxy.stop()
        pytest.fail(f"the proxy took over containerd's NRI socket:\n{proxy.log_tail()}")
    message = proxy.log_tail(5)
    assert proxy.returncode() == 1, message
    assert str(ctd.nri_socket) in message and "served by another running process" in message, message
    for advice in ("containerd's own NRI", "hook plugins", "disable = true", "socket_path", "--nri-socket"):
        assert advice in message, (advice, message)
    assert ctd.nri_socket.is_socket()  # containerd's, untouched


@pytest.mark.parametrize("runtime", ["containerd-2.4", "containerd-1.7"])
def test_hook_plugins_answer_before_containerds_own_nri_plugins_see_the_container(lab: Lab, runtime: str) -> None:
    """containerd with its NRI on (2.4 as deployed, 1.7 turned on), a native NRI plugin, and the proxy with the
    example hook plugin on PreCreateContainer: the NRI plugin's CreateContainer shows the hook plugin's env,
    resources and annotation."""
    ctd = lab.containerd(runtime, nri=True)
    base = lab.base / f"order-{next(_serial)}"
    settings = ExampleSettings()
    plugin = StubPlugin("v0.12", base / "events.jsonl", flags=["-events=createcontainer"])
    socket = base / "hook.sock"
    base.mkdir(parents=True)
    with plugin_process(socket):
        proxy = ProxyProcess(base / "proxy" / "rp.sock", ctd.address)
        proxy.hook_config_dir.mkdir(parents=True)
        (proxy.hook_config_dir / "example.json").write_bytes(registration(socket, ["PreCreateContainer"]))
        with proxy:
            plugin.connect(ctd.nri_socket)
            try:
                wait_synchronized(plugin)
                client = CriClient(open_channel(proxy.listen_path))
                pod_config = client.pod_config(f"order{next(_serial)}", base / "logs")
                pod_id = client.run_pod(pod_config)
                client.create_container(pod_id, client.container_config("app"), pod_config)
                seen = plugin.wait_for("CreateContainer")["container_full"]
            finally:
                plugin.stop()
                ctd.remove_all_pods()
    assert {f"{key}={value}" for key, value in settings.envs.items()} <= set(seen["env"])
    assert seen["annotations"][HOOK_ANNOTATION] == "PreCreateContainer"
    resources = seen["linux"]["resources"]
    assert resources["cpu"]["shares"]["value"] == settings.cpu_shares
    assert resources["memory"]["limit"]["value"] == settings.memory_limit_in_bytes
