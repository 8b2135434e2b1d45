"""koordinator's koordlet (the compiled peer "koordlet", v1.8.0) on a node of rplab.cluster, in hook mode: the proxy
calls it on its runtime hooks, as on a node where koordinator's chart deployed it.

``Koordlet(directory, kubeconfig, node, hook_config_dir)``: ``start()`` returns once koordlet has registered with
the proxy, which it does itself, as its DaemonSet does: after its informers have synced (Node, NodeSLO, NodeMetric,
pods…) it serves its hook socket and writes ``koordlet.json`` (``remote-endpoint`` = its socket, failure policy
``Ignore``, every stage it serves) into ``hook_config_dir``, the proxy's ``--runtime-hook-config-dir``.
``stop()`` stops it and removes that file. Everything it writes lives in ``directory``.

Its host paths are this host's, as the DaemonSet's ``/host-*`` mounts are the node's, with one difference: its
cgroup root is the registered kubelet's private ``cgroupRoot`` (rplab.kubelet_node keeps the kubelet off the host's
cgroups). koordlet finds pods under ``<cgroup root>/<controller>/kubepods``: it runs in a mount namespace of its
own where ``directory/cgroup/<hierarchy>`` is a bind mount of ``<hierarchy>/<cgroupRoot>`` for every hierarchy, so
what it reads and writes (its reconciler writes pod and QoS cgroups directly) is the kubelet's tree and nothing
else. /proc and /sys are the host's (it reads them); its own state (metrics store, audit log) is in ``directory``.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rplab.cluster import ClusterClient
from rplab.cri import CriClient, open_channel
from rplab.images import BUSYBOX_IMAGE
from rplab.kubelet_node import (
    NODE_NAME, KubeletNode, KubeletNodeError, cgroup_hierarchies, wait_until,
)
from rplab.peers import peer_binary
from rplab.process import end_process
from rplab.registry import free_port

PEER = "koordlet"
REGISTRATION = "koordlet.json"  # the file koordlet writes into the proxy's hook directory
START_TIMEOUT_SECONDS = 120.0
# koordinator's pod protocol: the QoS label, the batch resources koord-manager's webhook turns into the
# extended-resource-spec annotation, the label that makes a proxy skip its plugins for a pod.
QOS_LABEL = "koordinator.sh/qosClass"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
SKIP_LABEL = "runtimeproxy.koordinator.sh/skip-hookserver"
# What koord-scheduler annotates an LSR/LSE pod with: the CPUs it allocated (koordlet's cpuset hook applies them).
RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NODE_SLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
# What koord-manager's node resource controller puts in the node's status: the batch resources BE pods request.
BATCH_ALLOCATABLE = {BATCH_CPU: "4000", BATCH_MEMORY: "4Gi"}
# The BE pod's batch resources (koordlet's batch-resource hook makes of them: MilliCPUToShares, MilliCPUToQuota at
# the 100 ms period, the memory limit in bytes).
BE_CPU_MILLI, BE_MEMORY = 500, "256Mi"
OWN_POD = "koordlet"  # koordlet's own pod, as its DaemonSet's: labelled SKIP_LABEL
# koordlet's log line (at -v=5) for each PreUpdateContainerResources call it serves.
UPDATE_RECEIVED = "receive PreUpdateContainerResourcesHook request"


NRI_SOCKET_UNDER_VAR_RUN = "nri/nri.sock"  # koordlet's --runtime-hooks-nri-socket-path default
NRI_PLUGIN = "00-koordlet_nri"  # its NRI plugin, as the runtime names it (index-name)


class KoordletError(RuntimeError):
    pass


STATE_DIRECTORIES = ("tsdb", "audit", "var-run", "run")  # koordlet's own state, under the state directory


def hook_mode_flags(*, cgroup_root: str, kubelet_root: str, socket: str, hook_config_dir: str, read_only_port: int,
                    state: str, nri: bool, metrics_address: str) -> list[str]:
    """koordlet's flags (its kubeconfig: KUBECONFIG, its node: NODE_NAME) on a node whose cgroups are under
    ``cgroup_root`` and whose /proc and /sys are its own, the kubelet's root dir and read-only port, its hook socket
    and the directory it registers into (the proxy's), its own state under ``state`` (STATE_DIRECTORIES)."""
    return [f"--cgroup-root-dir={cgroup_root.rstrip('/')}/", "--proc-root-dir=/proc/", "--sys-root-dir=/sys/",
            "--sys-fs-root-dir=/sys/fs/", f"--var-lib-kubelet-dir={kubelet_root.rstrip('/')}/",
            "--runtime-hooks-network=unix", f"--runtime-hooks-addr={socket}",
            f"--runtime-hooks-host-endpoint={socket}", f"--runtime-hooks-config-path={hook_config_dir}",
            f"--enable-nri-runtime-hook={str(nri).lower()}",
            "--kubelet-insecure-tls", f"--kubelet-read-only-port={read_only_port}",
            "--disable-query-kubelet-config", "--kubelet-preferred-address-type=Hostname",
            f"--tsdb-path={state}/tsdb", f"--audit-log-dir={state}/audit",
            f"--var-run-root-dir={state}/var-run/", f"--run-root-dir={state}/run/",
            # -v=5: it logs each hook call it receives (what a test counts, whichever proxy made it)
            f"--addr={metrics_address}", "--v=5"]


def node_slo(node: str = NODE_NAME) -> dict[str, Any]:
    """The NodeSLO koord-manager writes for a node (its defaults: no thresholds, CFS quota on for BE pods)."""
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
            "spec": {"resourceUsedThresholdWithBE": {"enable": False},
                     "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": False}}}}}


