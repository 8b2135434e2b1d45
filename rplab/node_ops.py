"""Node operations under the real kubelet, on the node as operators run it: the proxy installed from the .deb in
the cgroup v2 + systemd guest (rplab.guest), its sockets held by systemd (the package's .socket units), the kubelet
(rplab.guest_kubelet) on the proxy's socket, a hook plugin on all hooks under Ignore, pods with probes. Each
operation is done to the running node and measured from the kubelet's side (issue 39):

  upgrade            the next version's .deb installed over the running one (its postinst restarts the service)
  restart            systemctl restart
  kill -9            SIGKILL; systemd starts it again (Restart=always, RestartSec=100ms)
  kill -9 mid-start  SIGKILL while a pod's StartContainer is held in its PreStartContainer hook
  containerd restart systemctl restart containerd
  plugin restart     the hook plugin stopped, a pod created meanwhile, the plugin started again
  state disk full    the state directory on a full file system, the proxy restarted on it, a pod churned

Figures per operation (``Disruption``), all from the guest's clock and journal or the kubelet's read-only port:
the kubelet's CRI errors (journal lines with ``code = Unavailable``, and all ``rpc error`` lines), its probe
failures (``Probe failed``/``Probe errored`` lines), the containers' restarts (restartCount), pods seen not Ready,
Created orphans and failed starts (exit code 128) in the runtime at the end, and the time from the operation to the
thing operated on serving again (the proxy's ``listening on`` line, containerd's ``successfully booted``).

The proxy runs in the emulated guest (software emulation, about ten times slower than this machine), so its start
and every call are slower than on a node; the counts (refused calls, restarts, orphans) do not depend on speed.

    python -m rplab.node_ops [--keep DIR] [--debs FIRST LATER]   # the whole run, its table printed
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from rplab import CHECKOUT
from rplab.cri import CriClient, open_channel
from rplab.example_plugin import ExamplePlugin, ExampleSettings
from rplab.guest import GUEST_BASE, Guest
from rplab.guest_kubelet import UNIT as KUBELET_UNIT, GuestKubeletNode, through_host
from rplab.kubelet_node import NEWEST_PEER, KubeletErrors, KubeletNodeError, wait_until
from rplab.kubelet_pods import NodePorts, kubelet_view, node_pods
from rplab.loop import LoopThread
from rplab.nodepackages import HOOK_DIR, PACKAGE, SOCKET_NAMES
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.plugin.registration import registration

SERVICE = f"{PACKAGE}.service"
PROXY_SOCKET = "/run/koord-runtimeproxy/runtimeproxy.sock"  # the .socket unit's, the kubelet's endpoint
ADMIN_SOCKET = "/run/koord-runtimeproxy/admin.sock"
STATE_DIR = "/var/lib/koord-runtimeproxy"
CONTAINERD_SOCKET = str(GUEST_BASE / "containerd.sock")  # the guest containerd's (its config puts it there)
HOOK_SOCKET = "/run/rplab-hook.sock"  # in the guest: forwarded to the hook plugin's socket on the host
HOOK_FORWARD_UNIT = "rplab-hook-socket"
STOPPING = "systemd[1]: Stopping"  # the journal's line as systemd begins a stop (restart, upgrade)
HOOK_FILE = "example.json"
HOOK_NAMES = ("PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
              "PreUpdateContainerResources", "PostStopContainer", "PostStopPodSandbox")
PROBES = {"timeoutSeconds": 10, "periodSeconds": 5}  # an emulated node: slower, fewer probes
# The node's pods: the probes of each kind, a pod of two containers, and more of the exec-probed kind (the probes
# that go through the proxy: ExecSync).
BASE_PODS = ("exec-probes", "http-probes", "tcp-probes", "guaranteed")
EXTRA_EXEC_PODS = ("exec-probes-2", "exec-probes-3")
# Where an operation needs a pod made meanwhile: a new exec-probed pod of a name of its own each time (a static pod
# written back under its old name keeps its UID, and the kubelet counts its restarts on from what it saw before).
CHURN_PREFIX = "churn-"
SETTLE_SECONDS = 600.0  # every pod Ready, on an emulated node
OBSERVE_SECONDS = 20.0  # after the node is back: four probe periods, for late probe failures and restarts


class NodeOpsError(RuntimeError):
    pass


@dataclass
class Disruption:
    """What one operation cost the kubelet."""

    operation: str
    unavailable: int = 0  # the kubelet's journal lines with code = Unavailable (refused or cut-off calls)
    cri_errors: int = 0  # its journal lines with any rpc error
    probe_failures: int = 0
    restarts: int = 0  # restartCount over the node's containers, after minus before
    not_ready: list[str] = field(default_factory=list)  # pods seen not Ready while it lasted
    orphans: int = 0  # containers left Created in the runtime at the end
    failed_starts: int = 0  # containers that exited 128 (a start cut off in the runtime) since the operation
    back_seconds: float | None = None  # from the operation to the thing operated on serving again
    steady_seconds: float = 0.0  # from the operation to every pod Ready again, the proxy answering
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        back = "-" if self.back_seconds is None else f"{self.back_seconds:.2f}"
        return (f"| {self.operation} | {self.unavailable} | {self.cri_errors} | {self.probe_failures} | "
                f"{self.restarts} | {len(self.not_ready)} | {self.orphans} | {self.failed_starts} | {back} | "
                f"{self.steady_seconds:.1f} | {'; '.join(self.notes)} |")


TABLE_HEADER = ("| operation | Unavailable lines | CRI errors | probe failures | restarts | pods not Ready | "
                "Created orphans | failed starts | back after (s) | steady after (s) | notes |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|")


def table(disruptions: list[Disruption]) -> str:
    return "\n".join([TABLE_HEADER, *(d.row() for d in disruptions)])


# -- the proxy as a service in the guest ---------------------------------------------------------------------


def service_drop_in() -> str:
    """The operator's drop-in: the package's ExecStart with the guest containerd's socket (this guest's
    containerd listens where its config says, not at /run/containerd)."""
    unit = (CHECKOUT / "deploy" / SERVICE).read_text()
    command = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit, re.MULTILINE | re.DOTALL)
    assert command is not None, "the unit's ExecStart"
    start = command.group(1).replace("/var/run/containerd/containerd.sock", CONTAINERD_SOCKET)
    return f"[Service]\nExecStart=\nExecStart={start}\n"


@dataclass
class ProxyService:
    """The proxy from the .deb, run by the guest's systemd."""

    guest: Guest

    def install(self, deb: Path) -> None:
        """Installs `deb`, the drop-in, enables and starts the sockets and the service (as docs/install.md)."""
        self._put_deb(deb)
        self.guest.shell(f"dpkg -i /tmp/{deb.name} >/dev/null && mkdir -p /etc/systemd/system/{SERVICE}.d && "
                         f"cat > /etc/systemd/system/{SERVICE}.d/rplab.conf <<'RPLAB_EOF'\n{service_drop_in()}"
                         f"RPLAB_EOF\nsystemctl daemon-reload && systemctl enable --now -q {SOCKET_NAMES} {SERVICE}",
                         timeout=300)
        wait_until(lambda: self.serving_since(0.0), 120.0, f"{SERVICE} serving in the guest", interval=0.5)

    def _put_deb(self, deb: Path) -> None:
        self.guest.put(deb, f"/tmp/{deb.name}", mode="0644")

    def upgrade(self, deb: Path) -> float:
        """The next version installed over the running one; returns when dpkg began (the guest's clock)."""
        self._put_deb(deb)
        return float(self.guest.shell(f"date +%s.%N; dpkg -i /tmp/{deb.name} >/dev/null", timeout=300).split()[0])

    def act(self, command: str) -> float:
        """Runs `command` in the guest; returns when it began (the guest's clock)."""
        return float(self.guest.shell(f"date +%s.%N; {command}", timeout=120).split()[0])

    def journal(self, unit: str, since: float) -> list[tuple[float, str]]:
        """`unit`'s journal lines from `since` on: (time, message)."""
        text = self.guest.shell(f"journalctl -u {unit} --since=@{int(since)} -o short-unix --no-pager", check=False,
                                timeout=120)
        lines = []
        for line in text.splitlines():
            stamp, _, message = line.partition(" ")
            try:
                at = float(stamp)
            except ValueError:
                continue
            if at >= since:
                lines.append((at, message))
        return lines

    def serving_since(self, since: float) -> float | None:
        """When a proxy started after `since` said it listens (its log's first line once it serves), or None."""
        for at, message in self.journal(SERVICE, since):
            if "listening on" in message:
                return at
        return None

    def back_after(self, since: float) -> float | None:
        """The proxy's outage after `since`: from systemd stopping it (or seeing it killed) to the next one
        serving; None while none serves. An upgrade's outage begins when dpkg's postinst restarts it."""
        ended = since
        for at, message in self.journal(SERVICE, since):
            if STOPPING in message or "Main process exited" in message:
                ended = at
                break
        serving = self.serving_since(ended)
        return None if serving is None else since + (serving - ended)

    def status(self) -> dict[str, Any]:
        """`runtimeproxyctl status -o json` in the guest, once the proxy answers it."""
        command = f"runtimeproxyctl --admin-endpoint={ADMIN_SOCKET} status -o json 2>/dev/null"

        def answered() -> str | None:
            text = self.guest.shell(command, timeout=120, check=False).strip()
            return text if text.startswith("{") else None
        return dict(json.loads(wait_until(answered, 120.0, "runtimeproxyctl status", interval=1.0)))

    def main_pid(self) -> int:
        return int(self.guest.shell(f"systemctl show -p MainPID --value {SERVICE}").strip() or 0)


