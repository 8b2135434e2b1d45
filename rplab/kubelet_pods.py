"""A node's worth of static pods for the real kubelet (rplab.kubelet_node), what each settles to, and the two views
of the node that a run through a proxy must share with a run straight to the runtime.

The pods (all host network: the lab's runtimes have no CNI network, and the kubelet then reaches a probe's port on
``127.0.0.1``, its ``--node-ip``), each busybox from the lab's images, never pulled:

    exec-probes       exec readiness and liveness probes                        Running, Ready
    http-probes       HTTP readiness and liveness (busybox httpd)               Running, Ready
    tcp-probes        TCP readiness and liveness                                Running, Ready
    not-ready         a readiness probe that always fails                       Running, not Ready
    liveness-restart  a liveness probe that fails until the first restart       Running, Ready, restartCount 1
    crash-loop        a container that exits 1 at once                          CrashLoopBackOff, restartCount >= 1
    init-container    an init container whose file the app container reads      Running, Ready
    completes         restartPolicy Never, exits 0                              Succeeded
    guaranteed        two containers, requests = limits                         Running, Ready
    readded           removed (manifest deleted, waited for) and written back    Running, Ready

``run_node(node)`` runs them: starts the kubelet, waits for them to settle, removes and re-adds ``readded``, takes
both views and stops the node (its host check after). The views have every name, ID, time and port-free detail
normalised, so two runs compare with ``==``:
- ``kubelet_view``: from its ``/pods``, per pod its phase, Ready condition, and per container ready, restartCount
  (a crash-looping container's as ">=1": how often it crashed depends on the clock), state and last state;
- ``runtime_view``: from CRI (ListPodSandbox, ListContainers), per pod its newest sandbox's state, labels and
  annotations, and per container (the newest attempt of each name) its state, labels and annotations.

    python -m rplab.kubelet_pods --endpoint SOCKET [--import-images CONTAINERD_SOCKET] [--dir DIR]
        # the pods through SOCKET: prints what the kubelet saw, the figures and the host check as JSON;
        # exit status 1 unless every pod settled and the host is as found
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rplab.cri import CriClient, open_channel
from rplab.images import BUSYBOX_IMAGE, IMAGE_CACHE, build_and_import
from rplab.kubelet_node import (KUBELET_VERSION, NEWEST_KUBELET_VERSION, NODE_LABEL, NODE_NAME, VERSIONS, KubeletNode,
                                KubeletNodeError, seconds_since, wait_until)
from rplab.registry import free_port
from runtimeproxy.usage import OneLineParser

NAMESPACE = "rplab"
CRASH_LOOPING = {("crash-loop", "app")}  # (pod, container) whose restartCount the views give as ">=1"
SETTLE_TIMEOUT_SECONDS = 120.0
# After a removed pod's containers stopped: PLEG relists (one a second) before its manifest is written back, so the
# kubelet has seen the containers die and its housekeeping (every 2 s) has forgotten the pod.
RELISTS_BEFORE_READD = 4
# The labels and annotations whose values differ by run: the pod's UID (a hash of its manifest's path), when the
# kubelet saw it, which node directory it is.
UID_KEYS = ("io.kubernetes.pod.uid", "kubernetes.io/config.hash")
TIME_KEYS = ("kubernetes.io/config.seen",)


# -- the pods -------------------------------------------------------------------------------------------------


def _container(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script],
            **extra}


def _exec_probe(*command: str) -> dict[str, Any]:
    return {"exec": {"command": list(command)}, "periodSeconds": 1, "failureThreshold": 1}


def _pod(name: str, containers: list[dict[str, Any]], *, restart: str = "Always", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"hostNetwork": True, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "containers": containers, **spec}}


def _served(port: int) -> str:
    return f"mkdir -p /www && echo ok > /www/index.html && exec busybox httpd -f -p 127.0.0.1:{port} -h /www"


SLEEP = "exec sleep 3600"
DATA: dict[str, Any] = {"volumes": [{"name": "data", "emptyDir": {}}]}
DATA_MOUNT = [{"name": "data", "mountPath": "/data"}]


@dataclass(frozen=True)
class NodePorts:
    """The host ports of the HTTP and TCP probes' servers (the same for the runs being compared: they are in the
    pods' specs, and so in the kubelet's container hashes)."""

    http: int
    tcp: int

    @classmethod
    def free(cls) -> NodePorts:
        return cls(free_port(), free_port())


def node_pods(ports: NodePorts, probes: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The manifests, in the order written; ``probes``: set on every probe (``timeoutSeconds``, ``periodSeconds``:
    an emulated node needs longer and fewer probes than the defaults here, 1 s and 1 s)."""
    http = {"httpGet": {"host": "127.0.0.1", "port": ports.http, "path": "/"}, "periodSeconds": 1}
    tcp = {"tcpSocket": {"host": "127.0.0.1", "port": ports.tcp}, "periodSeconds": 1}
    resources = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}}
    first_run_fails = ("if [ -e /data/restarted ]; then touch /tmp/healthy; else touch /data/restarted; fi; "
                       + SLEEP)
    pods = [
        _pod("exec-probes", [_container("app", f"touch /tmp/healthy; {SLEEP}",
                                        readinessProbe=_exec_probe("cat", "/tmp/healthy"),
                                        livenessProbe=_exec_probe("true"))]),
        _pod("http-probes", [_container("app", _served(ports.http), readinessProbe=http, livenessProbe=http)]),
        _pod("tcp-probes", [_container("app", _served(ports.tcp), readinessProbe=tcp, livenessProbe=tcp)]),
        _pod("not-ready", [_container("app", SLEEP, readinessProbe=_exec_probe("false"))]),
        _pod("liveness-restart", [_container("app", first_run_fails, volumeMounts=DATA_MOUNT,
                                             livenessProbe=_exec_probe("cat", "/tmp/healthy"))], **DATA),
        _pod("crash-loop", [_container("app", "echo crashing; exit 1")]),
        _pod("init-container", [_container("app", f"cat /data/init && {SLEEP}", volumeMounts=DATA_MOUNT,
                                           readinessProbe=_exec_probe("cat", "/data/init"))],
             initContainers=[_container("init", "echo done > /data/init", volumeMounts=DATA_MOUNT)], **DATA),
        _pod("completes", [_container("app", "exit 0")], restart="Never"),
        _pod("guaranteed", [_container("app", SLEEP, resources=resources),
                            _container("sidecar", SLEEP, resources=resources)]),
        _pod("readded", [_container("app", f"touch /tmp/ready; {SLEEP}",
                                    readinessProbe=_exec_probe("cat", "/tmp/ready"))]),
    ]
    for pod in pods:
        for container in pod["spec"]["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in container and probes:
                    container[probe] = {**container[probe], **probes}
    return pods


# -- the views ------------------------------------------------------------------------------------------------


def _state(state: dict[str, Any] | None) -> str:
    """A container state as one word: running, waiting:<reason>, terminated:<reason>:<exit code>, or none."""
    if not state:
        return "none"
    if "running" in state:
        return "running"
    if "waiting" in state:
        return f"waiting:{state['waiting'].get('reason', '')}"
    if "terminated" in state:
        ended = state["terminated"]
        return f"terminated:{ended.get('reason', '')}:{ended.get('exitCode')}"
    return "none"


def _restarts(pod: str, container: str, count: int) -> int | str:
    return ">=1" if (pod, container) in CRASH_LOOPING and count >= 1 else count


def _container_view(pod: str, status: dict[str, Any]) -> dict[str, Any]:
    view = {"ready": status.get("ready", False), "restartCount": _restarts(pod, status["name"],
                                                                          status.get("restartCount", 0)),
            "state": _state(status.get("state")), "lastState": _state(status.get("lastState"))}
    if (pod, status["name"]) in CRASH_LOOPING:  # between two crashes it is terminated or waiting: both are the loop
        view["state"] = view["state"].replace("terminated:Error:1", "waiting:CrashLoopBackOff")
    return view


def kubelet_view(pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The kubelet's view: per pod (by manifest name) phase, Ready, and its containers' and init containers'."""
    view = {}
    for name, pod in sorted(pods.items()):
        status = pod.get("status", {})
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        view[name] = {
            "phase": status.get("phase"), "ready": ready,
            "containers": {c["name"]: _container_view(name, c) for c in status.get("containerStatuses", [])},
            "initContainers": {c["name"]: _container_view(name, c) for c in status.get("initContainerStatuses", [])},
        }
    return view


def _normalised(values: dict[str, str]) -> dict[str, str]:
    kept = {}
    for key, value in values.items():
        if key in UID_KEYS:
            value = "<uid>"
        elif key in TIME_KEYS:
            value = "<time>"
        elif key == NODE_LABEL:
            value = "<node>"
        elif key == "io.kubernetes.pod.name":
            value = value.removesuffix(f"-{NODE_NAME}")
        kept[key] = value
    return dict(sorted(kept.items()))


def runtime_view(node: KubeletNode, endpoint: Path | None = None) -> dict[str, Any]:
    """The runtime's view of the node's pods, through CRI at ``endpoint`` (default: the node's): per pod (by
    manifest name) the newest sandbox and the newest container of each name: state, labels, annotations."""
    client = CriClient(open_channel(endpoint)) if endpoint else node.runtime()
    with client.channel:
        api = client.api
        sandboxes = sorted(node.sandboxes(client), key=lambda s: s.created_at)
        containers = sorted(client.runtime.ListContainers(api.ListContainersRequest(), timeout=30).containers,
                            key=lambda c: (c.metadata.attempt, c.created_at))
        sandbox_states = {value: name for name, value in api.PodSandboxState.items()}
        container_states = {value: name for name, value in api.ContainerState.items()}
    pods: dict[str, Any] = {}
    newest: dict[str, str] = {}  # pod -> the ID of its newest sandbox
    for sandbox in sandboxes:  # oldest first: the newest wins
        name = sandbox.metadata.name.removesuffix(f"-{NODE_NAME}")
        newest[name] = sandbox.id
        pods[name] = {"state": sandbox_states[sandbox.state], "labels": _normalised(dict(sandbox.labels)),
                      "annotations": _normalised(dict(sandbox.annotations)), "containers": {}}
    pod_of = {sandbox_id: pod for pod, sandbox_id in newest.items()}
    for container in containers:  # the newest attempt of each name last: it wins
        pod = pod_of.get(container.pod_sandbox_id)
        if pod is None:
            continue
        name = container.metadata.name
        annotations = _normalised(dict(container.annotations))
        state = container_states[container.state]
        if (pod, name) in CRASH_LOOPING:
            annotations["io.kubernetes.container.restartCount"] = ">=1"
            state = "CONTAINER_EXITED"  # it may be caught in the instant between its start and its exit
        pods[pod]["containers"][name] = {"state": state, "labels": _normalised(dict(container.labels)),
                                         "annotations": annotations}
    return dict(sorted(pods.items()))


# -- what each pod settles to ---------------------------------------------------------------------------------

PodCheck = Callable[[dict[str, Any]], bool]


def _ready(view: dict[str, Any]) -> bool:
    return view["phase"] == "Running" and view["ready"]


def _app(view: dict[str, Any]) -> dict[str, Any]:
    return view["containers"].get("app", {})


SETTLED: dict[str, PodCheck] = {
    "exec-probes": _ready,
    "http-probes": _ready,
    "tcp-probes": _ready,
    "not-ready": lambda v: v["phase"] == "Running" and not v["ready"] and _app(v).get("state") == "running",
    "liveness-restart": lambda v: _ready(v) and _app(v).get("restartCount") == 1,
    "crash-loop": lambda v: _app(v).get("state") == "waiting:CrashLoopBackOff" and _app(v).get("restartCount") == ">=1",
    "init-container": lambda v: (_ready(v)
                                 and v["initContainers"].get("init", {}).get("state") == "terminated:Completed:0"),
    "completes": lambda v: v["phase"] == "Succeeded",
    "guaranteed": _ready,
    "readded": _ready,
}
# The pods that end Running and Ready (liveness-restart after its one restart): "all Ready" is when they are.
READY_PODS = ("exec-probes", "http-probes", "tcp-probes", "liveness-restart", "init-container", "guaranteed",
              "readded")


def unsettled(view: dict[str, Any], pods: Collection[str] | None = None) -> list[str]:
    """The pods of the node (or those of ``pods``) not (yet) in the state they settle to."""
    return [name for name, check in SETTLED.items()
            if (pods is None or name in pods) and (name not in view or not check(view[name]))]


# -- one run ----------------------------------------------------------------------------------------------------


@dataclass
class NodeOutcome:
    """What one run saw, and its figures (seconds since the kubelet started)."""

    kubelet: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    host_changes: list[str] = field(default_factory=list)
    written_sysctls: dict[str, str] = field(default_factory=dict)
    overlay_writes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=lambda: list(SETTLED))  # the pods the run wrote
    kubelet_version: str = KUBELET_VERSION

    def ok(self) -> bool:
        return not self.problems and not self.host_changes and not unsettled(self.kubelet, self.pods)

    def summary(self) -> dict[str, Any]:
        return {"kubelet": self.kubelet_version, "ok": self.ok(), "figures": self.figures,
                "problems": self.problems, "host_changes": self.host_changes,
                "kept_off_the_host": {"sysctls": self.written_sysctls, "files": self.overlay_writes},
                "pods": self.kubelet}


def _settled_view(node: KubeletNode, pods: Collection[str]) -> dict[str, Any] | None:
    view = kubelet_view(node.pod_names())
    return None if unsettled(view, pods) else view


@dataclass(frozen=True)
class Pace:
    """How fast the node is expected to be: settings for every probe (node_pods's ``probes``), how long the pods
    may take to settle, how often the kubelet is asked. An emulated node needs longer and fewer probes."""

    probes: dict[str, int] | None = None
    settle_timeout: float = SETTLE_TIMEOUT_SECONDS
    poll_interval: float = 0.2


def run_node(node: KubeletNode, ports: NodePorts | None = None, runtime_endpoint: Path | None = None,
             while_settled: Callable[[KubeletNode], None] | None = None, pods: Collection[str] | None = None,
             pace: Pace = Pace()) -> NodeOutcome:
    """The node's pods (or those of them named in ``pods``) on ``node`` from start to stop; the host check after.
    ``runtime_endpoint``: where the runtime's view is read (default: the node's endpoint); ``while_settled(node)``:
    the caller's own checks while the pods are settled, before they are stopped."""
    chosen = [name for name in SETTLED if pods is None or name in pods]
    outcome = NodeOutcome(pods=chosen, kubelet_version=node.version)
    manifests = [m for m in node_pods(ports or NodePorts.free(), pace.probes) if m["metadata"]["name"] in chosen]
    timeout, interval = pace.settle_timeout, pace.poll_interval
    try:
        node.start()
        for manifest in manifests:
            node.write_pod(manifest)
        wait_until(lambda: _settled_view(node, [p for p in READY_PODS if p in chosen]), timeout, "every pod Ready",
                   interval=interval)
        outcome.figures["all Ready"] = seconds_since(node.started_at)
        for manifest in manifests:
            if manifest["metadata"]["name"] == "readded":
                _remove_and_readd(node, manifest, outcome, pace)
        settled = wait_until(lambda: _settled_view(node, chosen), timeout, "every pod settled", interval=interval)
        outcome.runtime = runtime_view(node, runtime_endpoint)
        outcome.kubelet = kubelet_view(node.pod_names())  # again: the crash loop may have moved on meanwhile
        if unsettled(outcome.kubelet, chosen):
            outcome.kubelet = settled
        outcome.figures["settled"] = seconds_since(node.started_at)
        if while_settled is not None:
            while_settled(node)
    except KubeletNodeError as error:
        outcome.problems.append(str(error))
        if not outcome.kubelet and node.running:
            outcome.kubelet = kubelet_view(node.pod_names())
    finally:
        stopping = time.monotonic()
        try:
            node.stop()
        except KubeletNodeError as error:
            outcome.problems.append(str(error))
        outcome.figures["stop"] = seconds_since(stopping)
    outcome.host_changes = node.host_changes()
    outcome.written_sysctls = node.written_sysctls()
    outcome.overlay_writes = node.overlay_writes()
    return outcome


def _remove_and_readd(node: KubeletNode, manifest: dict[str, Any], outcome: NodeOutcome, pace: Pace) -> None:
    """Deletes ``readded``'s manifest, waits until the kubelet has finished the pod, writes the manifest back and
    waits until it is Ready again. The pod comes back with the same UID (a hash of the manifest and its path), which
    the kubelet restarts as a pod it has finished: how it counts the new container's restarts depends on what it has
    seen of the old one, so the manifest is written back only once the kubelet is done with the pod (sandbox and
    containers stopped, the pod's cgroup removed: its last step) and has relisted a few times since."""
    name = manifest["metadata"]["name"]
    uid = node.pod_names()[name]["metadata"]["uid"]
    removing = time.monotonic()
    node.remove_pod(name)

    def finished() -> bool:
        if name in node.pod_names() or node.has_pod_cgroup(uid):
            return False
        client = node.runtime()
        with client.channel:
            api = client.api
            sandboxes = [s.id for s in node.sandboxes(client) if s.metadata.name.removesuffix(f"-{NODE_NAME}") == name]
            ready = api.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid}, state=api.PodSandboxStateValue(
                state=api.SANDBOX_READY))
            running = api.ContainerFilter(label_selector={"io.kubernetes.pod.uid": uid}, state=api.ContainerStateValue(
                state=api.CONTAINER_RUNNING))
            return bool(sandboxes) and not client.runtime.ListPodSandbox(
                api.ListPodSandboxRequest(filter=ready), timeout=30).items and not client.runtime.ListContainers(
                api.ListContainersRequest(filter=running), timeout=30).containers

    wait_until(finished, pace.settle_timeout, f"{name} to be removed")
    relisted = node.relists()
    wait_until(lambda: node.relists() >= relisted + RELISTS_BEFORE_READD, pace.settle_timeout,
               f"{RELISTS_BEFORE_READD} relists")
    outcome.figures["pod removed"] = seconds_since(removing)
    readding = time.monotonic()
    node.write_pod(manifest)
    wait_until(lambda: _settled_view(node, [name]), pace.settle_timeout, f"{name} Ready again",
               interval=pace.poll_interval)
    outcome.figures["pod re-added, Ready"] = seconds_since(readding)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.kubelet_pods", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", type=Path, required=True, help="the CRI socket (containerd's or a proxy's)")
    parser.add_argument("--import-images", type=Path, metavar="CONTAINERD_SOCKET",
                        help="first import the lab's busybox and pause images (built offline) into this containerd "
                        f"(namespace k8s.io); the pods use {BUSYBOX_IMAGE} and never pull it")
    parser.add_argument("--dir", type=Path, help="the kubelet's directory, kept (default: a temporary one, removed)")
    parser.add_argument("--kubelet", choices=sorted(VERSIONS.values()), default=KUBELET_VERSION,
                        help=f"which kubelet (default: %(default)s; {NEWEST_KUBELET_VERSION}, the newest, is tested "
                        "on cgroup v2 only: the suite runs it in the cgroup v2 + systemd guest)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("rplab.kubelet_pods: the kubelet runs as root (sudo)", file=sys.stderr)
        return 2
    if args.import_images is not None:
        build_and_import(str(args.import_images), IMAGE_CACHE)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rplab-kubelet-", dir="/tmp"))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        peer = next(name for name, version in VERSIONS.items() if version == args.kubelet)
        outcome = run_node(KubeletNode(args.endpoint, directory, peer=peer))
    except KubeletNodeError as error:
        print(f"rplab.kubelet_pods: {error}", file=sys.stderr)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(outcome.summary(), indent=1))
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    raise SystemExit(main())
