"""The differential suite: every CRI method a containerd serves, directly and through the proxy, compared.

``STEPS`` is the table: an ordered sequence of calls (the lifecycle of a host-network pod with one container,
with reads, streaming URLs followed, errors provoked on the way), each naming its method, how to build its
request and what differs by nature in its answer (the mask). The sequence runs twice per API version and
variant, once directly against containerd and once through the proxy (bare, or with an echo plugin on all
seven hooks, policy Fail), with distinct pod names; the answers are then compared step by step after
replacing each side's own IDs and names by placeholders. Errors are compared by code and message.

``test_the_table_covers_every_method`` makes a method added to the compiled descriptors a failure until the
table calls it; methods a containerd does not implement are called too (their UNIMPLEMENTED answers must match
like any other). What each containerd version answers directly (UNIMPLEMENTED methods, API versions it does not
serve, calls that can only fail here, events it loses) is recorded in RUNTIME_ANSWERS, keyed by the version its
Version call reports, and checked on the direct side of every run: a runtime's own behaviour, never hidden.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf.message import Message

from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.conformance import echo_hooked_proxy_in, echo_record_in
from rplab.containerd import ContainerdInstance
from rplab.cri import API_MODULES, CriClient, open_channel
from rplab.differential import (Outcome, StreamWatch, differing_paths, is_success, normalized,
                                           outcome_of)
from rplab.images import BUSYBOX_IMAGE, LAB_IMAGES, FileEntry, import_images, oci_layout_tar
from rplab.streaming import Session, open_attach, port_forward_once, run_exec

from tests.kits.machine import tcp_server

UNKNOWN_ID = "0" * 64
NOT_FOLLOWED = "not followed"  # the second outcome of a step whose streaming URL could not be followed
REMOVABLE_IMAGE = "localhost/runtimeproxy/removable:1.0"  # imported by each side, removed through CRI
SERVICES = ("RuntimeService", "ImageService")
PORT_FORWARD_PING = b"ping"
PORT_FORWARD_REPLY = b"pong:" + PORT_FORWARD_PING



@dataclass(frozen=True)
class RuntimeAnswers:
    """What one containerd minor version answers DIRECTLY, recorded as its own behaviour: every run checks the
    direct side against it before comparing the proxy with the direct side."""

    # per CRI API version, the methods answering UNIMPLEMENTED; None: the API version is not served at all
    not_implemented: dict[str, frozenset[str] | None]
    # implemented, but this lab can only make them fail (compared as errors all the same)
    only_errors_here: dict[str, str] = field(default_factory=dict)
    # events a GetContainerEvents stream misses per stream cancelled before it (direct too: 1.7's streams share one
    # queue and a cancelled stream still takes one event from it)
    events_lost_per_cancelled_stream: int = 0

    def unimplemented(self, api_version: str) -> set[str]:
        listed = self.not_implemented[api_version]
        return set(methods_of(api_version)) if listed is None else set(listed)


NO_REGISTRY = {"PullImage": "the e2e containerd has no registry to pull from"}
NO_CRIU = {**NO_REGISTRY, "CheckpointContainer": "containerd checkpoints with CRIU, which this machine lacks"}
STREAM_LISTS = frozenset({"StreamPodSandboxes", "StreamContainers", "StreamContainerStats", "StreamPodSandboxStats",
                          "StreamPodSandboxMetrics", "StreamImages"})  # served from containerd 2.4 on
POD_CHECKPOINTS = frozenset({"CheckpointPod", "RestorePod"})  # CRI v0.37
# Keyed by the "major.minor" of the runtime_version the backend's Version call reports.
RUNTIME_ANSWERS: dict[str, RuntimeAnswers] = {
    "1.6": RuntimeAnswers({"v1": frozenset({
        "RuntimeConfig", "CheckpointContainer", "GetContainerEvents", "ListMetricDescriptors", "ListPodSandboxMetrics",
        "UpdatePodSandboxResources", *STREAM_LISTS, *POD_CHECKPOINTS}), "v1alpha2": frozenset()}, NO_REGISTRY),
    "1.7": RuntimeAnswers({"v1": frozenset({
        "RuntimeConfig", "CheckpointContainer", "ListMetricDescriptors", "ListPodSandboxMetrics",
        "UpdatePodSandboxResources", *STREAM_LISTS, *POD_CHECKPOINTS}), "v1alpha2": frozenset()}, NO_REGISTRY,
        events_lost_per_cancelled_stream=1),
    "2.1": RuntimeAnswers({"v1": frozenset({"ListMetricDescriptors", "ListPodSandboxMetrics", "UpdatePodSandboxResources",
                                            *STREAM_LISTS, *POD_CHECKPOINTS}), "v1alpha2": None}, NO_CRIU),
    "2.4": RuntimeAnswers({"v1": frozenset(POD_CHECKPOINTS), "v1alpha2": None}, NO_CRIU),
}


def runtime_minor(version_reply: str) -> str:
    """"1.7" from "containerd 1.7.24~ds1 v1" (ContainerdInstance.cri_version)."""
    match = re.search(r" v?(\d+)\.(\d+)[.~+-]", version_reply)
    assert match, version_reply
    return f"{match.group(1)}.{match.group(2)}"


# -- one side of the comparison ---------------------------------------------------------------------------

@dataclass
class Side:
    """One run of the sequence: its client, the names it chose, the IDs it was given, what it got."""

    name: str  # "direct" or "proxy"
    client: CriClient
    tag: str  # unique per run: pod name, uid and log dir derive from it
    log_dir: Path
    removable_image_tar: Path
    containerd: ContainerdInstance
    forward_port: int
    cleanup_pods: list[str]  # the cleanup_pods fixture: removed directly whatever the outcome
    pod_id: str = ""
    container_id: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # what this side chose or got -> placeholder
    outcomes: list[tuple[Step, Outcome]] = field(default_factory=list)
    events: StreamWatch | None = None

    def __post_init__(self) -> None:
        self.pod_config = self.client.pod_config(self.tag, self.log_dir, uid=f"uid-{self.tag}",
                                                 labels={"suite": "differential"}, cgroup_parent="/runtimeproxy-diff")
        self.tokens.update({self.tag: "<pod-name>", f"uid-{self.tag}": "<pod-uid>", str(self.log_dir): "<log-dir>"})

    @property
    def api(self) -> Any:
        return self.client.api

    def remember(self, value: str, placeholder: str) -> None:
        if value:
            self.tokens[value] = placeholder


Request = Callable[[Side], Message]
Keep = Callable[[Side, dict[str, Any]], None]
Follow = Callable[[Side, dict[str, Any]], Outcome]


@dataclass(frozen=True)
class Step:
    """One call of the sequence. ``request`` builds it (and may prepare what it needs); ``keep`` remembers IDs
    from a successful answer; ``follow`` turns a successful answer into a second outcome (a streaming URL
    followed); ``mask`` names the paths that differ by nature; ``unordered`` the top-level lists to sort."""

    method: str
    label: str
    request: Request
    mask: tuple[str, ...] = ()
    unordered: tuple[str, ...] = ()
    keep: Keep | None = None
    follow: Follow | None = None

    @property
    def name(self) -> str:
        return f"{self.method}[{self.label}]"


# -- what the steps keep and follow ---------------------------------------------------------------------------

def keep_pod(side: Side, answer: dict[str, Any]) -> None:
    side.pod_id = answer["pod_sandbox_id"]
    side.cleanup_pods.append(side.pod_id)
    side.remember(side.pod_id, "<pod-id>")


def keep_pod_pid(side: Side, answer: dict[str, Any]) -> None:
    # The sandbox's namespaces are named by its pid in every container's runtime spec.
    side.remember(f"/proc/{answer['info']['info']['pid']}/", "/proc/<pod-pid>/")


def keep_container(side: Side, answer: dict[str, Any]) -> None:
    side.container_id = answer["container_id"]
    side.remember(side.container_id, "<container-id>")


def _session(session: Session) -> Outcome:
    handshake = session.handshake
    return {"ok": {
        "status": handshake.status,
        "reason": handshake.reason,
        "headers": {name: value for name, value in handshake.headers.items() if name not in ("date", "sec-websocket-accept")},
        "body": handshake.body.decode(errors="replace"),
        "channels": {str(channel): data.decode(errors="replace") for channel, data in sorted(session.channels.items())},
    }}


def _url_token(side: Side, url: str) -> None:
    prefix, token = url.rsplit("/", 1)
    side.remember(f"{prefix.rsplit('/', 1)[1]}/{token}", f"{prefix.rsplit('/', 1)[1]}/<token>")


def follow_exec(side: Side, answer: dict[str, Any]) -> Outcome:
    _url_token(side, answer["url"])
    return _session(run_exec(answer["url"]))


def follow_attach(side: Side, answer: dict[str, Any]) -> Outcome:
    _url_token(side, answer["url"])
    return _session(open_attach(answer["url"]))


def follow_port_forward(side: Side, answer: dict[str, Any]) -> Outcome:
    _url_token(side, answer["url"])
    return _session(port_forward_once(answer["url"], side.forward_port, PORT_FORWARD_PING, len(PORT_FORWARD_REPLY)))


def import_removable_image(side: Side) -> Message:
    import_images(side.containerd.address, {REMOVABLE_IMAGE: side.removable_image_tar})
    return side.api.RemoveImageRequest(image=side.api.ImageSpec(image=REMOVABLE_IMAGE))


# -- masks: what differs by nature -------------------------------------------------------------------------

POD_STATUS_MASK = ("status.created_at", "info.info.pid")
CONTAINER_STATUS_MASK = ("status.created_at", "status.started_at", "status.finished_at", "info.info.pid")
# Stats counters: masked present or absent ("?"), as one that is still 0 is left out of the answer.
CPU = ("cpu.timestamp?", "cpu.usage_core_nano_seconds?", "cpu.usage_nano_cores?")
MEMORY = ("memory.timestamp?", "memory.working_set_bytes?", "memory.available_bytes?", "memory.usage_bytes?",
          "memory.rss_bytes?", "memory.page_faults?", "memory.major_page_faults?")
WRITABLE_LAYER = ("writable_layer.timestamp?", "writable_layer.used_bytes?", "writable_layer.inodes_used?")
CONTAINER_STATS = (*CPU, *MEMORY, *WRITABLE_LAYER)
POD_STATS = tuple(f"linux.{path}" for path in (*CPU, *MEMORY, "process.timestamp?", "process.process_count?")) + tuple(
    f"linux.containers.*.{path}" for path in CONTAINER_STATS)
FS_USAGE = ("timestamp?", "used_bytes?", "inodes_used?")
# Metrics (containerd 2.x): every sample's time and value, the pod's and each container's.
METRIC_SAMPLE = ("timestamp?", "value?")
POD_METRICS = ("timestamp?", *(f"metrics.*.{p}" for p in METRIC_SAMPLE),
               *(f"container_metrics.*.metrics.*.{p}" for p in METRIC_SAMPLE))


def _prefixed(prefix: str, paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{prefix}.{path}" for path in paths)


# -- the table ---------------------------------------------------------------------------------------------

def _api(name: str, **fields: Any) -> Request:
    return lambda side: getattr(side.api, name)(**fields)


def _on_container(name: str, **fields: Any) -> Request:
    return lambda side: getattr(side.api, name)(container_id=side.container_id, **fields)


def _on_pod(name: str, **fields: Any) -> Request:
    return lambda side: getattr(side.api, name)(pod_sandbox_id=side.pod_id, **fields)


def _image(name: str, image: str, **fields: Any) -> Request:
    return lambda side: getattr(side.api, name)(image=side.api.ImageSpec(image=image), **fields)


def _unknown(method: str, request: str, id_field: str) -> Step:
    return Step(method, "unknown id", _api(request, **{id_field: UNKNOWN_ID}))


STEPS: tuple[Step, ...] = (
    # the runtime and its images
    Step("Version", "", _api("VersionRequest", version="0.1.0")),
    Step("Status", "verbose", _api("StatusRequest", verbose=True)),
    Step("RuntimeConfig", "", _api("RuntimeConfigRequest")),
    Step("UpdateRuntimeConfig", "empty", lambda side: side.api.UpdateRuntimeConfigRequest(
        runtime_config=side.api.RuntimeConfig())),
    Step("ImageFsInfo", "", _api("ImageFsInfoRequest"), mask=_prefixed("image_filesystems.*", FS_USAGE)),
    Step("ListImages", "", _api("ListImagesRequest"), unordered=("images",)),
    Step("StreamImages", "", _api("StreamImagesRequest"), unordered=("images",)),
    Step("ImageStatus", "lab busybox", _image("ImageStatusRequest", BUSYBOX_IMAGE, verbose=True)),
    Step("ImageStatus", "unknown image", _image("ImageStatusRequest", "localhost/runtimeproxy/absent:1.0")),
    Step("ImageStatus", "no image", _api("ImageStatusRequest")),
    Step("PullImage", "locally imported name, no registry", _image("PullImageRequest", BUSYBOX_IMAGE)),
    Step("PullImage", "invalid reference", _image("PullImageRequest", "Not A Reference!")),
    Step("RemoveImage", "imported image", import_removable_image),
    Step("ImageStatus", "removed image", _image("ImageStatusRequest", REMOVABLE_IMAGE)),
    Step("RemoveImage", "unknown image", _image("RemoveImageRequest", "localhost/runtimeproxy/absent:1.0")),
    # a pod and its container, from creation to removal
    Step("RunPodSandbox", "no metadata", _api("RunPodSandboxRequest")),
    Step("RunPodSandbox", "host network", lambda side: side.api.RunPodSandboxRequest(config=side.pod_config),
         keep=keep_pod),
    Step("PodSandboxStatus", "ready, verbose", _on_pod("PodSandboxStatusRequest", verbose=True), mask=POD_STATUS_MASK,
         keep=keep_pod_pid),
    Step("ListPodSandbox", "by id", lambda side: side.api.ListPodSandboxRequest(
        filter=side.api.PodSandboxFilter(id=side.pod_id)), mask=("items.*.created_at",)),
    Step("ListPodSandbox", "by label, ready", lambda side: side.api.ListPodSandboxRequest(filter=side.api.PodSandboxFilter(
        label_selector={"suite": "differential"}, state=side.api.PodSandboxStateValue(state=side.api.SANDBOX_READY))),
        mask=("items.*.created_at",)),
    Step("StreamPodSandboxes", "", _api("StreamPodSandboxesRequest"), mask=("pod_sandboxes.*.created_at",)),
    Step("CreateContainer", "unknown pod", lambda side: side.api.CreateContainerRequest(
        pod_sandbox_id=UNKNOWN_ID, config=side.client.container_config("box"), sandbox_config=side.pod_config)),
    Step("CreateContainer", "busybox", lambda side: side.api.CreateContainerRequest(
        pod_sandbox_id=side.pod_id, config=side.client.container_config("box", envs={"GREETING": "hello"}),
        sandbox_config=side.pod_config), keep=keep_container),
    Step("ContainerStatus", "created", _on_container("ContainerStatusRequest"), mask=CONTAINER_STATUS_MASK),
    Step("StartContainer", "", _on_container("StartContainerRequest")),
    Step("ContainerStatus", "running, verbose", _on_container("ContainerStatusRequest", verbose=True),
         mask=CONTAINER_STATUS_MASK),
    Step("ListContainers", "in the pod", lambda side: side.api.ListContainersRequest(
        filter=side.api.ContainerFilter(pod_sandbox_id=side.pod_id)), mask=("containers.*.created_at",)),
    Step("StreamContainers", "", _api("StreamContainersRequest"), mask=("containers.*.created_at",)),
    Step("UpdateContainerResources", "cpu shares and memory", lambda side: side.api.UpdateContainerResourcesRequest(
        container_id=side.container_id, linux=side.api.LinuxContainerResources(
            cpu_shares=256, memory_limit_in_bytes=256 * 1024 * 1024), annotations={"updated": "yes"})),
    Step("ContainerStatus", "updated", _on_container("ContainerStatusRequest"), mask=CONTAINER_STATUS_MASK),
    Step("ReopenContainerLog", "", _on_container("ReopenContainerLogRequest")),
    Step("ExecSync", "stdout, stderr, exit 3", _on_container(
        "ExecSyncRequest", cmd=["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"], timeout=20)),
    Step("ExecSync", "env", _on_container("ExecSyncRequest", cmd=["env"], timeout=20)),
    Step("Exec", "followed over websocket", _on_container(
        "ExecRequest", cmd=["sh", "-c", "echo out; echo err >&2; exit 3"], stdout=True, stderr=True), follow=follow_exec),
    Step("Attach", "handshake", _on_container("AttachRequest", stdout=True, stderr=True), follow=follow_attach),
    Step("PortForward", "ping through", lambda side: side.api.PortForwardRequest(
        pod_sandbox_id=side.pod_id, port=[side.forward_port]), follow=follow_port_forward),
    Step("ContainerStats", "", _on_container("ContainerStatsRequest"), mask=_prefixed("stats", CONTAINER_STATS)),
    Step("ListContainerStats", "in the pod", lambda side: side.api.ListContainerStatsRequest(
        filter=side.api.ContainerStatsFilter(pod_sandbox_id=side.pod_id)), mask=_prefixed("stats.*", CONTAINER_STATS)),
    Step("StreamContainerStats", "", _api("StreamContainerStatsRequest"),
         mask=_prefixed("container_stats.*", CONTAINER_STATS)),
    Step("PodSandboxStats", "", _on_pod("PodSandboxStatsRequest"), mask=_prefixed("stats", POD_STATS)),
    Step("ListPodSandboxStats", "by id", lambda side: side.api.ListPodSandboxStatsRequest(
        filter=side.api.PodSandboxStatsFilter(id=side.pod_id)), mask=_prefixed("stats.*", POD_STATS)),
    Step("StreamPodSandboxStats", "", _api("StreamPodSandboxStatsRequest"),
         mask=_prefixed("pod_sandbox_stats.*", POD_STATS)),
    Step("CheckpointContainer", "", _on_container("CheckpointContainerRequest", location="/tmp/rp-diff-checkpoint.tar")),
    Step("CheckpointPod", "", lambda side: side.api.CheckpointPodRequest(
        pod_sandbox_id=side.pod_id, output_path="/tmp/rp-diff-checkpoint-pod", container_ids=[side.container_id])),
    Step("RestorePod", "", _api("RestorePodRequest", checkpoint_path="/tmp/rp-diff-checkpoint-pod")),
    Step("ListMetricDescriptors", "", _api("ListMetricDescriptorsRequest"), unordered=("descriptors",)),
    Step("ListPodSandboxMetrics", "", _api("ListPodSandboxMetricsRequest"), mask=_prefixed("pod_metrics.*", POD_METRICS)),
    Step("StreamPodSandboxMetrics", "", _api("StreamPodSandboxMetricsRequest"),
         mask=_prefixed("pod_sandbox_metrics.*", POD_METRICS)),
    Step("UpdatePodSandboxResources", "", _on_pod("UpdatePodSandboxResourcesRequest")),
    Step("StopContainer", "", _on_container("StopContainerRequest", timeout=0)),
    Step("ContainerStatus", "exited", _on_container("ContainerStatusRequest"), mask=CONTAINER_STATUS_MASK),
    Step("StartContainer", "exited", _on_container("StartContainerRequest")),
    Step("RemoveContainer", "", _on_container("RemoveContainerRequest")),
    Step("RemoveContainer", "again", _on_container("RemoveContainerRequest")),
    Step("StopPodSandbox", "", _on_pod("StopPodSandboxRequest")),
    Step("PodSandboxStatus", "not ready", _on_pod("PodSandboxStatusRequest"), mask=POD_STATUS_MASK),
    Step("RemovePodSandbox", "", _on_pod("RemovePodSandboxRequest")),
    Step("RemovePodSandbox", "again", _on_pod("RemovePodSandboxRequest")),
    Step("UpdateRuntimeConfig", "pod cidr", lambda side: side.api.UpdateRuntimeConfigRequest(
        runtime_config=side.api.RuntimeConfig(network_config=side.api.NetworkConfig(pod_cidr="10.88.0.0/16")))),
    # unknown IDs: the same NotFound (or OK) with the same message
    _unknown("PodSandboxStatus", "PodSandboxStatusRequest", "pod_sandbox_id"),
    _unknown("StopPodSandbox", "StopPodSandboxRequest", "pod_sandbox_id"),
    _unknown("RemovePodSandbox", "RemovePodSandboxRequest", "pod_sandbox_id"),
    _unknown("ContainerStatus", "ContainerStatusRequest", "container_id"),
    _unknown("StartContainer", "StartContainerRequest", "container_id"),
    _unknown("StopContainer", "StopContainerRequest", "container_id"),
    _unknown("RemoveContainer", "RemoveContainerRequest", "container_id"),
    _unknown("UpdateContainerResources", "UpdateContainerResourcesRequest", "container_id"),
    _unknown("ReopenContainerLog", "ReopenContainerLogRequest", "container_id"),
    _unknown("ExecSync", "ExecSyncRequest", "container_id"),
    _unknown("Exec", "ExecRequest", "container_id"),
    _unknown("Attach", "AttachRequest", "container_id"),
    _unknown("PortForward", "PortForwardRequest", "pod_sandbox_id"),
    _unknown("ContainerStats", "ContainerStatsRequest", "container_id"),
    _unknown("PodSandboxStats", "PodSandboxStatsRequest", "pod_sandbox_id"),
    # opened before the first step, read in the background until here
    Step("GetContainerEvents", "during the sequence", _api("GetEventsRequest"),
         mask=("created_at", "pod_sandbox_status.created_at", "containers_statuses.*.created_at",
               "containers_statuses.*.started_at", "containers_statuses.*.finished_at")),
)
STREAM_WATCHED = "GetContainerEvents"
# What the sequence's pod and container go through: created, started (both), stopped and deleted (both).
SEQUENCE_EVENTS = 8
STREAM_SETTLE_SECONDS = 0.5  # no event for this long: the runtime's queue is drained


def methods_of(version: str) -> dict[str, Any]:
    """{method name: its descriptor} for both CRI services of ``version``."""
    api, _ = API_MODULES[version]
    return {method.name: method for service in SERVICES
            for method in api.DESCRIPTOR.services_by_name[service].methods}


def steps_for(version: str) -> list[Step]:
    methods = methods_of(version)
    return [step for step in STEPS if step.method in methods]


# -- running one side -----------------------------------------------------------------------------------------

def _invoke(side: Side, step: Step) -> Outcome:
    method = methods_of(side.client.version)[step.method]
    if step.method == STREAM_WATCHED and side.events is not None:
        return side.events.finish()
    stub = side.client.runtime if method.containing_service.name == "RuntimeService" else side.client.images
    request = step.request(side)
    return outcome_of(lambda: _call(getattr(stub, step.method), request, method.server_streaming))


def _call(rpc: Any, request: Message, streaming: bool) -> Any:
    return list(rpc(request, timeout=60)) if streaming else rpc(request, timeout=60)


def settle_events(client: CriClient, log_dir: Path) -> None:
    """Leave the runtime's events as each side's stream should find them: no backlog, one cancelled stream.

    containerd queues the events of a time nobody watched and hands them to the next stream; containerd 1.7's
    streams share one queue, and a cancelled stream still takes one event from it, once. So a pod is run and
    removed (its events feed what earlier cancelled streams take), then one stream reads until all is quiet and
    is cancelled: the direct side's stream opens after it, the proxy's after the direct side's."""
    pod_id = client.run_pod(client.pod_config("events-flush", log_dir))
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)
    watch = StreamWatch(client.runtime.GetContainerEvents, client.api.GetEventsRequest())
    watch.wait_quiet(STREAM_SETTLE_SECONDS)
    watch.finish()


