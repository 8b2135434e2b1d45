"""The release bundle (rplab.release, scripts/build_binary.sh) on an old node without Python.

The node is a Debian 11 root made with debootstrap (glibc 2.31, no python3), the bundle installed at
/opt/koord-runtime-proxy/bin as the tarball and the .deb put it, /tmp a `noexec` tmpfs as on hardened nodes.
`chroot ROOT /opt/koord-runtime-proxy/bin/koord-runtime-proxy` serves a full pod lifecycle between the kubelet's
own CRI client and a real containerd, with a hook plugin on all hooks; `runtimeproxyctl` (a link to the same
executable) talks to its admin socket. The bundle runs in place: one process, nothing unpacked anywhere.

Paths: the root holds a symlink from its own host path to its "/", so a path under the root means the same
file from the host and from inside the chroot (sockets, the plugin registration, ProxyProcess's flags).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy import __version__
from runtimeproxy.allocator import wants_huge_pages_reexec
from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.containerd import ContainerdInstance
from rplab.example_plugin import ANNOTATION, ExamplePlugin, registration
from rplab.kubelet import run_lifecycle
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from rplab.node_layout import CTL, INSTALL_DIR, PROXY
from rplab.roots import make_root, unpack

from tests.kits.machine import require_command

NODE_SUITE, NODE_GLIBC = "bullseye", "2.31"


class NodeRoot:
    """A Debian 11 root with the bundle installed and nothing of Python; host sockets bind-mounted into it."""

    def __init__(self, path: Path, bundle: Path) -> None:
        self.path = path
        self._mounts: list[Path] = []
        unpack(make_root(NODE_SUITE), path)
        shutil.copytree(bundle, path / INSTALL_DIR.lstrip("/") / "bin", symlinks=True)
        (path / "run").mkdir(exist_ok=True)
        self._mount(["-t", "tmpfs", "-o", "noexec,nosuid,nodev,mode=1777", "tmpfs"], path / "tmp")
        self._mount(["-t", "proc", "proc"], path / "proc")
        # After the tmpfs: the root's own host path is under /tmp here.
        mirror = path / path.relative_to("/")
        mirror.parent.mkdir(parents=True, exist_ok=True)
        mirror.symlink_to("/")
        self._mirror_top = path.relative_to("/").parts[0:2]

    def _mount(self, options: list[str], target: Path) -> None:
        subprocess.run(["mount", *options, str(target)], check=True, capture_output=True)
        self._mounts.append(target)

    def bind_socket(self, socket: str | Path, name: str) -> Path:
        """The host socket, bind-mounted at /run/<name> in the root; returns its host path (valid inside too)."""
        target = self.path / "run" / name
        target.touch()
        self._mount(["--bind", str(socket)], target)
        return target

    def unmount_all(self) -> None:
        for target in reversed(self._mounts):
            subprocess.run(["umount", "--lazy", str(target)], check=False, capture_output=True)
        self._mounts.clear()

    def command(self, name: str) -> list[str]:
        """Run `name` in the root with a clean environment, as a systemd unit would."""
        return ["env", "-i", require_command("chroot", "coreutils"), str(self.path), f"{INSTALL_DIR}/bin/{name}"]

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.command(name), *args], capture_output=True, text=True, timeout=60)

    def glibc(self) -> str:
        done = subprocess.run(["chroot", str(self.path), "ldd", "--version"], capture_output=True, text=True)
        return re.findall(r"\d+\.\d+", done.stdout.splitlines()[0])[-1]

    def tmp_entries(self) -> list[str]:
        """What /tmp holds besides the root's own host path (its link to "/")."""
        mirror = Path("/", *self._mirror_top)
        return sorted(name for name in os.listdir(self.path / "tmp") if Path("/tmp", name) != mirror)


@pytest.fixture(scope="module")
def node_root(bundle: Path, containerd: ContainerdInstance, workdir: Path) -> Iterator[NodeRoot]:
    root = NodeRoot(workdir / "node", bundle)
    try:
        assert root.glibc() == NODE_GLIBC
        assert not (root.path / "usr/bin/python3").exists(), "the node must have no Python"
        root.bind_socket(containerd.address, "containerd.sock")
        yield root
    finally:
        root.unmount_all()


@pytest.fixture(scope="module")
def plugin(node_root: NodeRoot, loop_thread: LoopThread) -> Iterator[tuple[ExamplePlugin, Path]]:
    """The example plugin, served from this test process on a socket inside the root."""
    plugin = ExamplePlugin()
    socket = node_root.path / "run" / "plugin.sock"
    loop_thread.run(plugin.start(socket))
    yield plugin, socket
    loop_thread.run(plugin.stop())


