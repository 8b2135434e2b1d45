"""`.venv/bin/python -m rplab` (what scripts/lab.sh runs): a local lab on this machine, end to end.

Starts a private containerd (offline images, temporary root), the example hook
plugin (its own process, registered for all seven hooks) and the proxy in front of
containerd; drives a pod lifecycle through the proxy, printing every step and what
the plugin changed; then removes everything. `--keep` leaves it all running until
Ctrl-C or SIGTERM (a background job too), for crictl & co., printing every path and command
to use it (rplab.lab_guide).

`--conformance` instead builds the offline world the CRI conformance suite expects
(local registry with critest's images, CNI bridge) and runs critest direct, through
the proxy, and through the proxy with an echo plugin on all seven hooks; junit reports
go to $RUNTIMEPROXY_REPORT_DIR (default <repo>/reports).

`--docker` runs the same through cri-dockerd, the proxy in Docker mode and a private
dockerd (see rplab/docker_lab.py); without cri-dockerd it replays cri-dockerd's requests itself.

`--runtime NAME` picks the containerd or dockerd of the runtime matrix (rplab/runtimes.py), e.g.
`--runtime containerd-2.1` or `--runtime dockerd-28`; default: this machine's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import TypeVar

from rplab.conformance import (
    ConformanceLab, conformance_prerequisites, conformance_verdict, report_dir, run_conformance,
)
from rplab.containerd import ContainerdInstance, check_prerequisites
from rplab.critest import CritestResult
from rplab.cri import CriClient, open_channel
from rplab.docker_lab import docker_environment, docker_lab_problem, replay_lifecycle, show_docker_effects
from rplab.images import IMAGE_CACHE, LAB_IMAGES, build_and_import
from rplab.lab_guide import CGROUP_HIERARCHY, guide, pod_cgroup_parent
from rplab.example_plugin import LAB_ARGUMENTS, plugin_process, registration
from rplab.process import ProxyProcess
from rplab.peers import PeerBuildError
from rplab.runtimes import RUNTIMES, SELECTED_BY, Runtime
from rplab.tools import find_tool, missing_tool_message
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.usage import OneLineParser

T = TypeVar("T")


def step(label: str, action: Callable[[], T]) -> T:
    started = time.perf_counter()
    result = action()
    elapsed = (time.perf_counter() - started) * 1000
    shown = f" -> {result}" if isinstance(result, str) and result else ""
    print(f"  {label:<44} {elapsed:8.1f} ms{shown}", flush=True)
    return result


@contextmanager
def lab_environment(base: Path) -> Iterator[tuple[ContainerdInstance, ProxyProcess]]:
    with ExitStack() as stack:
        containerd = ContainerdInstance(base / "containerd")
        step("start containerd (private root)", containerd.start)
        stack.callback(containerd.stop)
        step("build + import offline OCI images", lambda: build_and_import(containerd.address, IMAGE_CACHE) and "")
        plugin_socket = base / "plugin" / "example.sock"
        step("start the example plugin", lambda: start_plugin(stack, plugin_socket, base / "plugin-requests.jsonl"))
        proxy = ProxyProcess(base / "proxy" / "runtimeproxy.sock", containerd.address)
        proxy.hook_config_dir.mkdir(parents=True)
        (proxy.hook_config_dir / "example.json").write_bytes(registration(plugin_socket, list(HOOK_NAMES)))
        step("start koord-runtime-proxy", proxy.start)
        stack.callback(proxy.stop)
        yield containerd, proxy


def start_plugin(stack: ExitStack, socket: Path, record: Path) -> str:
    """The example plugin as its own process, stopped with the stack."""
    plugin = stack.enter_context(plugin_process(socket, record, *LAB_ARGUMENTS))
    return f"pid {plugin.pid}"


def show_plugin_effects(client: CriClient, container_id: str, pod_id: str) -> None:
    spec = json.loads(client.container_status(container_id, verbose=True).info["info"])["runtimeSpec"]
    cpu = spec["linux"]["resources"].get("cpu", {})
    memory = spec["linux"]["resources"].get("memory", {})
    print(f"    OCI spec: cpu.shares={cpu.get('shares')} memory.limit={memory.get('limit')} "
          f"cgroupsPath={spec['linux']['cgroupsPath']}")
    annotations = client.pod_status(pod_id).status.annotations
    print(f"    pod annotations: {dict(annotations)}")


def pod_lifecycle(client: CriClient, log_dir: Path, show_effects: Callable[[str, str], None]) -> None:
    uid = str(uuid.uuid4())
    pod_config = client.pod_config("lab-pod", log_dir, labels={"app": "lab"}, uid=uid,
                                   cgroup_parent=pod_cgroup_parent(uid))
    version = step("Version", lambda: client.runtime.Version(client.api.VersionRequest(), timeout=10))
    print(f"    runtime: {version.runtime_name} {version.runtime_version} (CRI {version.runtime_api_version})")
    pod_id = step("RunPodSandbox", lambda: client.run_pod(pod_config))
    config = client.container_config("app", envs={"LAB": "through-the-proxy"})
    container_id = step("CreateContainer", lambda: client.create_container(pod_id, config, pod_config))
    step("StartContainer", lambda: client.start_container(container_id))
    command = ["sh", "-c", "echo LAB=$LAB EXAMPLE_PLUGIN=$EXAMPLE_PLUGIN"]
    result = step("ExecSync: echo $LAB $EXAMPLE_PLUGIN", lambda: client.exec_sync(container_id, command))
    print(f"    container says: {result.stdout.decode().strip()}")
    show_effects(container_id, pod_id)
    status = step("ContainerStatus", lambda: client.container_status(container_id))
    print(f"    state: {client.api.ContainerState.Name(status.status.state)}")
    step("StopContainer", lambda: client.stop_container(container_id))
    step("RemoveContainer", lambda: client.remove_container(container_id))
    step("StopPodSandbox", lambda: client.stop_pod(pod_id))
    step("RemovePodSandbox", lambda: client.remove_pod(pod_id))


def conformance(base: Path) -> int:
    """critest direct, through the proxy and through the proxy + echo plugin; 0 when they all agree."""
    problem = conformance_prerequisites()
    try:
        critest = find_tool("critest")
    except PeerBuildError as error:
        problem, critest = f"{problem or ''} {error}".strip(), None
    if problem or critest is None:
        print(f"lab: cannot run the conformance suite here: {problem}", file=sys.stderr)
        return 1
    reports = report_dir()

    def show(target: str, result: CritestResult, report: Path) -> None:
        print(f"  critest {target:<13} {result.counts()}  junit: {report}", flush=True)

    with ConformanceLab(base / "conf") as lab:
        print(f"conformance lab: containerd {lab.containerd.address}, registry {lab.registry.url}, "
              f"bridge {lab.bridge}; critest {critest}")
        verdict = conformance_verdict(run_conformance(lab, critest, reports, show))
    print(f"conformance: {verdict or 'the proxy passes everything that passes direct'}")
    return 1 if verdict else 0


def print_plugin_requests(base: Path) -> None:
    print("hooks the example plugin received, in order:")
    for line in (base / "plugin-requests.jsonl").read_text().splitlines():
        print(f"  {json.loads(line)['hook']}")


def wait_until_stopped(base: Path, cri_socket: Path, proxy: ProxyProcess) -> None:
    """--keep: say what is running and every command to use it (rplab.lab_guide), then wait for Ctrl-C or SIGTERM.
    From here on an interrupt is the end a kept lab waits for: it is noted, never raised, so it cannot land inside
    a gRPC call of the guide (an exception there could leave the channel's locks held and its close hanging)."""
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with open_channel(cri_socket) as channel:
            print(guide(base, cri_socket, proxy, CriClient(channel)), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def remove_lab_cgroups() -> None:
    """The lab's pods' cgroup parents outlive them (runc removes a container's own cgroup; cgroup v1 leaves the
    empty directories above it): remove what is left of the lab's hierarchy, deepest first."""
    for top in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_HIERARCHY}"):
        directories = [top, *(path for path in top.rglob("*") if path.is_dir())]
        for directory in sorted(directories, key=lambda path: len(path.parts), reverse=True):
            try:
                directory.rmdir()
            except OSError:
                pass  # still in use


def run_containerd(base: Path, keep: bool) -> None:
    with lab_environment(base) as (containerd, proxy):
        print(f"  proxy socket: {proxy.listen_path}  ->  containerd: {containerd.address}")
        print("pod lifecycle through the proxy:")
        with open_channel(proxy.listen_path) as channel:
            client = CriClient(channel)
            pod_lifecycle(client, base / "pod-logs", lambda cid, pid: show_plugin_effects(client, cid, pid))
        print_plugin_requests(base)
        if keep:
            wait_until_stopped(base, proxy.listen_path, proxy)


def run_docker(base: Path, keep: bool) -> None:
    if find_tool("cri-dockerd") is None:
        print(f"lab: {missing_tool_message('cri-dockerd')}; replaying cri-dockerd's requests instead")
        print("cri-dockerd's requests for a pod's life, replayed through the proxy:")
        replay_lifecycle(base, IMAGE_CACHE, start_plugin, step)
        print_plugin_requests(base)
        return
    with docker_environment(base, IMAGE_CACHE, start_plugin, step) as (dockerd, proxy, cri):
        print(f"  cri-dockerd: {cri.socket}  ->  proxy (Docker mode)  ->  dockerd: {dockerd.socket}")
        print("pod lifecycle through cri-dockerd and the proxy:")
        (base / "pod-logs" / "app").mkdir(parents=True)  # cri-dockerd links logs there; containerd creates it
        with open_channel(cri.socket) as channel:
            pod_lifecycle(CriClient(channel), base / "pod-logs",
                          lambda cid, pid: show_docker_effects(dockerd, cid, pid))
        print_plugin_requests(base)
        if keep:
            wait_until_stopped(base, cri.socket, proxy)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=".venv/bin/python -m rplab", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep containerd and the proxy running until Ctrl-C")
    parser.add_argument("--conformance", action="store_true",
                        help="run critest direct, through the proxy and through the proxy + an echo plugin")
    parser.add_argument("--docker", action="store_true",
                        help="Docker mode: cri-dockerd -> the proxy -> a private dockerd")
    parser.add_argument("--runtime", metavar="NAME", choices=sorted(RUNTIMES),
                        help="which containerd or dockerd (a dockerd implies --docker): "
                             + ", ".join(RUNTIMES) + "; fetched on first use (.venv/bin/python -m rplab.runtimes list)")
    args = parser.parse_args(argv)
    if args.runtime:
        args.docker = args.docker or choose_runtime(args.runtime).kind == "dockerd"
    problem = docker_lab_problem() if args.docker else check_prerequisites()
    if problem:
        print(f"lab: cannot run here: {problem}", file=sys.stderr)
        return 1
    # Ctrl-C and SIGTERM clean up alike, in the foreground and in the background: a shell starts a `&` job with
    # SIGINT ignored, and Python then leaves it so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    base = Path(tempfile.mkdtemp(prefix="rp-lab-", dir="/tmp"))
    try:
        if args.conformance:
            return conformance(base)
        print(f"runtimeproxy lab in {base}", flush=True)
        if args.docker:
            run_docker(base, args.keep)
        else:
            run_containerd(base, args.keep)
        print("lab finished: everything stopped and removed")
        return 0
    except KeyboardInterrupt:
        print("lab interrupted: everything stopped and removed")
        return 130
    finally:
        remove_lab_cgroups()
        shutil.rmtree(base, ignore_errors=True)


def choose_runtime(name: str) -> Runtime:
    """Select runtime ``name`` for everything this process starts (its kind's environment variable), fetched."""
    runtime = RUNTIMES[name]
    os.environ[SELECTED_BY[runtime.kind]] = name
    print(f"runtime: {name} ({runtime.source})", flush=True)
    runtime.fetch()
    return runtime


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