def watched_events(side: Side) -> list[Any]:
    return next(outcome.get("stream", []) for step, outcome in side.outcomes if step.method == STREAM_WATCHED)


def run_side(side: Side) -> None:
    """The whole sequence on one side; every outcome lands in ``side.outcomes``."""
    steps = steps_for(side.client.version)
    if STREAM_WATCHED in methods_of(side.client.version):
        side.events = StreamWatch(side.client.runtime.GetContainerEvents, side.api.GetEventsRequest())
    for step in steps:
        outcome = _invoke(side, step)
        side.outcomes.append((step, outcome))
        if is_success(outcome) and step.keep is not None:
            step.keep(side, outcome["ok"])
        if step.follow is not None:  # always a second outcome, so both sides' lists stay aligned
            followed = step.follow(side, outcome["ok"]) if is_success(outcome) else {NOT_FOLLOWED: "the call failed"}
            side.outcomes.append((step, followed))


def differences(direct: Side, proxied: Side) -> list[str]:
    """Where the normalized outcomes differ, one line per differing value: ``step: path: direct != proxy``."""
    assert [step.name for step, _ in direct.outcomes] == [step.name for step, _ in proxied.outcomes]
    found = []
    for (step, expected), (_, got) in zip(direct.outcomes, proxied.outcomes):
        expected = normalized(expected, direct.tokens, step.mask, step.unordered)
        got = normalized(got, proxied.tokens, step.mask, step.unordered)
        found += [f"{step.name}: {line}" for line in differing_paths(expected, got)]
    return found


