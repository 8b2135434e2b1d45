"""The real kubelet on the node most clusters run: inside the cgroup v2 + systemd guest (rplab.guest: systemd as PID 1,
containerd 1.6 with `SystemdCgroup = true`), with `cgroupDriver: systemd` (rplab.guest_kubelet); the newest release's
kubelet (NEWEST_KUBELET_VERSION: on cgroup v1 it refuses to start unless told not to, here it runs as meant). Static pods of
tests/e2e/test_real_kubelet.py's node (rplab.kubelet_pods: exec, HTTP and TCP probes, a liveness restart, a crash
loop, an init container), once straight to the guest's containerd and once
through the proxy with the example plugin on all seven hooks under policy Fail. The proxy and the plugin run on this
machine: kubelet (guest) -> proxy (host) -> containerd (guest). The kubelet's view (phase, Ready, per container
ready, restartCount and states) and the runtime's must be the same both ways, but for the plugin's edits, which
must be there through the proxy, down to the container's cgroup v2 files.

Under software emulation a probe's exec takes longer than the kubelet's default second, and an exec a second per
probe keeps the guest's two CPUs busy: every probe gets PACE's settings in both runs, and the node runs PODS.
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rplab.cgroup_v2 import scope_path
from rplab.example_plugin import ExampleSettings, plugin_process, registration
from rplab.guest import Guest
from rplab.guest_kubelet import UNIT as GUEST_KUBELET_UNIT, GuestKubeletNode, through_host
from rplab.kubelet_node import NEWEST_KUBELET_VERSION, NEWEST_PEER, KubeletNode
from rplab.kubelet_pods import NodePorts, Pace, run_node
from rplab.process import ProxyProcess
from rplab.registry import free_port
from runtimeproxy.hooks.names import HOOK_NAMES

from test_cgroup_v2 import cgroup_files
from tests.kits.machine import built_peer
from test_real_kubelet import HOOK_ENV, LIFECYCLE_HOOKS, Run, cri_calls, spec_reader, without_edits

PACE = Pace(probes={"timeoutSeconds": 10, "periodSeconds": 5}, settle_timeout=600.0, poll_interval=2.0)
# A lighter node than on the host (emulated, each sandbox and container takes seconds of the guest's CPUs):
# the probes of each kind, the liveness restart, the crash loop, the init container.
PODS = ("exec-probes", "http-probes", "tcp-probes", "liveness-restart", "crash-loop", "init-container")


@pytest.fixture(scope="module")
def kubelet_binary() -> Path:
    return built_peer(NEWEST_PEER, f"the kubelet {NEWEST_KUBELET_VERSION}")


@pytest.fixture(scope="module")
def ports() -> NodePorts:
    return NodePorts.free()


def settled_reader(guest: Guest, into: dict[str, Any]) -> Callable[[KubeletNode], None]:
    """A while_settled callback: the probed container's OCI spec, and its cgroup v2 files as "cgroup v2"."""
    read_spec = spec_reader(Path(guest.address), into)

    def read(node: KubeletNode) -> None:
        read_spec(node)
        into["cgroup v2"] = cgroup_files(guest, scope_path(into))
    return read


def guest_run(node: GuestKubeletNode, ports: NodePorts, guest: Guest) -> Run:
    started = time.monotonic()
    since = guest.shell("date +%s").strip()
    specs: dict[str, Any] = {}
    outcome = run_node(node, ports, Path(guest.address), while_settled=settled_reader(guest, specs), pods=PODS,
                       pace=PACE)
    return Run(outcome, specs, seconds=round(time.monotonic() - started, 1), kubelet_log=restart_events(guest, since))


def restart_events(guest: Guest, since: str) -> str:
    """The kubelet's journal lines of this run about liveness-restart's containers (its PLEG events say when each
    attempt started, died and was removed): what explains a last state that differs (below)."""
    return guest.shell(f"journalctl -u {GUEST_KUBELET_UNIT} --since=@{since} --no-pager -o short-precise "
                       "| grep -E 'liveness-restart|DeleteContainer' | tail -40", check=False)


def summary(name: str, run: Run) -> str:
    figures = ", ".join(f"{what} {seconds} s" for what, seconds in run.outcome.figures.items())
    return f"kubelet {NEWEST_KUBELET_VERSION} in the guest (systemd driver), {name}: {figures}; run {run.seconds} s"


@pytest.fixture(scope="module")
def direct(guest_containerd: Guest, kubelet_binary: Path, ports: NodePorts, workdir: Path,
           kubelet_summary: list[str]) -> Run:
    node = GuestKubeletNode(Path(guest_containerd.address), workdir / "gk-direct", binary=kubelet_binary,
                            peer=NEWEST_PEER, guest=guest_containerd)
    run = guest_run(node, ports, guest_containerd)
    kubelet_summary.append(summary("direct", run) + f"; the binary copied in {node.copy_seconds:.1f} s")
    return run