# -- the hook plugin on the host -------------------------------------------------------------------------------


class HeldStarts:
    """The plugin's PreStartContainer, held for one pod's containers while `pod` is set: the kill mid-start."""

    def __init__(self) -> None:
        self.pod = ""
        self.held = threading.Event()  # set once a start of `pod` is being held
        self._release: asyncio.Event | None = None

    async def answer(self, request: Any, context: Any) -> Message:
        """PreStartContainer's scripted answer (a ContainerResourceHookRequest): held, then no change."""
        if self.pod and request.pod_meta.name.startswith(self.pod):
            self._release = asyncio.Event()
            self.held.set()
            await self._release.wait()
        return hooks.ContainerResourceHookResponse()  # no change

    def release(self, loop: LoopThread) -> None:
        self.pod = ""
        if self._release is not None:
            release = self._release
            loop.run(_set(release))


async def _set(event: asyncio.Event) -> None:
    event.set()


@dataclass
class HookPluginOnHost:
    """The example plugin on this machine, in-process (`loop`), reached from the guest's HOOK_SOCKET."""

    loop: LoopThread
    socket: Path
    starts: HeldStarts = field(default_factory=HeldStarts)
    plugin: ExamplePlugin | None = None

    def start(self) -> None:
        self.plugin = ExamplePlugin(ExampleSettings(answers={"PreStartContainer": self.starts.answer}),
                                    keep_seen=False)
        self.loop.run(self.plugin.start(self.socket))

    def stop(self) -> None:
        if self.plugin is not None:
            self.loop.run(self.plugin.stop())
            self.plugin = None

    def calls(self) -> int:
        return sum(self.plugin.calls.values()) if self.plugin is not None else 0


