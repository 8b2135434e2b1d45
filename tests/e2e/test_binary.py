"""The single-file binaries (scripts/build_binary.sh) on a node without Python.

A root directory holds only the two binaries, the shared libraries they and their bundled extension
modules need from the system (glibc, the dynamic loader, zlib), /dev/urandom and /tmp, for PyInstaller's
extraction; no python3. `chroot ROOT /koord-runtime-proxy` serves a full pod lifecycle between this test and a real
containerd, with a hook plugin on all hooks; `chroot ROOT /runtimeproxyctl` talks to its admin socket.

Paths: the root holds a symlink from its own host path to its "/", so a path under the root means the same
file from the host and from inside the chroot (sockets, the plugin registration, ProxyProcess's flags).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimeproxy import __version__
from runtimeproxy.allocator import wants_huge_pages_reexec
from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.containerd import ContainerdInstance
from rplab.example_plugin import ANNOTATION, ExamplePlugin, registration
from rplab.images import shared_libraries
from rplab.kubelet import run_lifecycle
from rplab.loop import LoopThread
from rplab.process import ProxyProcess

from machinekit import require_command
from packagekit import REPO_ROOT, built_wheel

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_binary.sh"
PROXY, CTL = "koord-runtime-proxy", "runtimeproxyctl"
# glibc's own libraries, which PyInstaller never bundles (it uses the node's): libpython and the bundled
# extension modules link these besides what the bootloader itself links.
GLIBC_LIBRARIES = ("libm.so.6", "librt.so.1", "libutil.so.1", "libdl.so.2", "libpthread.so.0")
URANDOM_DEVICE = (1, 9)  # major, minor of /dev/urandom on Linux
EXTRACTION_PREFIX = "_MEI"  # PyInstaller's onefile extraction directories: <tmp>/_MEIxxxxxx


@pytest.fixture(scope="session")
def binaries(workdir: Path) -> Path:
    """The directory the build script wrote both binaries to (from the same wheel the packaging tests use)."""
    require_command("objdump", "binutils")
    out = workdir / "binaries"
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--wheel", str(built_wheel()), "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


class NodeRoot:
    """A root directory with the binaries and nothing of Python; host sockets bind-mounted into it."""

    def __init__(self, path: Path, binaries: Path, chroot: str) -> None:
        self.path = path
        self._chroot = chroot
        self._binaries = binaries
        self._mounts: list[Path] = []

    def build(self) -> None:
        for name in (PROXY, CTL):
            shutil.copy2(self._binaries / name, self.path / name)
        for library in self.libraries():
            target = self.path / library.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(library.resolve(), target)
        (self.path / "dev").mkdir()
        # gRPC's seed for its hash tables (abseil) reads /dev/urandom: every node has it.
        os.mknod(self.path / "dev" / "urandom", stat.S_IFCHR | 0o666, os.makedev(*URANDOM_DEVICE))
        tmp = self.path / "tmp"
        tmp.mkdir(mode=0o1777)
        (self.path / "run").mkdir()
        mirror = self.path / self.path.relative_to("/")
        mirror.parent.mkdir(parents=True, exist_ok=True)
        mirror.symlink_to("/")

    def libraries(self) -> list[Path]:
        needed = [*shared_libraries(self._binaries / PROXY), *shared_libraries(self._binaries / CTL)]
        libc = next(path for path in needed if path.name == "libc.so.6")
        needed += [libc.parent / name for name in GLIBC_LIBRARIES if (libc.parent / name).exists()]
        return sorted(set(needed))

    def bind_socket(self, socket: str | Path, name: str) -> Path:
        """The host socket, bind-mounted at /run/<name> in the root; returns its host path (valid inside too)."""
        target = self.path / "run" / name
        target.touch()
        subprocess.run(["mount", "--bind", str(socket), str(target)], check=True, capture_output=True)
        self._mounts.append(target)
        return target

    def unmount_all(self) -> None:
        for target in reversed(self._mounts):
            subprocess.run(["umount", str(target)], check=False, capture_output=True)
        self._mounts.clear()

    def command(self, name: str) -> list[str]:
        """Run `name` in the root with a clean environment, as a systemd unit would."""
        return ["env", "-i", self._chroot, str(self.path), f"/{name}"]

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.command(name), *args], capture_output=True, text=True, timeout=60)

    def python_files(self) -> list[Path]:
        return [Path(top) / name for top, dirs, files in os.walk(self.path)
                for name in [*dirs, *files] if name.startswith("python") or name.startswith("libpython")]

    def extraction_dirs(self) -> list[Path]:
        return sorted((self.path / "tmp").glob(f"{EXTRACTION_PREFIX}*"))


@pytest.fixture(scope="module")
def node_root(binaries: Path, containerd: ContainerdInstance, workdir: Path) -> Iterator[NodeRoot]:
    root = NodeRoot(workdir / "node", binaries, require_command("chroot", "coreutils"))
    root.path.mkdir()
    root.build()
    assert root.python_files() == [], "the root must hold no Python"
    assert shutil.which("python3", path=str(root.path / "usr/bin")) is None
    try:
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
    proxy.start()
    try:
        yield proxy
    finally:
        code = proxy.stop()
        assert code == 0, proxy.log_tail()
    assert node_root.extraction_dirs() == [], "the bootloader removes its extraction on exit"


def test_version_without_python(node_root: NodeRoot) -> None:
    assert node_root.run(PROXY, "--version").stdout.strip() == f"{PROXY} {__version__}"
    assert node_root.run(CTL, "--version").stdout.strip() == f"{CTL} {__version__}"


@pytest.mark.usefixtures("kubelet_client")
def test_pod_lifecycle_with_a_plugin_through_the_chrooted_binary(
    chrooted_proxy: ProxyProcess, plugin: tuple[ExamplePlugin, Path], log_dir: Path,
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
    assert lifecycle.step("ListPodSandbox", "by id, removed")["answer"] == {"items": []}
    assert [seen.hook for seen in example.seen] == [
        "PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
        "PreUpdateContainerResources", "PostStopContainer", "PostStopPodSandbox"]


def test_runtimeproxyctl_status_in_the_root(node_root: NodeRoot, chrooted_proxy: ProxyProcess) -> None:
    done = node_root.run(CTL, f"--admin-endpoint={chrooted_proxy.admin_path}", "status", "-o", "json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["version"] == __version__
    assert "example.json" in done.stdout


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _environment(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(entry.partition("=")[::2] for entry in entries if entry)


def test_frozen_reexec_keeps_one_child_and_one_extraction(
    binaries: Path, containerd: ContainerdInstance, workdir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the host (where /sys says whether huge pages help): the CRI-mode re-exec with GLIBC_TUNABLES
    happens in the bootloader's child, which stays the bootloader's only child and reuses its extraction;
    SIGTERM to both, as systemd sends it, stops the proxy cleanly and removes the extraction."""
    base = workdir / "frozen-reexec"
    tmp = base / "tmp"
    tmp.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(tmp))  # where the bootloader extracts (the proxy inherits it)
    proxy = ProxyProcess(base / "rp.sock", containerd.address, command=[str(binaries / PROXY)])
    proxy.start()
    try:
        assert proxy.pid is not None
        (python_pid,) = _children(proxy.pid)  # the bootloader parent waits on one child, re-exec or not
        assert Path(f"/proc/{python_pid}/exe").resolve() == (binaries / PROXY).resolve()
        environment = _environment(python_pid)
        # glibc cuts the variable after the first tunable in place, so only the prefix shows in /proc.
        reexecuted = environment.get("GLIBC_TUNABLES", "").startswith("glibc.malloc.hugetlb=1")
        assert reexecuted == wants_huge_pages_reexec()
        assert len(list(tmp.glob(f"{EXTRACTION_PREFIX}*"))) == 1
        assert "GLIBC_TUNABLES" not in _environment(proxy.pid)
        # systemd's KillMode=control-group signals every process of the unit: the child gets SIGTERM
        # directly and once more forwarded by the bootloader (ProxyProcess.stop signals the bootloader).
        os.kill(python_pid, signal.SIGTERM)
    finally:
        code = proxy.stop()
    assert code == 0, proxy.log_tail()
    assert list(tmp.glob(f"{EXTRACTION_PREFIX}*")) == []
    assert not proxy.listen_path.exists()