# -- fixtures ---------------------------------------------------------------------------------------------------

@dataclass
class Through:
    """How the proxied side reaches containerd: a channel, and the echo plugin's record if hooked."""

    variant: str
    channel: grpc.Channel
    echo_record: Path | None = None


@pytest.fixture(scope="module")
def echo_proxy_channel(containerd: ContainerdInstance, workdir: Path) -> Iterator[tuple[grpc.Channel, Path]]:
    directory = workdir / "diff-echo"
    with echo_hooked_proxy_in(directory, containerd.address) as proxy:
        channel = open_channel(proxy.listen_path)
        yield channel, echo_record_in(directory)
        channel.close()


@pytest.fixture(params=["proxy", "proxy+echo"])
def through(request: pytest.FixtureRequest) -> Through:
    if request.param == "proxy":
        return Through("proxy", request.getfixturevalue("proxied_channel"))
    channel, record = request.getfixturevalue("echo_proxy_channel")
    return Through("proxy+echo", channel, record)


@pytest.fixture(scope="module")
def removable_image_tar(workdir: Path) -> Path:
    path = workdir / "removable-image.tar"
    path.write_bytes(oci_layout_tar(REMOVABLE_IMAGE, [FileEntry("removable", 0o644, b"removable\n")], {"Cmd": ["true"]}))
    return path