def forward_hook_socket(guest: Guest, plugin_socket: Path) -> None:
    """The guest's HOOK_SOCKET reaches `plugin_socket` on this machine (through the guest's host socket)."""
    guest.host_socket.unlink(missing_ok=True)
    guest.host_socket.symlink_to(plugin_socket)
    through_host(guest, HOOK_SOCKET, HOOK_FORWARD_UNIT)


def register_plugin(guest: Guest) -> None:
    document = registration(Path(HOOK_SOCKET), list(HOOK_NAMES), "Ignore", timeout=120).decode()
    guest.shell(f"cat > {HOOK_DIR}/.{HOOK_FILE}.partial <<'RPLAB_EOF'\n{document}\nRPLAB_EOF\n"
                f"mv {HOOK_DIR}/.{HOOK_FILE}.partial {HOOK_DIR}/{HOOK_FILE}")


# -- the node -------------------------------------------------------------------------------------------------


def pod_manifests(ports: NodePorts) -> list[dict[str, Any]]:
    manifests = {m["metadata"]["name"]: m for m in node_pods(ports, PROBES)}
    chosen = [manifests[name] for name in BASE_PODS]
    for name in EXTRA_EXEC_PODS:
        copy = json.loads(json.dumps(manifests["exec-probes"]))
        copy["metadata"]["name"] = name
        chosen.append(copy)
    return chosen