@pytest.fixture(scope="module")
def proxied(direct: Run, guest_containerd: Guest, kubelet_binary: Path, ports: NodePorts, workdir: Path,
            kubelet_summary: list[str]) -> Iterator[Run]:
    """The same pods through the proxy on this machine, the example plugin on all seven hooks (Fail)."""
    base = workdir / "gk-proxied"
    base.mkdir(parents=True, exist_ok=True)
    hook_socket, hook_record = base / "hook.sock", base / "hook-requests.jsonl"
    metrics_port = free_port()
    proxy = ProxyProcess(base / "proxy" / "rp.sock", guest_containerd.address, extra_args=[
        f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--log-level=info"])
    proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
    (proxy.hook_config_dir / "example.json").write_bytes(registration(hook_socket, list(HOOK_NAMES), "Fail"))
    guest_containerd.host_socket.unlink(missing_ok=True)
    guest_containerd.host_socket.symlink_to(proxy.listen_path)
    with plugin_process(hook_socket, hook_record):
        proxy.start()
        try:
            node = GuestKubeletNode(proxy.listen_path, base / "node", binary=kubelet_binary, peer=NEWEST_PEER,
                                    guest=guest_containerd, guest_endpoint=through_host(guest_containerd))
            run = guest_run(node, ports, guest_containerd)
            run.calls = cri_calls(metrics_port)
        finally:
            assert proxy.stop() == 0, proxy.log_tail()
    run.hooks = Counter(json.loads(line)["hook"] for line in hook_record.read_text().splitlines())
    kubelet_summary += [summary("proxied", run),
                        "CRI calls through the proxy (guest): "
                        + ", ".join(f"{m} {n}" for m, n in run.calls.most_common())]
    yield run


def test_directly_every_pod_settles_as_it_should(direct: Run) -> None:
    assert direct.outcome.problems == []
    assert direct.outcome.ok(), direct.outcome.summary()


def test_the_kubelet_used_the_systemd_driver(direct: Run) -> None:
    """Its pods' containers are systemd scopes under its kubepods.slice."""
    parent, prefix, _ = direct.specs["linux"]["cgroupsPath"].split(":")
    assert parent.startswith("kubepods-") and parent.endswith(".slice") and prefix == "cri-containerd"


def last_state_aside(view: dict[str, Any]) -> tuple[dict[str, Any], object]:
    """The kubelet's view without the liveness-restarted container's last state, and that state."""
    kept = json.loads(json.dumps(view))
    return kept, kept.get("liveness-restart", {}).get("containers", {}).get("app", {}).pop("lastState", None)


def test_through_the_proxy_the_kubelet_sees_what_it_sees_directly(direct: Run, proxied: Run) -> None:
    """The liveness-restarted container's last state is reported, not compared (docs/runtimes.md): on a loaded
    machine the emulated node's kubelet has shown it as terminated in one run and as none in the other, both ways
    round (its first attempt gone from the runtime by the time the status is read), the proxy relaying the kubelet's
    RemoveContainer and removing nothing itself. Everything else must be equal."""
    assert proxied.outcome.problems == []
    proxied_view, proxied_last = last_state_aside(proxied.outcome.kubelet)
    direct_view, direct_last = last_state_aside(direct.outcome.kubelet)
    assert proxied_view == direct_view
    if proxied_last != direct_last:
        warnings.warn(f"liveness-restart's last state: {proxied_last} through the proxy, {direct_last} directly "
                      "(the kubelet's timing under emulation: docs/runtimes.md); its journal through the proxy:\n"
                      f"{proxied.kubelet_log}\ndirectly:\n{direct.kubelet_log}")


def test_through_the_proxy_the_runtime_holds_the_same_pods_plus_the_plugins_annotations(
        direct: Run, proxied: Run) -> None:
    stripped, missing = without_edits(proxied.outcome.runtime, nri=False)
    assert missing == []
    assert stripped == direct.outcome.runtime


def test_the_plugins_env_and_resources_land_in_the_container_and_its_cgroup_v2_files(
        direct: Run, proxied: Run) -> None:
    env, resources = proxied.specs["process"]["env"], proxied.specs["linux"]["resources"]
    settings = ExampleSettings()
    assert HOOK_ENV in env and HOOK_ENV not in direct.specs["process"]["env"]
    assert resources["cpu"]["shares"] == settings.cpu_shares
    assert resources["memory"]["limit"] == settings.memory_limit_in_bytes
    assert proxied.specs["cgroup v2"]["memory.max"] == str(settings.memory_limit_in_bytes)
    assert direct.specs["cgroup v2"]["memory.max"] != str(settings.memory_limit_in_bytes)


def test_every_lifecycle_hook_was_called(proxied: Run) -> None:
    assert LIFECYCLE_HOOKS <= set(proxied.hooks), proxied.hooks
    assert proxied.calls["ListContainers"] > 0 and proxied.calls["ExecSync"] > 0, proxied.calls
