"""koordlet v1.8.0 through the proxy on the cgroup v2 + systemd node, by hand (issue 37's last piece; not in CI: the
emulated guest takes minutes where the host's suite takes seconds). It prints a figures table for docs/koordlet.md.

What runs where:
- on this machine: the small cluster (rplab.cluster: etcd, kube-apiserver v1.35.8, koordinator's CRDs) and a socat
  from the guest's host socket (``Guest.host_socket``) to the API server's port;
- in the guest (rplab.guest: Debian 12, systemd, cgroup v2, containerd 1.6 with the systemd driver): a socat on
  127.0.0.1:GUEST_API_PORT to that host socket (the API server is https://127.0.0.1:6443 there, an address its
  certificate names), the proxy from the .deb as a service with its socket units (rplab.node_ops.ProxyService),
  the kubelet v1.35.8 (rplab.guest_kubelet, the systemd driver) on the proxy's socket registered as the node, and
  koordlet v1.8.0 (a transient systemd service; its one library beyond libc, libpfm4, copied from this Debian 12
  machine) on the guest's real /proc, /sys and /sys/fs/cgroup, registering into the proxy's
  /etc/runtime/hookserver.d as its chart does.

Then the host suite's scenarios (tests/e2e/test_koordlet.py), each container's cgroup v2 files read in the guest:
a BE pod, the same with the skip label, an LSR pod with koord-scheduler's cpuset and its in-place resize, a BE pod
while koordlet is killed and its reconciler once it is back. With ``--reference`` they run again through
koordinator's koord-runtime-proxy v1.8.0 in the guest, on the same socket, in place of the service (the kubelet
and koordlet stay). The guest is thrown away at the end; on this machine the cluster and the socat end, and the
run checks that the host is as found (rplab.kubelet_node.HostState).

    python -m rplab.guest_koordlet [--deb DEB] [--keep DIR] [--reference]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rplab.cgroup_v2 import CGROUP_ROOT, CONTAINER_FILES, container_files, from_v1, scope_path
from rplab.cluster import SmallCluster
from rplab.guest import KUBELET_PORT, Guest, running_guest
from rplab.guest_kubelet import GuestKubeletNode, forward_to_host
from rplab.images import IMAGE_CACHE
from rplab.koord_proxy import PEER as REFERENCE, KoordProxyProcess
from rplab.koordlet import (
    KERNEL_HOOKS, KERNEL_PROBE_SCRIPT, OWN_POD, PEER as KOORDLET_PEER, REGISTRATION, SKIP_LABEL, STATE_DIRECTORIES,
    UPDATE_RECEIVED, KoordletError, be_pod, container_spec, hook_mode_flags, koord_manager_writes, lsr_pod,
    missing_kernel_hooks, parse_kernel_probe, resize, sleeper,
)
from rplab.kubelet_node import NODE_NAME, PEER as KUBELET_PEER, HostState, KubeletNodeError, wait_until
from rplab.node_ops import CONTAINERD_SOCKET, PROXY_SOCKET, SERVICE, ProxyService
from rplab.nodepackages import HOOK_DIR, SOCKET_NAMES
from rplab.peers import peer_binary
from runtimeproxy.usage import OneLineParser

OURS = "runtimeproxy"
GUEST_API_PORT = 6443
API_FORWARD_UNIT = "rplab-apiserver"
KOORDLET_UNIT = "rplab-koordlet"
KOORDLET_BINARY = "/usr/local/bin/koordlet"
KOORDLET_DIRECTORY = "/var/lib/rplab-koordlet"
KOORDLET_SOCKET = "/run/koordlet/koordlet.sock"
KOORDLET_METRICS = "127.0.0.1:9316"
REGISTRATION_FILE = f"{HOOK_DIR}/{REGISTRATION}"
BATCH_FILES = ("cpu.max", "cpu.weight", "memory.max")
# koordlet is built with cgo against Debian 12's libpfm4 (its perf groups): the guest is Debian 12 without it.
LIBPFM = Path("/usr/lib/x86_64-linux-gnu/libpfm.so.4")
REFERENCE_UNIT = "rplab-koord-proxy"
REFERENCE_BINARY = "/usr/local/bin/koord-runtime-proxy-go"
NO_CGROUP_ROOT = "/rplab-guest-koordlet-none"  # HostState's cgroup check: nothing of ours on the host's cgroups
# An emulated node (software emulation, ~10x slower than this machine): generous waits.
POD_SECONDS = 600.0
KOORDLET_SECONDS = 600.0
RESIZE_SECONDS = 300.0
RECONCILE_SECONDS = 300.0
BE, SKIPPED, LSR, LSR_RESIZED, DOWN, BACK = ("BE pod", "BE pod with the skip label", "LSR pod",
                                             "LSR pod resized in place (1 -> 1.5 CPUs)",
                                             "BE pod while koordlet is down", "that BE pod once koordlet is back")
MiB = 1024 * 1024
# Each scenario's values on cgroup v1 (tests/e2e/test_koordlet.py's VALUES, the same through both proxies) as the
# cgroup v2 files runc makes of them; a row says whether the guest's match (the LSR pods: also the annotated cpuset).
AS_ON_V1 = {
    BE: from_v1(50_000, 100_000, 512, 256 * MiB),
    SKIPPED: from_v1(-1, 100_000, 2, None),  # the kubelet's BestEffort values: koordlet did not act
    LSR: from_v1(-1, 100_000, 1024, 64 * MiB),
    LSR_RESIZED: from_v1(-1, 100_000, 1536, 64 * MiB),
    DOWN: from_v1(-1, 100_000, 2, None),
    BACK: from_v1(50_000, 100_000, 512, 256 * MiB),
}


# -- the figures ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One scenario through one proxy: the container's cgroup v2 files, what it took, a note."""

    scenario: str
    proxy: str
    values: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None
    note: str = ""
    expected: dict[str, str] | None = None  # AS_ON_V1's (with the cpuset where one was annotated)

    def as_on_v1(self) -> str:
        """Whether the values are cgroup v1's through runc's conversion: "yes", "no: <files that differ>", or ""."""
        if not self.expected or not self.values:
            return ""
        differ = [name for name, value in self.expected.items() if self.values.get(name) != value]
        return "yes" if not differ else "no: " + ", ".join(differ)

    def line(self) -> str:
        cells = [self.values.get(name, "") for name in CONTAINER_FILES]
        took = "" if self.seconds is None else f"{self.seconds:.1f}"
        return " | ".join(["", self.scenario, self.proxy, *cells, self.as_on_v1(), took, self.note, ""]).strip()