@dataclass
class ServiceNode:
    """The guest node: the proxy as a service, the kubelet on its socket, the plugin on the host, the pods."""

    guest: Guest
    kubelet: GuestKubeletNode
    proxy: ProxyService
    plugin: HookPluginOnHost
    manifests: list[dict[str, Any]]
    churned: str = ""  # the pod made by the latest operation that needed one ("" before the first)
    _churns: int = 0

    @property
    def names(self) -> list[str]:
        return [m["metadata"]["name"] for m in self.manifests] + ([self.churned] if self.churned else [])

    def view(self) -> dict[str, Any]:
        return kubelet_view({name: pod for name, pod in self.kubelet.pod_names().items() if name in self.names})

    def all_ready(self) -> bool:
        try:
            view = self.view()
        except KubeletNodeError:
            return False
        return sorted(view) == sorted(self.names) and all(
            pod["ready"] and all(c["state"] == "running" for c in pod["containers"].values())
            for pod in view.values())

    def restart_count(self) -> int:
        return sum(int(c["restartCount"]) for pod in self.view().values() for c in pod["containers"].values())

    def runtime_containers(self) -> list[Any]:
        with open_channel(self.guest.address) as channel:
            client = CriClient(channel)
            return list(client.runtime.ListContainers(client.api.ListContainersRequest(), timeout=60).containers)

    def orphans(self) -> int:
        return sum(1 for c in self.runtime_containers() if c.state == 0)  # CONTAINER_CREATED

    def failed_starts(self, since_ns: int) -> int:
        with open_channel(self.guest.address) as channel:
            client = CriClient(channel)
            exited = [c for c in client.runtime.ListContainers(client.api.ListContainersRequest(), timeout=60)
                      .containers if c.state == client.api.CONTAINER_EXITED and c.created_at >= since_ns]
            return sum(1 for c in exited if client.container_status(c.id).status.exit_code == 128)

    def remove_churned(self) -> None:
        """The previous operation's pod removed (and gone from the kubelet), so it counts no more."""
        if not self.churned:
            return
        name, self.churned = self.churned, ""
        self.kubelet.remove_pod(name)
        wait_until(lambda: name not in self.kubelet.pod_names(), SETTLE_SECONDS, f"{name} removed", interval=1.0)

    def next_churn(self) -> str:
        """The name churn() gives its pod next."""
        return f"{CHURN_PREFIX}{self._churns + 1}"

    def churn(self) -> str:
        """A new pod (exec-probed), counted with the node's from now on: its name."""
        pod = json.loads(json.dumps(next(m for m in self.manifests if m["metadata"]["name"] == "exec-probes")))
        pod["metadata"]["name"] = self.churned = self.next_churn()
        self._churns += 1
        self.kubelet.write_pod(pod)
        return self.churned

    def measure(self, operation: str, act: Callable[[], float], back: Callable[[float], float | None] | None,
                then: Callable[[], None] | None = None) -> Disruption:
        """`act()` does the operation and returns when it began (guest clock); `back(began)` says when the thing
        operated on served again (guest clock), None while it does not; `then()` runs once it is back."""
        result = Disruption(operation)
        restarts_before = self.restart_count()
        began = act()
        host_began = time.monotonic()
        not_ready: set[str] = set()

        def steady() -> bool:
            try:
                view = self.view()
            except KubeletNodeError:
                return False
            not_ready.update(name for name, pod in view.items() if not pod["ready"])
            return (back is None or back(began) is not None) and self.all_ready()

        if back is not None:
            at = wait_until(lambda: back(began), SETTLE_SECONDS, f"{operation}: back", interval=0.5)
            result.back_seconds = round(at - began, 2)
        if then is not None:
            then()
        wait_until(steady, SETTLE_SECONDS, f"{operation}: every pod Ready", interval=1.0)
        result.steady_seconds = time.monotonic() - host_began
        observed_until = time.monotonic() + OBSERVE_SECONDS
        while time.monotonic() < observed_until:
            steady()
            time.sleep(1.0)
        errors = KubeletErrors.of(message for _, message in self.proxy.journal(KUBELET_UNIT, began))
        result.unavailable, result.cri_errors, result.probe_failures = (errors.unavailable, errors.cri_errors,
                                                                         errors.probe_failures)
        result.restarts = self.restart_count() - restarts_before
        result.not_ready = sorted(not_ready)
        result.orphans = self.orphans()
        result.failed_starts = self.failed_starts(int(began * 1e9))
        return result


