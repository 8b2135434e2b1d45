"""What cri-dockerd 0.3.1 sends to dockerd for a pod's life, as data: request lines, headers and bodies.

Where the shapes come from (no cri-dockerd runs here; these are written down from it):
- the calls and their order: `../shared/lab-notes.md` ("Docker Engine behind a CRI server"), measured with
  cri-dockerd 0.3.1 in front of dockerd 20.10 (API 1.41): RunPodSandbox = create `k8s_POD_…` + start;
  CreateContainer = create `k8s_<ctr>_…`; StartContainer = start; UpdateContainerResources = update (every
  resource field present, 0 meaning unchanged); StopContainer = stop `?t=N`; StopPodSandbox = stop of the
  sandbox (cri-dockerd's 10 s grace); RemovePodSandbox = list by `io.kubernetes.sandbox.id` + DELETE each.
- the bodies: cri-dockerd's sandbox/container config builders (labels: the pod's or container's labels, each
  annotation as `annotation.<key>`, `io.kubernetes.docker.type`, `io.kubernetes.container.name=POD`,
  `io.kubernetes.sandbox.id`, `io.kubernetes.container.logpath`; a sandbox gets CpuShares 2, OomScoreAdj -998,
  IpcMode shareable, `no-new-privileges`; a container Memory = MemorySwap = its limit (no swap),
  `container:<sandbox id>` network/IPC/PID modes, `seccomp=unconfined`, a `NONE` health check) encoded the way
  the Go Docker client 20.10 encodes `container.Config`/`HostConfig`/`UpdateConfig`: every field that is not
  `omitempty`, in struct order, nil slices as `null`, `<>&` escaped, a trailing newline (json.Encoder).
- the headers: Go's `net/http` as the Docker client drives it: `HTTP/1.1`, `Host: docker` (the client's name
  for a unix socket), `User-Agent: Go-http-client/1.1` (cri-dockerd sets no agent of its own), no
  `Accept-Encoding` (compression is off on unix sockets), `Content-Length` and a `Content-Type` on every POST
  (`application/json` with a body, `text/plain` without). Only the hijacked calls (exec start, attach) go out
  with an EMPTY `Host:`: they build their request without the client's host name.

Templates hold placeholders (`<sandbox-id>`, `<pod>`, …) that `fill` replaces with a pod's values.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

API_PREFIX = "/v1.41"
USER_AGENT = b"Go-http-client/1.1"
HOST = b"docker"  # what the Go Docker client names a unix-socket daemon; hijacked calls send an empty Host
SANDBOX_STOP_SECONDS = 10  # cri-dockerd's defaultSandboxGracePeriod
SANDBOX_ID = "<sandbox-id>"
CONTAINER_ID = "<container-id>"

Json = dict[str, Any]


@dataclass(frozen=True)
class PodShape:
    """The pod (and its one container) a replay creates: what the kubelet would put in the CRI configs."""

    name: str
    uid: str
    namespace: str = "default"
    attempt: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str = "/rp-replay"
    sandbox_image: str = ""
    container: str = "box"
    image: str = ""
    command: tuple[str, ...] = ("sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
    envs: tuple[tuple[str, str], ...] = (("KEEP", "me"), ("ALSO", "kept"))
    binds: tuple[str, ...] = ()  # HostConfig.Binds of the container ("/host:/container[:ro]", as cri-dockerd)
    cpu_shares: int = 256
    cpu_period: int = 100000
    cpu_quota: int = 50000
    memory: int = 64 * 1024 * 1024
    oom_score_adj: int = 1000
    log_directory: str = "/var/log/pods/replay"

    def placeholders(self, sandbox_id: str = SANDBOX_ID, container_id: str = CONTAINER_ID) -> dict[str, str]:
        return {"<sandbox-id>": sandbox_id, "<container-id>": container_id, "<pod>": self.name,
                "<namespace>": self.namespace, "<uid>": self.uid, "<attempt>": str(self.attempt),
                "<container>": self.container, "<cgroup-parent>": self.cgroup_parent,
                "<sandbox-image>": self.sandbox_image, "<image>": self.image}


# --- names and targets ----------------------------------------------------------------------------


def sandbox_name(pod: PodShape) -> str:
    return f"k8s_POD_{pod.name}_{pod.namespace}_{pod.uid}_{pod.attempt}"


def container_name(pod: PodShape) -> str:
    return f"k8s_{pod.container}_{pod.name}_{pod.namespace}_{pod.uid}_{pod.attempt}"


def create_target(name: str) -> str:
    return f"{API_PREFIX}/containers/create?" + urllib.parse.urlencode({"name": name})


def start_target(container_id: str) -> str:
    return f"{API_PREFIX}/containers/{container_id}/start"


def update_target(container_id: str) -> str:
    return f"{API_PREFIX}/containers/{container_id}/update"


def stop_target(container_id: str, seconds: int) -> str:
    return f"{API_PREFIX}/containers/{container_id}/stop?t={seconds}"


def remove_target(container_id: str) -> str:
    return f"{API_PREFIX}/containers/{container_id}?force=1&v=1"


def inspect_target(container_id: str) -> str:
    return f"{API_PREFIX}/containers/{container_id}/json"


def list_by_sandbox_target(sandbox_id: str) -> str:
    """Go's `filters.Args` encoding (`{"label":{"k=v":true}}`), keys sorted as `url.Values.Encode` does."""
    filters = json.dumps({"label": {f"io.kubernetes.sandbox.id={sandbox_id}": True}}, separators=(",", ":"))
    return f"{API_PREFIX}/containers/json?" + urllib.parse.urlencode({"all": "1", "filters": filters})