TABLE_HEADER = ("| scenario | proxy | " + " | ".join(CONTAINER_FILES) + " | as on cgroup v1 | s | note |\n"
                "|---|---|---|---|---|---|---|---|---|")


@dataclass
class Report:
    setup: dict[str, float] = field(default_factory=dict)  # seconds
    rows: list[Row] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(row.line(), flush=True)
        return row

    def text(self) -> str:
        setup = "\n".join(f"- {name}: {seconds:.1f} s" for name, seconds in self.setup.items())
        facts = "\n".join(f"- {fact}" for fact in self.facts)
        return "\n".join([setup, "", TABLE_HEADER, *(row.line() for row in self.rows), "", facts])


def timed(report: Report, name: str, action: Callable[[], Any]) -> Any:
    started = time.monotonic()
    result = action()
    report.setup[name] = time.monotonic() - started
    return result


# -- the API server in the guest ---------------------------------------------------------------------------------


@contextmanager
def api_server_in_guest(guest: Guest, cluster: SmallCluster) -> Iterator[str]:
    """The API server reachable in the guest at https://127.0.0.1:GUEST_API_PORT (the guest's one way to this
    machine, HOST_ADDRESS:HOST_SOCKET_PORT, is qemu's connection to ``guest.host_socket``: a socat here turns that
    into the API server's TCP port); yields the address."""
    guest.host_socket.unlink(missing_ok=True)
    bridge = subprocess.Popen(["socat", f"UNIX-LISTEN:{guest.host_socket},fork,unlink-early",
                               f"TCP:127.0.0.1:{cluster.apiserver_port}"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        forward_to_host(guest, f"TCP-LISTEN:{GUEST_API_PORT},bind=127.0.0.1,reuseaddr,fork", API_FORWARD_UNIT)
        yield f"https://127.0.0.1:{GUEST_API_PORT}"
    finally:
        end_group(bridge)
        guest.host_socket.unlink(missing_ok=True)


def end_group(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM to the process's group (socat's children serving connections with it), then its exit awaited."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


# -- koordlet in the guest -----------------------------------------------------------------------------------------


@dataclass
class GuestKoordlet:
    """koordlet in the guest as the transient systemd service KOORDLET_UNIT, in hook mode: its hook socket
    KOORDLET_SOCKET, registered into the proxy's HOOK_DIR; ``kubeconfig`` a host file written for the guest."""

    guest: Guest
    kubeconfig: Path
    kubelet: GuestKubeletNode
    binary: Path | None = None
    copy_seconds: float = 0.0
    ready_seconds: float = 0.0

    @property
    def state(self) -> str:
        return f"{KOORDLET_DIRECTORY}/state"

    def argv(self) -> list[str]:
        return [KOORDLET_BINARY, *hook_mode_flags(
            cgroup_root=CGROUP_ROOT, kubelet_root=self.kubelet.guest_root, socket=KOORDLET_SOCKET,
            hook_config_dir=HOOK_DIR, read_only_port=KUBELET_PORT, state=self.state, nri=False,
            metrics_address=KOORDLET_METRICS)]

    def start_command(self) -> str:
        environment = {"NODE_NAME": NODE_NAME, "KUBECONFIG": f"{KOORDLET_DIRECTORY}/kubeconfig"}
        # At -v=5 it logs thousands of lines a minute: journald's rate limit would drop the ones counted.
        return (f"systemctl reset-failed {KOORDLET_UNIT} 2>/dev/null; systemd-run -q --unit={KOORDLET_UNIT} "
                "--collect -p LogRateLimitIntervalSec=0 "
                + " ".join(f"-E {name}={value}" for name, value in environment.items()) + " "
                + shlex.join(self.argv()))

    def install(self) -> None:
        """The binary and libpfm4 copied in (once per guest), its kubeconfig and directories written; and the node's
        name resolvable in the guest: koordlet reaches the kubelet at the Node's Hostname address."""
        guest = self.guest
        self.copy_seconds = guest.put_once(self.binary or peer_binary(KOORDLET_PEER), KOORDLET_BINARY)
        self.copy_seconds += guest.put_once(LIBPFM.resolve(), str(LIBPFM), mode="0644")
        guest.write(f"{KOORDLET_DIRECTORY}/kubeconfig", self.kubeconfig.read_text(), mode="0600")
        directories = " ".join(f"{self.state}/{name}" for name in STATE_DIRECTORIES)
        guest.shell(f"ldconfig && mkdir -p {directories} {Path(KOORDLET_SOCKET).parent} && "
                    f"{{ grep -q ' {NODE_NAME}$' /etc/hosts || echo '127.0.0.1 {NODE_NAME}' >> /etc/hosts; }}")

    def start(self, timeout: float = KOORDLET_SECONDS) -> None:
        """Starts it; returns once its registration is in the proxy's directory and its socket answers."""
        started = time.monotonic()
        self.guest.shell(self.start_command())
        try:
            wait_until(self._registered, timeout, f"koordlet's {REGISTRATION_FILE} in the guest", interval=2.0)
        except KubeletNodeError as error:
            raise KoordletError(f"{error}\n{self.log_tail()}") from error
        self.ready_seconds = time.monotonic() - started

    def _registered(self) -> bool:
        output = self.guest.shell(f"systemctl is-active {KOORDLET_UNIT}; test -f {REGISTRATION_FILE} && "
                                  f"socat -u OPEN:/dev/null UNIX-CONNECT:{KOORDLET_SOCKET} && echo serving",
                                  check=False, timeout=120)
        if output.split()[:1] not in (["active"], ["activating"]):
            raise KoordletError(f"koordlet is not running in the guest ({output.split()[:1]})\n{self.log_tail()}")
        return "serving" in output.split()

    def stop(self) -> None:
        self.guest.shell(f"systemctl stop {KOORDLET_UNIT} 2>/dev/null; rm -f {REGISTRATION_FILE}; true")

    def kill(self) -> None:
        """SIGKILL, as a crash: its registration stays in the proxy's directory, its socket stops answering."""
        self.guest.shell(f"systemctl kill -s KILL {KOORDLET_UNIT}; "
                         f"while systemctl is-active -q {KOORDLET_UNIT}; do sleep 0.2; done")

    def journal(self, select: str) -> str:
        """Its journal's lines through the guest's shell pipe `select` (grep…: at -v=5 it runs to megabytes)."""
        return self.guest.shell(f"journalctl -u {KOORDLET_UNIT} -o cat --no-pager | {select}", check=False,
                                timeout=120)

    def log_count(self, text: str) -> int:
        return int(self.journal(f"grep -c -F {shlex.quote(text)}").strip() or 0)

    def log_lines(self, text: str, most: int = 5) -> list[str]:
        return self.journal(f"grep -F {shlex.quote(text)} | head -n {most}").splitlines()

    def log_tail(self, lines: int = 30) -> str:
        """Its journal's warnings, errors and fatals (klog's W/E/F lines; its info lines run to thousands)."""
        problems = self.journal(f"grep -E '^[WEF][0-9]{{4}} ' | tail -n {lines}")
        return "koordlet journal (problems) tail:\n" + problems


# -- the proxies in the guest ---------------------------------------------------------------------------------------


def ours_registered(proxy: ProxyService) -> bool:
    """Whether the proxy's journal says it loaded koordlet's registration (its line for a new plugin file)."""
    return any(f"plugin {REGISTRATION} registered" in message for _, message in proxy.journal(SERVICE, 0.0))


def switch_to_reference(guest: Guest, binary: Path) -> None:
    """koordinator's koord-runtime-proxy on the proxy's socket in place of the service (stopped with its socket
    units): the kubelet reconnects to the same path; koordlet's registration is in the directory it reads."""
    guest.put_once(binary, REFERENCE_BINARY)
    guest.shell(f"systemctl stop {SERVICE} {SOCKET_NAMES} && rm -f {PROXY_SOCKET} && "
                f"systemd-run -q --unit={REFERENCE_UNIT} --collect " + shlex.join([
                    REFERENCE_BINARY, f"--koord-runtimeproxy-endpoint={PROXY_SOCKET}",
                    f"--remote-runtime-service-endpoint={CONTAINERD_SOCKET}"]))
    line = KoordProxyProcess.registered_line(REGISTRATION)
    wait_until(lambda: line in guest.shell(f"journalctl -u {REFERENCE_UNIT} -o cat --no-pager", check=False),
               120.0, f"{REFERENCE} to read {REGISTRATION} in the guest", interval=2.0)


# -- the node ------------------------------------------------------------------------------------------------------


@dataclass
class KoordletNode:
    """The guest node with the proxy, the registered kubelet and koordlet; `proxy` the one serving now."""

    guest: Guest
    cluster: SmallCluster
    kubelet: GuestKubeletNode
    koordlet: GuestKoordlet
    proxy: str = OURS
    last_cpu: str = "1"

    def run_pod(self, pod: dict[str, Any]) -> tuple[str, str, float]:
        """Creates ``pod``, returns once it runs: (its container's cgroup directory, what its CreateContainer
        carried (``carried``), seconds to Running)."""
        started = time.monotonic()
        running = self.cluster.client.create_pod(pod, timeout=POD_SECONDS)
        took = time.monotonic() - started
        spec = container_spec(self.guest.address, running)
        return scope_path(spec), carried(spec), took

    def files(self, scope: str) -> dict[str, str]:
        return container_files(self.guest, scope)

    def pod_slice_note(self, scope: str) -> str:
        """The batch files of the pod's slice (the container scope's parent: koordlet's reconciler writes them)."""
        found = container_files(self.guest, str(Path(scope).parent), BATCH_FILES)
        return "pod slice " + ", ".join(f"{name} {value}" for name, value in found.items())

    def delete(self, name: str) -> None:
        self.cluster.client.delete_pod(name, timeout=POD_SECONDS)


def carried(spec: dict[str, Any]) -> str:
    """The OCI resources containerd created the container with (what the kubelet's CreateContainer carried, with
    koordlet's answer applied by the proxy): the proxy's doing, where the cgroup files may since have been written
    by koordlet's reconciler too."""
    resources = spec.get("linux", {}).get("resources", {})
    cpu, memory = resources.get("cpu", {}), resources.get("memory", {})
    found = [f"shares {cpu.get('shares', '-')}", f"quota {cpu.get('quota', '-')}", f"memory {memory.get('limit', '-')}"]
    if cpu.get("cpus"):
        found.append(f"cpus {cpu['cpus']}")
    return "created with " + ", ".join(found)


def registration_row(node: KoordletNode) -> Row:
    document = json.loads(node.guest.read(REGISTRATION_FILE))
    return Row("koordlet registers with the proxy", node.proxy,
               note=f"{document.get('remote-endpoint')}, policy {document.get('failure-policy')}, hooks "
                    f"{', '.join(document.get('runtime-hooks') or [])}")


def pod_row(node: KoordletNode, scenario: str, pod: dict[str, Any]) -> Row:
    name = pod["metadata"]["name"]
    scope, created, took = node.run_pod(pod)
    try:
        return Row(scenario, node.proxy, node.files(scope), took,
                   f"Running after its creation; {created}; {node.pod_slice_note(scope)}", AS_ON_V1[scenario])
    finally:
        node.delete(name)


def lsr_rows(node: KoordletNode) -> list[Row]:
    """The LSR pod, then its in-place resize: the kubelet's UpdateContainerResources through the proxy, koordlet's
    PreUpdateContainerResources answer (counted in its journal)."""
    scope, created, took = node.run_pod(lsr_pod("lsr", node.last_cpu))
    cpuset = {"cpuset.cpus": node.last_cpu}
    try:
        before = node.files(scope)
        rows = [Row(LSR, node.proxy, before, took, f"cpuset {node.last_cpu} annotated; {created}",
                    AS_ON_V1[LSR] | cpuset)]
        received = node.koordlet.log_count(UPDATE_RECEIVED)
        started = time.monotonic()
        node.cluster.client.patch("/api/v1/namespaces/default/pods/lsr/resize", resize("1500m"))
        after = wait_until(lambda: (files := node.files(scope))["cpu.weight"] != before["cpu.weight"] and files,
                           RESIZE_SECONDS, "the kubelet to resize the LSR pod's CPU weight", interval=2.0)
        calls = node.koordlet.log_count(UPDATE_RECEIVED) - received
        rows.append(Row(LSR_RESIZED, node.proxy, after, time.monotonic() - started,
                        f"applied after the patch; koordlet received {calls} PreUpdateContainerResources",
                        AS_ON_V1[LSR_RESIZED] | cpuset))
        return rows
    finally:
        node.delete("lsr")


def batch_files(files: dict[str, str]) -> dict[str, str]:
    """The files koordlet's batch-resource hook and reconciler write: CFS quota and period, weight, memory limit."""
    return {name: value for name, value in files.items() if name in BATCH_FILES}


def down_and_back_rows(node: KoordletNode, mended: dict[str, str]) -> list[Row]:
    """koordlet killed (its registration stays, its socket is dead), a BE pod made; koordlet started again and its
    reconciler waited for until the pod's files are ``mended`` (the BE pod's through the hook)."""
    node.koordlet.kill()
    try:
        scope, created, took = node.run_pod(be_pod("be-down"))
        rows = [Row(DOWN, node.proxy, node.files(scope), took, f"Running after its creation, policy Ignore; {created}",
                    AS_ON_V1[DOWN])]
    finally:
        node.koordlet.start()
    try:
        started = time.monotonic()
        files = wait_until(lambda: batch_files(found := node.files(scope)) == batch_files(mended) and found,
                           RECONCILE_SECONDS, "koordlet's reconciler to write the BE pod's cgroups", interval=2.0)
        rows.append(Row(BACK, node.proxy, files, time.monotonic() - started,
                        f"mended after koordlet was serving again ({node.koordlet.ready_seconds:.1f} s after its "
                        f"start); {node.pod_slice_note(scope)}", AS_ON_V1[BACK]))
        return rows
    finally:
        node.delete("be-down")


def scenarios(node: KoordletNode, report: Report) -> None:
    """Every scenario through the node's current proxy; a failed one is a row saying why, and the next runs."""
    def attempt(scenario: str, run: Callable[[], Row | list[Row]]) -> list[Row]:
        try:
            found = run()
        except Exception as error:  # noqa: BLE001 - by hand: the table says what failed, the rest still runs
            traceback.print_exc()
            found = Row(scenario, node.proxy, note=f"failed: {str(error).splitlines()[0][:300]}")
        return [report.add(row) for row in (found if isinstance(found, list) else [found])]

    attempt("koordlet registers with the proxy", lambda: registration_row(node))
    be = attempt(BE, lambda: pod_row(node, BE, be_pod("be")))
    attempt(SKIPPED, lambda: pod_row(node, SKIPPED, be_pod("skipped", {SKIP_LABEL: "true"})))
    attempt(LSR, lambda: lsr_rows(node))
    if be[0].values:
        attempt(DOWN, lambda: down_and_back_rows(node, be[0].values))


# -- the whole run -----------------------------------------------------------------------------------------------


def start_node(guest: Guest, cluster: SmallCluster, server: str, deb: Path, work: Path,
               report: Report) -> KoordletNode:
    """The proxy installed, the kubelet registered through it, koordinator's objects written, koordlet serving."""
    proxy = ProxyService(guest)
    timed(report, "the proxy's .deb installed, serving", lambda: proxy.install(deb))
    kubelet = GuestKubeletNode(Path(guest.address), work / "node", peer=KUBELET_PEER, guest=guest,
                               guest_endpoint=PROXY_SOCKET,
                               kubeconfig=cluster.embedded_kubeconfig("node", server))
    timed(report, "the kubelet started (its binary copied in)", kubelet.start)
    report.setup["  of which copying the kubelet in"] = kubelet.copy_seconds
    timed(report, "the kubelet registered as the node", lambda: cluster.client.wait_for_node(NODE_NAME, POD_SECONDS))
    koord_manager_writes(cluster.client)
    timed(report, "koordlet's own pod Running (the skip label)",
          lambda: cluster.client.create_pod(sleeper(OWN_POD, labels={SKIP_LABEL: "true"}), timeout=POD_SECONDS))
    koordlet = GuestKoordlet(guest, cluster.embedded_kubeconfig("admin", server), kubelet)
    timed(report, "koordlet and libpfm4 copied in", koordlet.install)
    koordlet.start()
    report.setup["koordlet serving after its start"] = koordlet.ready_seconds
    wait_until(lambda: ours_registered(proxy), 120.0, f"the proxy to register {REGISTRATION}", interval=2.0)
    last_cpu = str(int(guest.shell("nproc").strip()) - 1)
    return KoordletNode(guest, cluster, kubelet, koordlet, last_cpu=last_cpu)


def node_facts(node: KoordletNode) -> list[str]:
    """What koordlet made of the node (its cgroup driver and version lines), and the kernel hooks it has nothing
    for."""
    facts = [f"koordlet: {line.split('] ', 1)[-1]}" for line in node.koordlet.log_lines("as cgroup driver")[:1]]
    facts.append(f"the guest: {' '.join(node.guest.shell('uname -r; stat -fc %T /sys/fs/cgroup').split())}")
    missing = missing_kernel_hooks(parse_kernel_probe(node.guest.shell(KERNEL_PROBE_SCRIPT)))
    for hook in KERNEL_HOOKS:
        facts.append(f"koordlet's {hook} hook: " + (f"cannot act here: {missing[hook]}" if hook in missing
                                                    else "the kernel offers it; not checked here"))
    return facts


DIAGNOSED_UNITS = (KOORDLET_UNIT, "rplab-kubelet", SERVICE, REFERENCE_UNIT, "containerd", API_FORWARD_UNIT)


def save_journals(guest: Guest, directory: Path) -> None:
    """The guest's units' journals (their last lines) into `directory`: the guest is thrown away after a failure."""
    for unit in DIAGNOSED_UNITS:
        text = guest.shell(f"journalctl -u {unit} -o short-precise --no-pager -n 3000", check=False, timeout=120)
        (directory / f"journal-{unit}.log").write_text(text)


def run(work: Path, deb: Path, reference: bool, report: Report, images: Path = IMAGE_CACHE) -> None:
    """The whole run (the module's docstring), its figures into `report` as they come."""
    host_before = HostState.now(work, NO_CGROUP_ROOT)
    cluster = SmallCluster(work / "cluster")
    timed(report, "cluster up (etcd, API server, CRDs)", cluster.start)
    try:
        started = time.monotonic()
        with running_guest(work / "g", images, fresh_ids=True) as guest:
            report.setup["guest restored"] = time.monotonic() - started
            try:
                with api_server_in_guest(guest, cluster) as server:
                    node = start_node(guest, cluster, server, deb, work, report)
                    report.facts += node_facts(node)
                    scenarios(node, report)
                    if reference:
                        timed(report, f"{REFERENCE} in place of the service", lambda: switch_to_reference(
                            guest, peer_binary(REFERENCE)))
                        node.proxy = REFERENCE
                        scenarios(node, report)
            finally:
                save_journals(guest, work)
                report.setup["qemu CPU"] = guest.cpu_seconds()
    finally:
        cluster.stop()
        changes = host_before.changes_to(HostState.now(work, NO_CGROUP_ROOT))
        report.facts.append("the host as found" if not changes else f"the host changed: {changes}")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.guest_koordlet", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deb", type=Path, help="the proxy's .deb (default: built from this checkout, ~1.5 min)")
    parser.add_argument("--keep", type=Path, help="a directory for the run, kept (default: temporary, removed)")
    parser.add_argument("--reference", action="store_true", help=f"the scenarios again through {REFERENCE}")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="rp-gk-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    report = Report()
    try:
        deb = args.deb or build_deb_here(work)
        run(work, deb, args.reference, report)
    except Exception:
        traceback.print_exc()
        print(f"\nfailed; the figures so far (the guest's journals: {work}/journal-*.log with --keep):")
        print(report.text())
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(report.text())
    return 0


def build_deb_here(work: Path) -> Path:
    from rplab.nodepackages import build_deb
    from rplab.release import build_bundle, built_wheel
    from runtimeproxy import __version__

    return build_deb(build_bundle(built_wheel(work / "wheel"), work / "release"), __version__, work / "debs")


if __name__ == "__main__":
    raise SystemExit(main())