def batch_resources(cpu_milli: int, memory: str) -> dict[str, Any]:
    """A container's batch requests and limits (equal, as for any extended resource), for its ``resources``."""
    amounts = {BATCH_CPU: str(cpu_milli), BATCH_MEMORY: memory}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def extended_resource_spec(containers: dict[str, dict[str, Any]]) -> str:
    """The annotation koord-manager's webhook writes on a BE pod: each container's batch requests and limits."""
    return json.dumps({"containers": containers}, separators=(",", ":"))


def sleeper(name: str, labels: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A host-network pod (the node has no CNI) of one busybox container that sleeps, bound to the node."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": {"nodeName": NODE_NAME, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"], "resources": resources or {}}]}}


def be_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A BE pod as koord-manager's webhook leaves it: the QoS label, batch resources, their annotation."""
    resources = batch_resources(BE_CPU_MILLI, BE_MEMORY)
    return sleeper(name, labels={QOS_LABEL: "BE", **(labels or {})}, resources=resources,
                   annotations={EXTENDED_RESOURCE_SPEC: extended_resource_spec({"main": resources})})


def lsr_pod(name: str, cpuset: str, cpu: str = "1") -> dict[str, Any]:
    """An LSR pod (Guaranteed, ``cpu`` CPUs) with the cpuset koord-scheduler's resource-status annotation gives it."""
    amounts = {"cpu": cpu, "memory": "64Mi"}
    return sleeper(name, labels={QOS_LABEL: "LSR"}, resources={"requests": amounts, "limits": amounts},
                   annotations={RESOURCE_STATUS: json.dumps({"cpuset": cpuset})})


def resize(cpu: str) -> dict[str, Any]:
    """The patch of a pod's ``resize`` subresource giving its container ``cpu`` CPUs (requests and limits)."""
    amounts = {"cpu": cpu, "memory": "64Mi"}
    return {"spec": {"containers": [{"name": "main", "resources": {"requests": amounts, "limits": amounts}}]}}


def koord_manager_writes(client: ClusterClient, node: str = NODE_NAME) -> None:
    """What koord-manager would have written for the node before koordlet starts: its NodeSLO, the batch resources
    in its status."""
    if not client.exists(f"{NODE_SLOS}/{node}"):
        client.create(NODE_SLOS, node_slo(node))
    client.patch(f"/api/v1/nodes/{node}/status",
                 {"status": {"capacity": BATCH_ALLOCATABLE, "allocatable": BATCH_ALLOCATABLE}})


def container_spec(runtime: Path | str, pod: dict[str, Any]) -> dict[str, Any]:
    """The OCI spec of the pod's (first) container, as the runtime (a CRI socket) holds it."""
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    client = CriClient(open_channel(runtime))
    with client.channel:
        info = client.container_status(container_id, verbose=True).info["info"]
    spec: dict[str, Any] = json.loads(info)["runtimeSpec"]
    return spec


@dataclass
class Koordlet:
    """koordlet for ``node`` (a KubeletNode registered with the cluster of ``kubeconfig``): in hook mode, or with
    ``nri_socket`` in NRI mode (its plugin koordlet_nri, index 00, on that socket, which koordlet finds under its
    --var-run-root-dir as nri/nri.sock: a link to it is put there). In NRI mode its hook server still runs and
    writes its registration into ``hook_config_dir``: give it a directory no proxy reads, as a node without
    koord-runtime-proxy has."""

    directory: Path
    kubeconfig: Path
    node: KubeletNode
    hook_config_dir: Path
    binary: Path | None = None
    nri_socket: Path | None = None
    started_at: float = 0.0
    ready_seconds: float = 0.0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).absolute()

    @property
    def socket(self) -> Path:
        return self.directory / "koordlet.sock"

    @property
    def cgroup_view(self) -> Path:
        return self.directory / "cgroup"

    @property
    def log_path(self) -> Path:
        return self.directory / "koordlet.log"

    @property
    def registration(self) -> Path:
        return self.hook_config_dir / REGISTRATION

    def _prepare_cgroup_view(self) -> list[tuple[Path, Path]]:
        """The mount points of the cgroup view (the kubelet's cgroupRoot of each hierarchy), and the host's
        controller aliases (``cpu`` -> ``cpu,cpuacct``) as symlinks beside them."""
        self.cgroup_view.mkdir(parents=True, exist_ok=True)
        binds = []
        for hierarchy in cgroup_hierarchies():
            if hierarchy.parent != CGROUP_ROOT:
                continue
            target = self.cgroup_view / hierarchy.name
            target.mkdir(exist_ok=True)
            binds.append((hierarchy / self.node.cgroup_root.lstrip("/"), target))
        for entry in CGROUP_ROOT.iterdir():
            alias = self.cgroup_view / entry.name
            if entry.is_symlink() and not alias.is_symlink():
                alias.symlink_to(os.readlink(entry))
        return binds

    def _namespace_script(self, binds: list[tuple[Path, Path]]) -> str:
        """The cgroup view's bind mounts, and a hosts file naming the node: koordlet reaches the kubelet at the
        Node's Hostname address, the kubelet listens on loopback only."""
        hosts = self.directory / "hosts"
        hosts.write_text(f"127.0.0.1 localhost {NODE_NAME}\n::1 localhost\n")
        lines = ["set -e", *(f"mount --bind '{source}' '{target}'" for source, target in binds),
                 f"mount --bind '{hosts}' /etc/hosts", 'exec "$@"', ""]
        return "\n".join(lines)

    def argv(self, binds: list[tuple[Path, Path]]) -> list[str]:
        binary = self.binary or peer_binary(PEER)
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", self._namespace_script(binds),
                "sh", str(binary), *hook_mode_flags(
                    cgroup_root=str(self.cgroup_view), kubelet_root=str(self.node.directory / "root"),
                    socket=str(self.socket), hook_config_dir=str(self.hook_config_dir),
                    read_only_port=self.node.read_only_port, state=str(self.directory / "state"),
                    nri=self.nri_socket is not None, metrics_address=f"127.0.0.1:{free_port()}")]

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Starts koordlet; returns once it has written its registration into the proxy's hook directory."""
        for directory in STATE_DIRECTORIES:
            (self.directory / "state" / directory).mkdir(parents=True, exist_ok=True)
        if self.nri_socket is not None:  # koordlet dials <var-run-root-dir>/nri/nri.sock
            link = self.directory / "state" / "var-run" / NRI_SOCKET_UNDER_VAR_RUN
            link.parent.mkdir(exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(self.nri_socket)
        self.hook_config_dir.mkdir(parents=True, exist_ok=True)
        argv = self.argv(self._prepare_cgroup_view())
        environment = {**os.environ, "NODE_NAME": NODE_NAME, "KUBECONFIG": str(self.kubeconfig)}
        self.started_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             env=environment, start_new_session=True)
        try:
            wait_until(self._registered, timeout, f"koordlet's {REGISTRATION}", interval=0.5)
        except KubeletNodeError as error:
            self.stop()
            raise KoordletError(f"{error}\n{self.log_tail(problems_only=True)}") from error
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = round(time.monotonic() - self.started_at, 1)

    def _registered(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            code = self._process.returncode if self._process else None
            raise KoordletError(f"koordlet exited with {code}\n{self.log_tail()}")
        return self.registration.exists() and serving(self.socket)

    def stop(self) -> None:
        """Stops koordlet (its hook socket goes with it) and removes its registration."""
        process, self._process = self._process, None
        if process is not None:
            end_process(process, 15)
        self.registration.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, as a crash: its registration stays in the proxy's directory, its socket stops answering."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def registered_hooks(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.registration.read_text())
        return loaded

    def log_count(self, text: str) -> int:
        """How often ``text`` stands in its log (kept across its restarts)."""
        try:
            return self.log_path.read_text(errors="replace").count(text)
        except OSError:
            return 0

    def log_tail(self, lines: int = 30, problems_only: bool = False) -> str:
        """The log's last ``lines`` (klog's warnings, errors and fatals only: its info lines run to thousands)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no koordlet log)"
        kept = text.splitlines()
        if problems_only:  # the first of each warning, error or fatal (by its source line): they repeat
            seen: set[str] = set()
            kept = [line for line in kept if line[:1] in "WEF" and not _seen(line, seen)]
        return "koordlet log tail:\n" + "\n".join(kept[-lines:])


def serving(path: Path) -> bool:
    """Whether a unix socket at ``path`` accepts a connection (a file left by a killed server does not)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def _seen(line: str, seen: set[str]) -> bool:
    """Whether a klog line's source (``file.go:NN]``) was seen already; remembers it."""
    source = line.split("]", 1)[0].rsplit(" ", 1)[-1]
    found = source in seen
    seen.add(source)
    return found


def cgroup_file(cgroups_path: str, controller: str, name: str) -> str:
    """A cgroup v1 file of a container (its OCI spec's ``linux.cgroupsPath``, cgroupfs driver)."""
    path = CGROUP_ROOT / controller / cgroups_path.lstrip("/") / name
    try:
        return path.read_text().strip()
    except OSError as error:
        raise KoordletError(f"cannot read {path}: {error}") from error


def container_cgroup_values(cgroups_path: str) -> dict[str, int]:
    """The CFS quota and period, CPU shares and memory limit in the cgroup v1 files of a container."""
    files = {"cpu.cfs_quota_us": "cpu", "cpu.cfs_period_us": "cpu", "cpu.shares": "cpu",
             "memory.limit_in_bytes": "memory"}
    return {name: int(cgroup_file(cgroups_path, controller, name)) for name, controller in files.items()}



# koordlet's hooks that need more of the kernel or the machine than cgroups: each, and how to tell it is there.
KERNEL_HOOKS = ("group identity", "core scheduling", "resctrl", "GPU env")
_PR_SCHED_CORE, _PR_SCHED_CORE_GET = 62, 0  # prctl(2): EINVAL where the kernel lacks CONFIG_SCHED_CORE


def _core_scheduling() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    cookie = ctypes.c_ulonglong(0)
    return bool(libc.prctl(_PR_SCHED_CORE, _PR_SCHED_CORE_GET, 0, 0, ctypes.byref(cookie)) == 0)


# What is missing when the machine lacks what a KERNEL_HOOKS entry needs.
MISSING_FOR_HOOK = {
    "group identity": ("no cpu.bvt_warp_ns nor kernel.sched_group_identity_enabled: a kernel without Alibaba Cloud "
                       "Linux's group identity patches"),
    "core scheduling": ("a kernel without CONFIG_SCHED_CORE (prctl(PR_SCHED_CORE) refused, no kernel.sched_core, or "
                        "the kernel's config says so)"),
    "resctrl": ("no resctrl filesystem: no Intel RDT or AMD PQoS exposed to the machine, or a kernel without "
                "CONFIG_X86_CPU_RESCTRL"),
    "GPU env": "no GPU (/dev/nvidia*), nor a device plugin allocating one",
}
# The same checks as a node's shell runs them (a guest's): one `hook=0|1` line each. Core scheduling from the
# kernel's config (a shell has no prctl); group identity's file in the kubelet's slice too (cgroup v2 has no
# per-controller tree).
KERNEL_PROBE_SCRIPT = "\n".join(f"if {test}; then echo '{hook}=1'; else echo '{hook}=0'; fi" for hook, test in (
    ("group identity", "ls /sys/fs/cgroup/cpu/cpu.bvt_warp_ns /sys/fs/cgroup/cpu.bvt_warp_ns "
                       "/sys/fs/cgroup/kubepods.slice/cpu.bvt_warp_ns /proc/sys/kernel/sched_group_identity_enabled "
                       "2>/dev/null | grep -q ."),  # ls lists those there are
    ("core scheduling", "[ -e /proc/sys/kernel/sched_core ] || grep -qx CONFIG_SCHED_CORE=y /boot/config-$(uname -r)"),
    ("resctrl", "grep -qw resctrl /proc/filesystems"),
    ("GPU env", "ls /dev/nvidia[0-9]* 2>/dev/null | grep -q ."),
))


def missing_kernel_hooks(present: dict[str, bool]) -> dict[str, str]:
    """The KERNEL_HOOKS the machine gives nothing to act on (``present[hook]`` false or absent), each with what is
    missing."""
    return {hook: MISSING_FOR_HOOK[hook] for hook in KERNEL_HOOKS if not present.get(hook)}


def parse_kernel_probe(output: str) -> dict[str, bool]:
    """KERNEL_PROBE_SCRIPT's output: {hook: present}."""
    found = {}
    for line in output.splitlines():
        hook, equals, value = line.rpartition("=")
        if equals and hook in KERNEL_HOOKS:
            found[hook] = value.strip() == "1"
    return found


def hooks_without_kernel_support(cgroup_root: Path = CGROUP_ROOT, proc: Path = Path("/proc"),
                                 dev: Path = Path("/dev")) -> dict[str, str]:
    """The KERNEL_HOOKS this machine gives nothing to act on, each with what is missing (what koordlet's own
    checks find missing before they skip the hook)."""
    filesystems = (proc / "filesystems").read_text() if (proc / "filesystems").exists() else ""
    return missing_kernel_hooks({
        "group identity": (cgroup_root / "cpu" / "cpu.bvt_warp_ns").exists()
        or (proc / "sys/kernel/sched_group_identity_enabled").exists(),
        "core scheduling": (proc / "sys/kernel/sched_core").exists() or _core_scheduling(),
        "resctrl": "resctrl" in filesystems.split(),
        "GPU env": any(dev.glob("nvidia[0-9]*")),
    })