@pytest.fixture(scope="module")
def chrooted_proxy(node_root: NodeRoot, plugin: tuple[ExamplePlugin, Path]) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(node_root.path / "run" / "rp" / "rp.sock", node_root.path / "run" / "containerd.sock",
                         command=node_root.command(PROXY), extra_args=["--log-level=debug"])
    proxy.hook_config_dir.mkdir(parents=True)
    (proxy.hook_config_dir / "example.json").write_bytes(registration(plugin[1], list(HOOK_NAMES)))
    try:
        proxy.start()
    except BaseException:
        proxy.stop()  # a start that failed leaves no process behind
        raise
    try:
        yield proxy
    finally:
        code = proxy.stop()
        assert code == 0, proxy.log_tail()


def test_version_on_glibc_2_31_without_python(node_root: NodeRoot) -> None:
    assert node_root.run(PROXY, "--version").stdout.strip() == f"{PROXY} {__version__}"
    assert node_root.run(CTL, "--version").stdout.strip() == f"{CTL} {__version__}"


@pytest.mark.usefixtures("kubelet_client")
def test_pod_lifecycle_with_a_plugin_through_the_chrooted_bundle_with_a_noexec_tmp(
    node_root: NodeRoot, chrooted_proxy: ProxyProcess, plugin: tuple[ExamplePlugin, Path], log_dir: Path,
) -> None:
    example, _ = plugin
    # The kubelet's side: its own CRI client over a pod's life (rplab.kubelet).
    lifecycle = run_lifecycle(chrooted_proxy.listen_path, log_dir, pod_name="binary-pod", binary_env=False)
    assert lifecycle.unexpected_failures() == {}
    assert "EXAMPLE_PLUGIN=hello" in lifecycle.container_env()
    running = lifecycle.running_container()
    assert running["status"]["annotations"][ANNOTATION] == "PreCreateContainer"
    spec = running["info"]["info"]["runtimeSpec"]
    assert spec["linux"]["resources"]["cpu"]["shares"] == example.settings.cpu_shares
    assert [seen.hook for seen in example.seen] == [
        "PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
        "PreUpdateContainerResources", "PostStopContainer", "PostStopPodSandbox"]
    assert node_root.tmp_entries() == [], "nothing is unpacked into the temporary directory"


def test_runtimeproxyctl_status_in_the_root(node_root: NodeRoot, chrooted_proxy: ProxyProcess) -> None:
    done = node_root.run(CTL, f"--admin-endpoint={chrooted_proxy.admin_path}", "status", "-o", "json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["version"] == __version__
    assert "example.json" in done.stdout


def test_one_process_and_a_kill_leaves_nothing_behind(
        node_root: NodeRoot, containerd: ContainerdInstance, workdir: Path) -> None:
    """The pid systemd starts is the proxy (no bootloader parent to be killed apart from it); SIGKILL leaves
    nothing behind but the socket's lock, which the next start takes over."""
    base = node_root.path / "run" / "killed"
    proxy = ProxyProcess(base / "rp.sock", node_root.path / "run" / "containerd.sock",
                         command=node_root.command(PROXY))
    for _ in range(2):
        try:
            proxy.start()
            assert proxy.pid is not None
            children = Path(f"/proc/{proxy.pid}/task/{proxy.pid}/children").read_text().split()
            assert children == [], "env -i execs chroot, which execs the bundle: one process, one pid"
            assert Path(f"/proc/{proxy.pid}/exe").resolve().name == PROXY
            os.kill(proxy.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while proxy.returncode() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.returncode() == -signal.SIGKILL
        finally:
            proxy.stop()  # nothing left running whatever failed
        assert node_root.tmp_entries() == []


def test_the_huge_pages_reexec_keeps_the_pid_on_the_host(
        bundle: Path, containerd: ContainerdInstance, workdir: Path) -> None:
    """On the host (glibc 2.36, where /sys says whether huge pages help): the CRI-mode re-exec with
    GLIBC_TUNABLES replaces the process image in place, so the pid systemd started is still the proxy."""
    proxy = ProxyProcess(workdir / "bundle-reexec" / "rp.sock", containerd.address, command=[str(bundle / PROXY)])
    proxy.start()
    try:
        assert proxy.pid is not None
        assert Path(f"/proc/{proxy.pid}/task/{proxy.pid}/children").read_text().split() == []
        environment = Path(f"/proc/{proxy.pid}/environ").read_bytes().split(b"\0")
        # glibc cuts the variable after the first tunable in place, so only the prefix shows in /proc.
        reexecuted = any(entry.startswith(b"GLIBC_TUNABLES=glibc.malloc.hugetlb=1") for entry in environment)
        assert reexecuted == wants_huge_pages_reexec()
    finally:
        assert proxy.stop() == 0, proxy.log_tail()
