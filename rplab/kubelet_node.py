"""A standalone kubelet process (``k8s.io/kubernetes/cmd/kubelet``, the compiled peer "kubelet") running static pods
against a CRI endpoint (containerd's socket, or a proxy's), with no API server; and the check that it left the
host as it found it.

Not to be confused with rplab.kubelet, which drives the kubelet's CRI client library: this is the kubelet itself,
with its pod workers, PLEG relist, probes, restarts and garbage collection.

``KubeletNode(endpoint, directory)``: ``start()``, ``write_pod(manifest)`` / ``remove_pod(name)`` (static pod
manifests), ``pods()`` (its read-only port's ``/pods``), ``stop()`` (every static pod removed and waited for, the
kubelet stopped, what is left of its pods removed from the runtime, its cgroups removed) and ``host_changes()``
(what differs from the host as found: empty when nothing does). Everything it writes lives in ``directory``.

Even standalone the kubelet changes the host; how each change is kept off it:
- sysctls it sets with no opt-out (``vm.overcommit_memory=1``, ``kernel.panic=10``, ``kernel.panic_on_oops=1``,
  ``vm.panic_on_oom``, ``kernel.keys.root_max*``), the bind mount of its root dir onto itself, and the paths it
  writes whatever its flags (``/var/lib/kubelet/device-plugins``, ``/var/log/containers``): it runs in a mount
  namespace of its own (``unshare -m``), where each sysctl file is a file of ours bind-mounted over it and
  ``/var/lib`` and ``/var/log`` are overlays whose upper layers are ours. All of it ends with the process; what it
  wrote is in ``written_sysctls()`` and under ``directory/overlay``. (A sysctl found changed on the host all the
  same is written back by ``stop()``, which reports it.)
- iptables chains: its PATH has no ``iptables``.
- cgroups: a private ``cgroupRoot`` made first in every hierarchy and removed last (the kubelet deletes pod cgroups
  it does not know inside its tree: it never gets the suite's).
- ``/usr/libexec/kubernetes``, ``/var/log/pods``, certificates: ``volumePluginDir``, ``podLogsDir``, ``--cert-dir``.
- the runtime's pods: the kubelet stops its pods but leaves them to its garbage collector; ``stop()`` removes them
  through CRI (those labelled ``NODE_LABEL`` with this node's id, a label ``write_pod`` adds).

The kubelet owns its runtime: it stops and removes every pod it does not know, so ``start()`` refuses a runtime that
holds pods of others (give it a runtime no other test, and no cluster's kubelet, uses).

Its command line, a node's worth of static pods through a given socket, is rplab.kubelet_pods's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc

from rplab.consumer_modules import KUBERNETES_VERSION, NEWEST_KUBERNETES_VERSION
from rplab.cri import CriClient, open_channel
from rplab.peers import peer_binary
from rplab.process import end_process
from rplab.registry import free_port

PEER = "kubelet"
KUBELET_VERSION = KUBERNETES_VERSION
# The newest release's kubelet (refuses cgroup v1 unless told not to; run where it runs: the cgroup v2 guest).
NEWEST_PEER = "kubelet-newest"
NEWEST_KUBELET_VERSION = NEWEST_KUBERNETES_VERSION
VERSIONS = {PEER: KUBELET_VERSION, NEWEST_PEER: NEWEST_KUBELET_VERSION}
NODE_NAME = "rplab-node"  # static pods are named <manifest name>-<node name>
NODE_LABEL = "rplab.kubelet-node"  # every pod write_pod writes: this node's id, to find its pods in the runtime
# Every sysctl the kubelet's container manager sets when it differs (setupKernelTunables, no opt-out).
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
# Host directories the kubelet writes under whatever its flags say: overlays of ours in its namespace.
OVERLAID = (Path("/var/lib"), Path("/var/log"))
# Where a kubelet leaves files on a host: checked before and after.
KNOWN_PATHS = (Path("/var/lib/kubelet"), Path("/var/log/containers"), Path("/var/log/pods"),
               Path("/usr/libexec/kubernetes"), Path("/etc/kubernetes"), Path("/run/kubernetes"))
IPTABLES_SAVE = ("iptables-save", "ip6tables-save")
MAX_LISTED = 2000  # entries listed per known path (a host's /var/lib/kubelet may be big)
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 60.0
CGROUP_REMOVE_SECONDS = 15.0

T = TypeVar("T")


class KubeletNodeError(RuntimeError):
    pass


# -- the host as found --------------------------------------------------------------------------------------


def cgroup_hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, named ones, the v2 unified one)."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fstype in ("cgroup", "cgroup2"):
                found.append(Path(fields[4]))
    return found


def mount_points(prefixes: tuple[Path, ...]) -> set[str]:
    """Mount points of this mount namespace at or under any of ``prefixes``."""
    points = set()
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].encode("utf-8", "surrogateescape").decode("unicode_escape")
            if any(point == str(p) or point.startswith(f"{p}/") for p in prefixes):
                points.add(point)
    return points


def kube_chains() -> set[str]:
    """``table:chain`` of every iptables/ip6tables chain named KUBE-* (none where iptables is not installed)."""
    chains = set()
    for command in IPTABLES_SAVE:
        binary = shutil.which(command, path="/usr/sbin:/sbin:/usr/bin:/bin")
        if binary is None:
            continue
        saved = subprocess.run([binary], capture_output=True, text=True, timeout=30, check=False).stdout
        table = ""
        for line in saved.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":KUBE-"):
                chains.add(f"{command.split('-')[0]} {table}:{line[1:].split()[0]}")
    return chains


def listing(path: Path) -> list[str] | None:
    """Paths under ``path`` (relative, sorted; at most MAX_LISTED), or None when it does not exist."""
    if not path.exists() and not path.is_symlink():
        return None
    entries: list[str] = []
    for root, directories, files in os.walk(path):
        for name in [*directories, *files]:
            entries.append(os.path.relpath(os.path.join(root, name), path))
        if len(entries) >= MAX_LISTED:
            break
    return sorted(entries)[:MAX_LISTED]


def read_sysctls() -> dict[str, str]:
    return {name: (Path("/proc/sys") / name).read_text().strip() for name in SYSCTLS}


@dataclass(frozen=True)
class HostState:
    """What a kubelet could change on the host: sysctls, KUBE-* chains, mounts, cgroups, files in known places."""

    sysctls: dict[str, str]
    chains: set[str]
    mounts: set[str]
    cgroups: set[str]
    files: dict[str, list[str] | None]

    @classmethod
    def now(cls, directory: Path, cgroup_root: str) -> HostState:
        watched = (directory, *OVERLAID, *KNOWN_PATHS, Path("/proc/sys"))
        cgroups = {str(h) for h in cgroup_hierarchies() if (h / cgroup_root.lstrip("/")).exists()}
        return cls(read_sysctls(), kube_chains(), mount_points(watched), cgroups,
                   {str(path): listing(path) for path in KNOWN_PATHS})

    def changes_to(self, later: HostState) -> list[str]:
        """One line per difference from this state to ``later``."""
        found = [f"sysctl {name}: {value} -> {later.sysctls[name]}"
                 for name, value in self.sysctls.items() if later.sysctls[name] != value]
        found += [f"new iptables chain {chain}" for chain in sorted(later.chains - self.chains)]
        found += [f"new mount {point}" for point in sorted(later.mounts - self.mounts)]
        found += [f"cgroup left in {hierarchy}" for hierarchy in sorted(later.cgroups - self.cgroups)]
        for path, before in self.files.items():
            after = later.files[path]
            if before is None and after is not None:
                found.append(f"new path {path}")
            elif before is not None and after is not None and set(after) - set(before):
                found.append(f"new files in {path}: {sorted(set(after) - set(before))[:10]}")
        return found


# -- the kubelet ----------------------------------------------------------------------------------------------


def path_without_iptables() -> str:
    """This process's PATH without the directories that hold iptables (the kubelet then adds no chains)."""
    directories = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":")
    kept = [d for d in directories if d and not any(Path(d, name).exists() for name in ("iptables", "ip6tables"))]
    return ":".join(kept)


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """``condition()``'s first true answer within ``timeout`` seconds; KubeletNodeError naming ``what`` if none."""
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise KubeletNodeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class KubeletNode:
    """The kubelet, standalone, on ``endpoint`` (a CRI unix socket path), everything of it in ``directory``, with
    the cgroupfs driver (a node without systemd as PID 1, as these machines are)."""

    endpoint: Path
    directory: Path
    binary: Path | None = None
    peer: str = PEER  # which kubelet, when no binary is given: PEER or NEWEST_PEER
    # A kubeconfig (rplab.cluster's node user): the kubelet registers as NODE_NAME with that API server and runs
    # the pods bound to it besides its static pods. None: standalone.
    kubeconfig: Path | None = None
    node_id: str = ""
    read_only_port: int = 0
    started_at: float = 0.0
    http_timeout: float = 10.0  # seconds for an answer of its read-only port (an emulated node needs more)
    host_before: HostState | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def version(self) -> str:
        return VERSIONS[self.peer]

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).absolute()
        for overlaid in OVERLAID:
            if self.directory.is_relative_to(overlaid):
                raise KubeletNodeError(f"{self.directory} is under {overlaid}, which the kubelet sees as an overlay "
                                       "of its own: give it a directory elsewhere (e.g. under /tmp)")
        # The directory's name (as much of it as a label value takes) and a digest of its path: two nodes in
        # directories of the same name (two tests, two helpers) never share a cgroupRoot or a pod label.
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", self.directory.name)[:40].strip("-_.") or "node"
        self.node_id = self.node_id or f"{name}-{hashlib.sha256(bytes(self.directory)).hexdigest()[:6]}"

    # -- paths -----------------------------------------------------------------------------------------------

    @property
    def manifests(self) -> Path:
        return self.directory / "manifests"

    @property
    def log_path(self) -> Path:
        return self.directory / "kubelet.log"

    @property
    def cgroup_root(self) -> str:
        return f"/rplab-kubelet-{self.node_id}"

    def _sysctl_mask(self, name: str) -> Path:
        return self.directory / "sysctl" / name.replace("/", ".")

    # -- configuration ---------------------------------------------------------------------------------------

    def config(self, port: int) -> dict[str, Any]:
        """The KubeletConfiguration (v1beta1; JSON is YAML)."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "staticPodPath": str(self.manifests),
            "containerRuntimeEndpoint": f"unix://{self.endpoint}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "failCgroupV1": False,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "address": "127.0.0.1",
            "port": port,
            "readOnlyPort": self.read_only_port,
            "healthzPort": 0,  # /healthz is on the read-only port too; 10248 may be another kubelet's
            "podLogsDir": str(self.directory / "pod-logs"),
            "volumePluginDir": str(self.directory / "volume-plugins"),
            # The lab's images are imported, never pulled: no image garbage collection, no eviction.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {},
            "oomScoreAdj": 0,  # -999 needs CAP_SYS_RESOURCE, which root lacks here
            "fileCheckFrequency": "2s",
        }

    def _namespace_script(self) -> str:
        """What runs in the kubelet's mount namespace before it: the sysctl masks and the overlays."""
        lines = ["set -e"]
        for name in SYSCTLS:
            lines.append(f"mount --bind '{self._sysctl_mask(name)}' '/proc/sys/{name}'")
        for overlaid in OVERLAID:
            layers = self.directory / "overlay" / overlaid.name
            lines.append(f"mount -t overlay overlay -o 'lowerdir={overlaid},upperdir={layers}/upper,"
                         f"workdir={layers}/work' '{overlaid}'")
        return "\n".join([*lines, 'exec "$@"', ""])

    def argv(self) -> list[str]:
        binary = self.binary or peer_binary(self.peer)
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", self._namespace_script(), "sh",
                str(binary), f"--config={self.directory / 'kubelet.json'}", f"--root-dir={self.directory / 'root'}",
                f"--cert-dir={self.directory / 'pki'}", f"--hostname-override={NODE_NAME}", *self._node_flags(),
                "--v=2"]

    def _node_flags(self) -> list[str]:
        """Registered: its kubeconfig, and the host's own address as the node's (a loopback node IP fails the
        kubelet's validation, which leaves the Node with no addresses at all). Standalone: loopback."""
        return [f"--kubeconfig={self.kubeconfig}"] if self.kubeconfig else ["--node-ip=127.0.0.1"]

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Make its directories and cgroups, then start it; returns once its read-only port answers /healthz.
        Refuses a runtime that holds pods of others: the kubelet would stop and remove them."""
        self._refuse_foreign_pods()
        for directory in ("manifests", "root", "pki", "pod-logs", "volume-plugins", "sysctl"):
            (self.directory / directory).mkdir(parents=True, exist_ok=True)
        for overlaid in OVERLAID:
            for layer in ("upper", "work"):
                (self.directory / "overlay" / overlaid.name / layer).mkdir(parents=True, exist_ok=True)
        self.host_before = HostState.now(self.directory, self.cgroup_root)
        for name, value in self.host_before.sysctls.items():
            self._sysctl_mask(name).write_text(value + "\n")
        self._make_cgroup_root()
        self.read_only_port = free_port()
        (self.directory / "kubelet.json").write_text(json.dumps(self.config(free_port()), indent=1))
        environment = {**os.environ, "PATH": path_without_iptables()}
        self.started_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             env=environment, start_new_session=True)
        try:
            wait_until(self._healthy, timeout, f"the kubelet's /healthz (its log: {self.log_path})")
        except BaseException:
            self._terminate()
            raise

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _check_running(self) -> None:
        if self._process is None or self._process.poll() is not None:
            code = self._process.returncode if self._process else None
            raise KubeletNodeError(f"the kubelet exited with {code}\n{self.log_tail()}")

    def _healthy(self) -> bool:
        self._check_running()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.read_only_port}/healthz", timeout=5) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Every static pod removed and waited for, the kubelet stopped, its pods removed from the runtime, its
        cgroups removed. Safe to call twice, or after a failed start."""
        problems = []
        if self.running:
            self._remove_manifests()
            try:
                wait_until(lambda: not self.pods() and not self._running_sandboxes(), timeout,
                           "the kubelet to stop its pods")
            except KubeletNodeError as error:
                problems.append(str(error).split("\n")[0])
        self._terminate()
        try:
            self._remove_runtime_pods()
        except grpc.RpcError as error:
            problems.append(f"removing the node's pods from the runtime: {error.code().name} {error.details()}")
        problems += self._tidy_host()
        if problems:
            raise KubeletNodeError("; ".join(problems) + f"\n{self.log_tail()}")

    def _remove_manifests(self) -> None:
        for manifest in self.manifests.glob("*.json"):
            manifest.unlink()

    def _tidy_host(self) -> list[str]:
        """What is left on the host once the kubelet has stopped, removed; one line per problem."""
        return self._remove_cgroup_root() + self._restore_sysctls()

    def _restore_sysctls(self) -> list[str]:
        """Writes back any sysctl that differs from the host's before ``start()`` (its namespace's masks keep the
        kubelet's writes off the host: a difference is a bug, or another program's doing, and is reported)."""
        if self.host_before is None:
            return []
        restored = []
        for name, value in read_sysctls().items():
            if value != self.host_before.sysctls[name]:
                (Path("/proc/sys") / name).write_text(self.host_before.sysctls[name])
                restored.append(f"sysctl {name} was {value} on the host: restored to {self.host_before.sysctls[name]}")
        return restored

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            end_process(process, 15)

    def __enter__(self) -> KubeletNode:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- static pods -----------------------------------------------------------------------------------------

    def write_pod(self, manifest: dict[str, Any]) -> Path:
        """Writes a static pod manifest (labelled with this node's id), at once: the kubelet never reads half."""
        name, text = self.labelled(manifest)
        partial = self.manifests / f".{name}.partial"  # the kubelet skips names starting with a dot
        partial.write_text(text)
        return partial.replace(self.manifests / f"{name}.json")

    def labelled(self, manifest: dict[str, Any]) -> tuple[str, str]:
        """A manifest's name, and its text with this node's label added."""
        labelled = json.loads(json.dumps(manifest))
        labelled["metadata"].setdefault("labels", {})[NODE_LABEL] = self.node_id
        return labelled["metadata"]["name"], json.dumps(labelled, indent=1)

    def remove_pod(self, name: str) -> None:
        (self.manifests / f"{name}.json").unlink()

    def pods(self) -> list[dict[str, Any]]:
        """The kubelet's pods with their status, from its read-only port's /pods."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.read_only_port}/pods", timeout=self.http_timeout) as answer:
                return list(json.load(answer).get("items") or [])
        except OSError as error:  # URLError is one
            raise KubeletNodeError(f"the kubelet's /pods did not answer ({error})\n{self.log_tail()}") from error

    def relists(self) -> int:
        """How many times the kubelet has relisted its runtime's pods (PLEG, once a second), from its metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.read_only_port}/metrics", timeout=self.http_timeout) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("kubelet_pleg_relist_duration_seconds_count "):
                    return int(float(line.split()[1]))
        raise KubeletNodeError("the kubelet's metrics have no kubelet_pleg_relist_duration_seconds_count")

    def pod_names(self) -> dict[str, dict[str, Any]]:
        """``pods()`` by manifest name (the kubelet names a static pod ``<name>-<node>``)."""
        return {pod["metadata"]["name"].removesuffix(f"-{NODE_NAME}"): pod for pod in self.pods()}

    # -- the runtime side ------------------------------------------------------------------------------------

    def runtime(self) -> CriClient:
        return CriClient(open_channel(self.endpoint))

    def sandboxes(self, client: CriClient) -> list[Any]:
        """This node's pod sandboxes in the runtime (ListPodSandbox by NODE_LABEL)."""
        api = client.api
        selector = api.PodSandboxFilter(label_selector={NODE_LABEL: self.node_id})
        return list(client.runtime.ListPodSandbox(api.ListPodSandboxRequest(filter=selector), timeout=30).items)

    def _refuse_foreign_pods(self) -> None:
        client = self.runtime()
        with client.channel:
            others = [s.metadata for s in client.runtime.ListPodSandbox(client.api.ListPodSandboxRequest(),
                                                                        timeout=30).items
                      if s.labels.get(NODE_LABEL) != self.node_id]
        if others:
            names = ", ".join(f"{m.namespace}/{m.name}" for m in others[:5])
            raise KubeletNodeError(f"the runtime at {self.endpoint} holds {len(others)} pod(s) of others ({names}): "
                                   "the kubelet stops and removes every pod it does not know; give it a runtime of its "
                                   "own (a private containerd, or a proxy in front of one)")

    def _running_sandboxes(self) -> list[Any]:
        client = self.runtime()
        with client.channel:
            return [s for s in self.sandboxes(client) if s.state == client.api.SANDBOX_READY]

    def _remove_runtime_pods(self) -> None:
        client = self.runtime()
        with client.channel:
            for sandbox in self.sandboxes(client):
                try:
                    client.stop_pod(sandbox.id)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                client.remove_pod(sandbox.id)

    # -- cgroups ---------------------------------------------------------------------------------------------

    def _make_cgroup_root(self) -> None:
        """The cgroupRoot in every hierarchy (the kubelet refuses to start otherwise); a new cpuset cgroup gets
        its parent's CPUs and memory nodes, as cgroup v1 leaves it empty."""
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (path / name).exists() and not (path / name).read_text().strip():
                    (path / name).write_text((hierarchy / name).read_text())

    def has_pod_cgroup(self, uid: str) -> bool:
        """Whether the pod's cgroup (``.../pod<uid>``) is still there: the kubelet removes it last when it has
        finished a pod."""
        root = cgroup_hierarchies()[0] / self.cgroup_root.lstrip("/")
        return any(directory.endswith(f"/pod{uid}") for directory, _, _ in os.walk(root))

    def _remove_cgroup_root(self) -> list[str]:
        """Removes the cgroupRoot tree in every hierarchy, deepest first (retrying while runc tidies up)."""
        left = []
        for hierarchy in cgroup_hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            try:
                wait_until(lambda: _remove_tree(root), CGROUP_REMOVE_SECONDS, f"{root} to empty", interval=0.5)
            except KubeletNodeError as error:
                left.append(str(error))
        return left

    # -- what it did to the host -----------------------------------------------------------------------------

    def host_changes(self) -> list[str]:
        """What differs on the host from before ``start()`` (empty when it is as found)."""
        if self.host_before is None:
            return []
        return self.host_before.changes_to(HostState.now(self.directory, self.cgroup_root))

    def written_sysctls(self) -> dict[str, str]:
        """The sysctls the kubelet set (in its namespace's masks) that differ from the host's."""
        if self.host_before is None:
            return {}
        written = {name: self._sysctl_mask(name).read_text().strip() for name in SYSCTLS}
        return {name: value for name, value in written.items() if value != self.host_before.sysctls[name]}

    def overlay_writes(self) -> list[str]:
        """What the kubelet wrote under the overlaid host directories (``/var/lib/kubelet/device-plugins``, ...)."""
        written = []
        for overlaid in OVERLAID:
            upper = self.directory / "overlay" / overlaid.name / "upper"
            written += [str(overlaid / entry) for entry in listing(upper) or []]
        return written

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no kubelet log)"
        return "kubelet log tail:\n" + "\n".join(text.splitlines()[-lines:])


def _remove_tree(root: Path) -> bool:
    """rmdir of ``root`` and every cgroup under it, deepest first; True once it is gone."""
    if not root.exists():
        return True
    for directory, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        try:
            os.rmdir(directory)
        except OSError:
            pass
    return not root.exists()


@dataclass(frozen=True)
class KubeletErrors:
    """What the kubelet's log lines say went wrong with its runtime: CRI calls that failed `Unavailable` (refused or
    cut off), CRI calls that failed at all, and probes that failed or errored."""

    unavailable: int
    cri_errors: int
    probe_failures: int

    @classmethod
    def of(cls, lines: Iterable[str]) -> KubeletErrors:
        unavailable = cri_errors = probe_failures = 0
        for line in lines:
            unavailable += "code = Unavailable" in line
            cri_errors += "rpc error: code =" in line
            probe_failures += '"Probe failed"' in line or '"Probe errored"' in line
        return cls(unavailable, cri_errors, probe_failures)


def seconds_since(start: float) -> float:
    return round(time.monotonic() - start, 1)