# -- the operations -------------------------------------------------------------------------------------------


def upgrade(node: ServiceNode, later_deb: Path) -> Disruption:
    pid = node.proxy.main_pid()
    result = node.measure("upgrade (.deb over the running one)", lambda: node.proxy.upgrade(later_deb),
                          node.proxy.back_after)
    if node.proxy.main_pid() == pid:
        raise NodeOpsError("the upgrade did not restart the proxy")
    result.notes.append(node.guest.shell(f"dpkg-query -W {PACKAGE}").strip())
    return result


def restart(node: ServiceNode) -> Disruption:
    return node.measure("systemctl restart", lambda: node.proxy.act(f"systemctl restart {SERVICE}"),
                        node.proxy.back_after)


def kill(node: ServiceNode) -> Disruption:
    return node.measure("kill -9 (systemd restarts it)", lambda: node.proxy.act(f"systemctl kill -s KILL {SERVICE}"),
                        node.proxy.back_after)


def kill_mid_start(node: ServiceNode) -> Disruption:
    """A pod's container held in PreStartContainer (the runtime created it, the start not asked yet), then
    SIGKILL: the journal names the call, the next proxy removes the Created container the kubelet will not start."""
    node.remove_churned()
    starts = node.plugin.starts
    starts.held.clear()
    starts.pod = node.next_churn()
    name = node.churn()
    if not starts.held.wait(SETTLE_SECONDS):
        raise NodeOpsError(f"{name}'s start never reached the plugin")

    def act() -> float:
        began = node.proxy.act(f"systemctl kill -s KILL {SERVICE}")
        starts.release(node.plugin.loop)
        return began

    result = node.measure("kill -9 mid-start (held in PreStartContainer)", act, node.proxy.back_after)
    reconciled = node.proxy.status().get("reconciliation") or {}
    result.notes.append(f"reconciled: {reconciled.get('interrupted_calls', 0)} interrupted, "
                        f"{reconciled.get('removed', 0)} Created removed")
    return result


def containerd_restart(node: ServiceNode) -> Disruption:
    def booted(since: float) -> float | None:
        for at, message in node.proxy.journal("containerd", since):
            if "successfully booted" in message:
                return at
        return None
    return node.measure("containerd restart", lambda: node.proxy.act("systemctl restart containerd"), booted)


def plugin_restart(node: ServiceNode, down_seconds: float = 10.0) -> Disruption:
    """The plugin stopped, a pod made while it is down (created without its answer, under Ignore), started."""
    node.remove_churned()
    missed_before = missed_count(node.proxy.status())

    def act() -> float:
        began = node.proxy.act("true")
        node.plugin.stop()
        node.churn()
        time.sleep(down_seconds)
        node.plugin.start()
        return began

    result = node.measure("hook plugin restart (a pod made while down)", act, None)
    result.notes.append(f"plugin down {down_seconds:.0f} s; status: {missed_count(node.proxy.status()) - missed_before}"
                        " more objects created without its answer")
    return result