# --- encoding and headers -------------------------------------------------------------------------


def go_json(body: Json) -> bytes:
    """As Go's json.Encoder writes it: compact, UTF-8, `<>&` escaped, a trailing newline."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (text + "\n").encode()


def headers(method: str, body: bytes | None) -> list[tuple[bytes, bytes]]:
    """The header lines, in the order Go's net/http writes them."""
    lines = [(b"Host", HOST), (b"User-Agent", USER_AGENT)]
    if method in ("POST", "PUT"):
        lines.append((b"Content-Length", str(len(body or b"")).encode()))
        lines.append((b"Content-Type", b"application/json" if body else b"text/plain"))
    return lines


def fill(template: Any, values: dict[str, str]) -> Any:
    """The template with every placeholder in its strings (keys too) replaced."""
    if isinstance(template, dict):
        return {fill(key, values): fill(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(item, values) for item in template]
    if isinstance(template, str):
        for placeholder, value in values.items():
            template = template.replace(placeholder, value)
    return template


# --- bodies ---------------------------------------------------------------------------------------

# Resources of a HostConfig / UpdateConfig as Go 20.10 encodes an empty one (overrides set the values).
_RESOURCES: Json = {
    "CpuShares": 0, "Memory": 0, "NanoCpus": 0, "CgroupParent": "", "BlkioWeight": 0, "BlkioWeightDevice": None,
    "BlkioDeviceReadBps": None, "BlkioDeviceWriteBps": None, "BlkioDeviceReadIOps": None,
    "BlkioDeviceWriteIOps": None, "CpuPeriod": 0, "CpuQuota": 0, "CpuRealtimePeriod": 0, "CpuRealtimeRuntime": 0,
    "CpusetCpus": "", "CpusetMems": "", "Devices": None, "DeviceCgroupRules": None, "DeviceRequests": None,
    "KernelMemory": 0, "KernelMemoryTCP": 0, "MemoryReservation": 0, "MemorySwap": 0, "MemorySwappiness": None,
    "OomKillDisable": None, "PidsLimit": None, "Ulimits": None, "CpuCount": 0, "CpuPercent": 0,
    "IOMaximumIOps": 0, "IOMaximumBandwidth": 0,
}


def _config(**values: Any) -> Json:
    """container.Config (20.10) in field order; omitempty fields only when given."""
    config: Json = {"Hostname": "", "Domainname": "", "User": "", "AttachStdin": False, "AttachStdout": False,
                    "AttachStderr": False, "Tty": False, "OpenStdin": False, "StdinOnce": False, "Env": None,
                    "Cmd": None}
    if "Healthcheck" in values:
        config["Healthcheck"] = values.pop("Healthcheck")
    config.update({"Image": "", "Volumes": None, "WorkingDir": "", "Entrypoint": None, "OnBuild": None,
                   "Labels": None})
    for key, value in values.items():
        assert key in config, key
        config[key] = value
    return config


def _host_config(resources: Json, **values: Any) -> Json:
    """container.HostConfig (20.10) in field order, Resources embedded after Isolation."""
    host: Json = {
        "Binds": None, "ContainerIDFile": "", "LogConfig": {"Type": "", "Config": None}, "NetworkMode": "",
        "PortBindings": None, "RestartPolicy": {"Name": "", "MaximumRetryCount": 0}, "AutoRemove": False,
        "VolumeDriver": "", "VolumesFrom": None, "CapAdd": None, "CapDrop": None, "CgroupnsMode": "", "Dns": None,
        "DnsOptions": None, "DnsSearch": None, "ExtraHosts": None, "GroupAdd": None, "IpcMode": "", "Cgroup": "",
        "Links": None, "OomScoreAdj": 0, "PidMode": "", "Privileged": False, "PublishAllPorts": False,
        "ReadonlyRootfs": False, "SecurityOpt": None, "UTSMode": "", "UsernsMode": "", "ShmSize": 0,
        "ConsoleSize": [0, 0], "Isolation": "",
    }
    for key, value in values.items():
        assert key in host, key
        host[key] = value
    for key, value in resources.items():
        assert key in _RESOURCES, key
    host.update({**_RESOURCES, **resources})
    host.update({"MaskedPaths": None, "ReadonlyPaths": None})
    return host


def _labels(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, str]:
    """cri-dockerd's makeLabels: labels, then each annotation as `annotation.<key>`."""
    return {**labels, **{f"annotation.{key}": value for key, value in annotations.items()}}


def sandbox_create_body(pod: PodShape) -> Json:
    """RunPodSandbox's create (a pod on a CNI network: network `none` until the plugin wires it)."""
    labels = {"io.kubernetes.pod.name": "<pod>", "io.kubernetes.pod.namespace": "<namespace>",
              "io.kubernetes.pod.uid": "<uid>", **pod.labels}
    annotations = {"kubernetes.io/config.source": "api", **pod.annotations}
    return {
        **_config(Hostname="<pod>", Image="<sandbox-image>", Labels={
            **_labels(labels, annotations), "io.kubernetes.docker.type": "podsandbox",
            "io.kubernetes.container.name": "POD"}),
        "HostConfig": _host_config(
            {"CpuShares": 2, "CgroupParent": "<cgroup-parent>"},
            NetworkMode="none", PortBindings={}, IpcMode="shareable", OomScoreAdj=-998,
            SecurityOpt=["no-new-privileges"]),
        "NetworkingConfig": None,
    }


def container_create_body(pod: PodShape) -> Json:
    """CreateContainer's create: the container joins the sandbox's namespaces; Memory = MemorySwap (no swap)."""
    labels = {"io.kubernetes.container.name": "<container>", "io.kubernetes.pod.name": "<pod>",
              "io.kubernetes.pod.namespace": "<namespace>", "io.kubernetes.pod.uid": "<uid>"}
    annotations = {"io.kubernetes.container.hash": "1f2e3d4c", "io.kubernetes.container.restartCount": "0",
                   "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                   "io.kubernetes.container.terminationMessagePolicy": "File",
                   "io.kubernetes.pod.terminationGracePeriod": "30"}
    joined = "container:<sandbox-id>"
    return {
        **_config(Env=[f"{key}={value}" for key, value in pod.envs], Healthcheck={"Test": ["NONE"]},
                  Image="<image>", Entrypoint=list(pod.command), Labels={
                      **_labels(labels, annotations), "io.kubernetes.docker.type": "container",
                      "io.kubernetes.container.logpath": f"{pod.log_directory}/<container>/0.log",
                      "io.kubernetes.sandbox.id": "<sandbox-id>"}),
        "HostConfig": _host_config(
            {"CpuShares": pod.cpu_shares, "Memory": pod.memory, "CgroupParent": "<cgroup-parent>",
             "CpuPeriod": pod.cpu_period, "CpuQuota": pod.cpu_quota, "Devices": [], "MemorySwap": pod.memory},
            Binds=list(pod.binds), NetworkMode=joined, RestartPolicy={"Name": "no", "MaximumRetryCount": 0}, IpcMode=joined,
            OomScoreAdj=pod.oom_score_adj, PidMode=joined, SecurityOpt=["seccomp=unconfined"]),
        "NetworkingConfig": None,
    }


def update_body(cpu_shares: int = 0, memory: int = 0, cpu_period: int = 0, cpu_quota: int = 0) -> Json:
    """UpdateContainerResources: the whole UpdateConfig, 0 meaning unchanged."""
    return {**_RESOURCES, "CpuShares": cpu_shares, "Memory": memory, "CpuPeriod": cpu_period,
            "CpuQuota": cpu_quota, "RestartPolicy": {"Name": "", "MaximumRetryCount": 0}}