@pytest.fixture(scope="module")
def forward_port() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers each connection's first bytes with ``pong:<bytes>``: the target
    of PortForward (a host-network pod shares the host's 127.0.0.1)."""
    with tcp_server(lambda connection: connection.sendall(b"pong:" + connection.recv(1024))) as port:
        yield port


def echo_hooks(record: Path | None) -> Counter[str]:
    if record is None or not record.exists():
        return Counter()
    return Counter(orjson.loads(line)["hook"] for line in record.read_bytes().splitlines())


# -- the tests ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", sorted(API_MODULES))
def test_the_table_covers_every_method(version: str) -> None:
    methods = set(methods_of(version))
    called = {step.method for step in steps_for(version)}
    assert methods - called == set(), "methods no step calls"
    for answers in RUNTIME_ANSWERS.values():
        assert answers.unimplemented(version) <= methods
    every_version = set().union(*(methods_of(v) for v in API_MODULES))
    assert {step.method for step in STEPS} <= every_version, "steps naming no method"


@pytest.fixture(scope="module")
def runtime_answers(containerd: ContainerdInstance) -> tuple[str, RuntimeAnswers]:
    """The backend's version ("major.minor", from its Version call) and what that version answers directly."""
    minor = runtime_minor(containerd.cri_version())
    if minor not in RUNTIME_ANSWERS:
        pytest.fail(f"no answers recorded for containerd {minor} ({containerd.cri_version()}): run the suite, "
                    "check the direct side's answers and add them to RUNTIME_ANSWERS")
    return minor, RUNTIME_ANSWERS[minor]


def test_every_method_answers_through_the_proxy_as_directly(
    api_version: str, through: Through, direct_channel: grpc.Channel, containerd: ContainerdInstance,
    workdir: Path, removable_image_tar: Path, forward_port: int, cleanup_pods: list[str],
    conformance_summary: list[str], runtime_answers: tuple[str, RuntimeAnswers],
) -> None:
    minor, answers = runtime_answers

    def side(name: str, channel: grpc.Channel) -> Side:
        tag = f"diff-{api_version}-{through.variant.replace('+', '-')}-{name}"
        log_dir = workdir / "diff-logs" / tag
        log_dir.mkdir(parents=True, exist_ok=True)
        return Side(name, CriClient(channel, api_version), tag, log_dir, removable_image_tar, containerd, forward_port,
                    cleanup_pods)

    hooks_before = echo_hooks(through.echo_record)
    direct, proxied = side("direct", direct_channel), side("proxy", through.channel)
    if STREAM_WATCHED in methods_of(api_version) and STREAM_WATCHED not in answers.unimplemented(api_version):
        settle_events(direct.client, workdir / "diff-logs")  # the direct side proves below what the runtime loses
    run_side(direct)
    run_side(proxied)

    # First what the runtime itself answers (its version's recorded behaviour), then the proxy against it.
    methods = {step.method for step in steps_for(api_version)}
    succeeded = {step.method for step, outcome in direct.outcomes if is_success(outcome) and NOT_FOLLOWED not in outcome}
    unimplemented = {step.method for step, outcome in direct.outcomes
                     if outcome.get("error", {}).get("code") == "UNIMPLEMENTED"}
    assert unimplemented == answers.unimplemented(api_version), f"containerd {minor} answers UNIMPLEMENTED to"
    expected_to_fail = set(answers.only_errors_here) & methods
    assert succeeded == methods - unimplemented - expected_to_fail, f"containerd {minor} serves"
    if STREAM_WATCHED in succeeded:
        events = watched_events(direct)
        assert len(events) == SEQUENCE_EVENTS - answers.events_lost_per_cancelled_stream, \
            f"containerd {minor}'s events stream, opened after one cancelled stream: " + ", ".join(
                f"{event.get('container_event_type', 'CONTAINER_CREATED_EVENT')} {event['container_id'][:12]}"
                for event in events)
    if "ListImages" in succeeded:
        listed = next(outcome["ok"] for step, outcome in direct.outcomes if step.method == "ListImages")
        assert set(LAB_IMAGES) <= {tag for image in listed["images"] for tag in image["repo_tags"]}
    found = differences(direct, proxied)
    assert not found, "\n".join(found)
    hooks = echo_hooks(through.echo_record) - hooks_before
    if through.echo_record is not None and succeeded:
        assert set(hooks) == set(HOOK_NAMES), hooks
    served = f"{len(methods)} methods" if succeeded else f"not served by containerd {minor} ({len(methods)} methods)"
    conformance_summary.append(
        f"differential containerd {minor} {api_version} x {through.variant}: {served}, "
        f"{len(proxied.outcomes)} outcomes equal to direct" + (f", echo plugin hooks: {dict(hooks)}" if hooks else ""))