def missed_count(status: dict[str, Any]) -> int:
    return int((status.get("missed_plugins") or {}).get("count") or 0)


def state_disk_full(node: ServiceNode) -> Disruption:
    """The state directory on a full file system (an empty tmpfs filled up: not even its lock file can be made),
    the proxy restarted on it, a pod made: the proxy serves without the directory and says so."""
    node.proxy.act(f"mount -t tmpfs -o size=64k,mode=0700 rplab-full {STATE_DIR} && "
                   f"dd if=/dev/zero of={STATE_DIR}/filler bs=4k 2>/dev/null; df -k {STATE_DIR} | tail -1")

    def churn() -> None:
        node.remove_churned()
        node.churn()

    result = node.measure("state directory's disk full (restart, a pod made)",
                          lambda: node.proxy.act(f"systemctl restart {SERVICE}"), node.proxy.back_after, then=churn)
    problem = (node.proxy.status().get("reconciliation") or {}).get("journal_problem", "")
    said = [m for _, m in node.proxy.journal(SERVICE, 0.0) if "cannot be written" in m]
    result.notes.append(f"status journal problem: {problem or 'none'}; 'cannot be written' log lines: {len(said)}")
    return result


def operations(node: ServiceNode, later_deb: Path) -> Iterator[Disruption]:
    yield upgrade(node, later_deb)
    yield restart(node)
    yield kill(node)
    yield kill_mid_start(node)
    yield containerd_restart(node)
    yield plugin_restart(node)
    yield state_disk_full(node)


@contextmanager
def service_node(guest: Guest, debs: tuple[Path, Path], kubelet_binary: Path, loop: LoopThread,
                 workdir: Path) -> Iterator[ServiceNode]:
    """The node up and settled: the first .deb installed and serving, the plugin on the host registered, the
    kubelet on the proxy's socket with every pod Ready."""
    workdir.mkdir(parents=True, exist_ok=True)
    plugin = HookPluginOnHost(loop, workdir / "hook.sock")
    plugin.start()
    try:
        forward_hook_socket(guest, plugin.socket)
        proxy = ProxyService(guest)
        proxy.install(debs[0])
        register_plugin(guest)
        kubelet = GuestKubeletNode(Path(guest.address), workdir / "node", binary=kubelet_binary, peer=NEWEST_PEER,
                                   guest=guest, guest_endpoint=PROXY_SOCKET)
        node = ServiceNode(guest, kubelet, proxy, plugin, pod_manifests(NodePorts.free()))
        kubelet.start()
        try:
            for manifest in node.manifests:
                kubelet.write_pod(manifest)
            wait_until(node.all_ready, SETTLE_SECONDS, "every pod Ready", interval=2.0)
            yield node
        finally:
            kubelet.stop()
    finally:
        plugin.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    from rplab.guest import running_guest
    from rplab.images import IMAGE_CACHE
    from rplab.kubelet_node import peer_binary
    from rplab.nodepackages import build_deb
    from rplab.release import build_bundle, built_wheel
    from runtimeproxy import __version__

    parser = argparse.ArgumentParser(prog="python -m rplab.node_ops", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="a directory for the packages and the node (default: temporary)")
    parser.add_argument("--debs", type=Path, nargs=2, metavar=("FIRST", "LATER"),
                        help="the two packages to install and upgrade to (default: built from this checkout)")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="rp-nodeops-", dir="/tmp"))
    if args.debs:
        debs = (args.debs[0], args.debs[1])
    else:
        bundle = build_bundle(built_wheel(work / "wheel"), work / "release")
        debs = (build_deb(bundle, __version__, work / "debs"), build_deb(bundle, f"{__version__}+1", work / "debs"))
    loop = LoopThread()
    disruptions = []
    try:
        with running_guest(work / "guest", IMAGE_CACHE) as guest:
            with service_node(guest, debs, peer_binary(NEWEST_PEER), loop, work / "ops") as node:
                for disruption in operations(node, debs[1]):
                    print(disruption.row(), flush=True)
                    disruptions.append(disruption)
    finally:
        loop.close()
    print(table(disruptions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
