"""Start and stop a real, private containerd (with its CRI plugin) for the lab and the e2e tests.

Every path the daemon uses lives under one base directory: root, state, sockets, runc state, CNI config,
temp dir, log. Two things cannot be private in containerd 1.6: shim sockets always go to
``/run/containerd/s/``, and runc containers are real processes. So ``stop()`` first removes every pod
sandbox through CRI, then sweeps any remaining containerd task/container with ``ctr``, and only then stops
the daemon and unmounts whatever is left under the base directory.

Host-network pods need no CNI; pod-network pods need a network in the private CNI conf dir
(``rplab.cni`` writes a bridge). Pulls go nowhere unless ``registry_config_path`` names a
``certs.d`` mirror config (``rplab.registry``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from rplab.cri import CriClient, open_channel
from rplab.images import CRI_NAMESPACE, PAUSE_IMAGE, build_and_import, find_busybox, shared_libraries
from rplab.process import end_process
from rplab.runtimes import Runtime, selected

DEFAULT_CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
SHIM_SOCKET_DIR = Path("/run/containerd/s")  # fixed in containerd 1.6, whatever the config says
UNIX_PATH_MAX = 107  # sun_path holds 108 bytes including the NUL
# containerd's NRI defaults (5 s, 2 s) are tight for a plugin started on a shared 2-core test machine.
NRI_REGISTRATION_TIMEOUT = "15s"
NRI_REQUEST_TIMEOUT = "10s"



class ContainerdError(RuntimeError):
    """The lab containerd failed to start, answer or stop."""


def check_prerequisites() -> str | None:
    """None when this machine can run the lab, else a human-readable reason (for skip/fail messages)."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append("must run as root (containerd and runc need it)")
    for binary, package in (("containerd", "containerd"), ("containerd-shim-runc-v2", "containerd"),
                            ("ctr", "containerd"), ("runc", "runc"), ("gcc", "gcc"), ("ldd", "libc-bin")):
        if shutil.which(binary) is None:
            problems.append(f"{binary} not found (apt-get install -y {package})")
    busybox = find_busybox()
    if busybox is None:
        problems.append("busybox not found (apt-get install -y busybox)")
    elif shutil.which("ldd") and not shared_libraries(busybox):
        problems.append(f"{busybox} is static; the lab needs Debian's dynamic busybox (apt-get install -y busybox)")
    try:
        import grpc  # noqa: F401
    except ImportError:
        problems.append("python package grpcio is not installed")
    return "; ".join(problems) or None




def _toml_str(value: str | Path) -> str:
    return json.dumps(str(value))  # JSON string escapes are valid TOML basic strings


def _mount_points() -> list[str]:
    """Mount points of this mount namespace, from /proc/self/mountinfo (octal escapes decoded)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            raw = line.split()[4]
            points.append(raw.encode("utf-8", "surrogateescape").decode("unicode_escape"))
    return points


def _unmount(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    if libc.umount2(path.encode(), mnt_detach) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def _process_args(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@contextmanager
def lab_containerd(base_dir: Path, image_cache: Path, runtime: Runtime | None = None,
                   nri: bool = False, nri_default_validator: str = "") -> Iterator[ContainerdInstance]:
    """A started ``ContainerdInstance`` in ``base_dir`` (of ``runtime``, else the selected containerd; its own NRI on
    with ``nri``) with the lab's images imported (built, or reused from ``image_cache``), stopped when the block
    ends."""
    instance = ContainerdInstance(base_dir, runtime=runtime, nri=nri, nri_default_validator=nri_default_validator)
    instance.start()
    try:
        build_and_import(instance.address, image_cache)
        yield instance
    finally:
        instance.stop()


class ContainerdInstance:
    """A private containerd daemon rooted at ``base_dir`` (created if needed).

    Use as a context manager, or call ``start()`` and ``stop()``. ``address`` is the gRPC socket, for both
    ``ctr -a`` and CRI clients (``unix://`` + address).
    """

    def __init__(self, base_dir: Path, *, sandbox_image: str = PAUSE_IMAGE, log_level: str = "info",
                 cni_bin_dir: str = DEFAULT_CNI_BIN_DIR, registry_config_path: Path | None = None,
                 runtime: Runtime | None = None, nri: bool = False, systemd_cgroup: bool = False,
                 nri_default_validator: str = "") -> None:
        """``runtime``: which containerd (rplab.runtimes); by default the one $RUNTIMEPROXY_RUNTIME names.
        ``nri``: containerd's own NRI on, serving ``nri_socket`` (private) and launching no plugin of its own
        (1.6 has no NRI: refused); off, it is disabled (2.x would otherwise open the host-wide socket).
        ``systemd_cgroup``: runc's systemd cgroup driver (a node with systemd as PID 1: rplab.guest)."""
        self.base_dir = Path(base_dir).absolute()
        self.runtime = runtime or selected("containerd")
        self.registry_config_path = registry_config_path  # a certs.d directory of hosts.toml files
        self.sandbox_image = sandbox_image
        self.log_level = log_level
        self.cni_bin_dir = cni_bin_dir
        if nri and (self.runtime.major, self.runtime.minor) < (1, 7):
            raise ContainerdError(f"{self.runtime.name} has no NRI (containerd 1.7 and later have)")
        self.nri = nri
        # The keys of containerd/nri's built-in default validator table (TOML lines), when NRI is on.
        self.nri_default_validator = nri_default_validator
        self.systemd_cgroup = systemd_cgroup
        self._proc: subprocess.Popen[bytes] | None = None
        self.removed_containers: list[tuple[str, str]] = []
        if len(str(self.address)) + len(".ttrpc") > UNIX_PATH_MAX:
            raise ContainerdError(f"socket path too long for a unix socket: {self.address} (use a shorter base dir)")

    # -- paths ---------------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """Path of containerd's gRPC socket (serves containerd's API and CRI runtime.v1 / v1alpha2)."""
        return str(self.base_dir / "containerd.sock")

    @property
    def endpoint(self) -> str:
        """gRPC target for CRI clients."""
        return "unix://" + self.address

    @property
    def nri_socket(self) -> Path:
        """Where containerd's own NRI serves plugins (when started with ``nri=True``)."""
        return self.base_dir / "nri.sock"

    @property
    def cdi_spec_dir(self) -> Path:
        """Where containerd 1.7+ reads CDI specs (its CDI on, private: never the host's /etc/cdi, /var/run/cdi)."""
        return self.base_dir / "cdi"

    def _cdi_settings(self) -> str:
        """containerd 1.7+'s CDI, private (1.7: off by default; 2.x: always on, with the host's spec directories)."""
        if (self.runtime.major, self.runtime.minor) < (1, 7):
            return ""
        enable = "    enable_cdi = true\n" if self.runtime.major == 1 else ""
        return f"""{enable}    cdi_spec_dirs = [{_toml_str(self.cdi_spec_dir)}]
"""

    @property
    def log_path(self) -> Path:
        return self.base_dir / "containerd.log"

    @property
    def config_path(self) -> Path:
        return self.base_dir / "config.toml"

    @property
    def root(self) -> Path:
        return self.base_dir / "root"

    @property
    def state(self) -> Path:
        return self.base_dir / "state"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base_dir / "cni" / "net.d"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- config --------------------------------------------------------------------------------------------

    def config_toml(self) -> str:
        """The config file of this runtime: version 2 (1.6, 1.7) or 3 (2.x), every path private to ``base_dir``."""
        return self._config_v3() if self.runtime.major >= 2 else self._config_v2()

    def _config_head(self, version: int) -> str:
        b = self.base_dir
        return f"""\
version = {version}
root = {_toml_str(self.root)}
state = {_toml_str(self.state)}
temp = {_toml_str(b / "tmp")}
disabled_plugins = []
oom_score = 0

[grpc]
  address = {_toml_str(self.address)}

[ttrpc]
  address = {_toml_str(self.address + ".ttrpc")}

[debug]
  address = {_toml_str(b / "debug.sock")}
  level = {_toml_str(self.log_level)}

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = {_toml_str(b / "opt")}

{self._nri_section()}"""

    def _nri_section(self) -> str:
        """containerd's own NRI: on by default from 2.0, where it would open the host-wide /var/run/nri/nri.sock
        and launch /opt/nri/plugins; here off, or on with every path private."""
        b = self.base_dir
        return f"""
  [plugins."io.containerd.nri.v1.nri"]
    disable = {str(not self.nri).lower()}
    socket_path = {_toml_str(self.nri_socket)}
    plugin_path = {_toml_str(b / "nri" / "plugins")}
    plugin_config_path = {_toml_str(b / "nri" / "conf.d")}
    plugin_registration_timeout = "{NRI_REGISTRATION_TIMEOUT}"
    plugin_request_timeout = "{NRI_REQUEST_TIMEOUT}"
""" + (f"""
  [plugins."io.containerd.nri.v1.nri".default_validator]
{self.nri_default_validator}""" if self.nri_default_validator else "")

    def _runc_runtime(self, runtimes: str) -> str:
        return f"""
      [{runtimes}.runc]
        runtime_type = "io.containerd.runc.v2"

        [{runtimes}.runc.options]
          SystemdCgroup = {str(self.systemd_cgroup).lower()}
          Root = {_toml_str(self.base_dir / "runc")}
"""

    def _config_v2(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return self._config_head(2) + f"""
  [{cri}]
    sandbox_image = {_toml_str(self.sandbox_image)}
    # Root here lacks CAP_SYS_RESOURCE: without this every RunPodSandbox fails in runc.
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_tls_streaming = false
    disable_tcp_service = true
    max_container_log_line_size = 16384
    netns_mounts_under_state_dir = true
{self._cdi_settings()}
{self._registry_section(cri)}
    [{cri}.cni]
      bin_dir = {_toml_str(self.cni_bin_dir)}
      conf_dir = {_toml_str(self.cni_conf_dir)}

    [{cri}.containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
""" + self._runc_runtime(f"{cri}.containerd.runtimes")

    def _config_v3(self) -> str:
        """containerd 2.x: the CRI plugin's settings split into the images, runtime and grpc plugins."""
        images, runtime = 'plugins."io.containerd.cri.v1.images"', 'plugins."io.containerd.cri.v1.runtime"'
        transfer = "" if self.registry_config_path is None else f"""
  [plugins."io.containerd.transfer.v1.local"]
    config_path = {_toml_str(self.registry_config_path)}
"""
        return self._config_head(3) + f"""
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_tls_streaming = false
    disable_tcp_service = true
{transfer}
  [{images}]
    snapshotter = "overlayfs"

    [{images}.pinned_images]
      sandbox = {_toml_str(self.sandbox_image)}

{self._registry_section(images)}
  [{runtime}]
    # Root here lacks CAP_SYS_RESOURCE: without this every RunPodSandbox fails in runc.
    restrict_oom_score_adj = true
    max_container_log_line_size = 16384
    netns_mounts_under_state_dir = true
{self._cdi_settings()}
    [{runtime}.cni]
      bin_dirs = [{_toml_str(self.cni_bin_dir)}]
      conf_dir = {_toml_str(self.cni_conf_dir)}

    [{runtime}.containerd]
      default_runtime_name = "runc"
""" + self._runc_runtime(f"{runtime}.containerd.runtimes")

    def _registry_section(self, plugin: str) -> str:
        if self.registry_config_path is None:
            return ""
        return f"""    [{plugin}.registry]
      config_path = {_toml_str(self.registry_config_path)}
"""

    def write_config(self) -> Path:
        for d in (self.base_dir, self.root, self.state, self.base_dir / "tmp", self.base_dir / "opt",
                  self.base_dir / "runc", self.cni_conf_dir, self.base_dir / "nri" / "plugins",
                  self.base_dir / "nri" / "conf.d", self.cdi_spec_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_toml())
        return self.config_path

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start containerd and wait until its CRI service answers; raises ContainerdError otherwise."""
        if self.running:
            return
        self.write_config()
        for sock in (self.address, self.address + ".ttrpc", str(self.base_dir / "debug.sock")):
            Path(sock).unlink(missing_ok=True)  # stale, from a killed run
        binary = self.runtime.binary("containerd")
        with open(self.log_path, "ab") as log:  # its PATH leads it to its own shim
            self._proc = subprocess.Popen([str(binary), "--config", str(self.config_path)], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=log, start_new_session=True,
                                          env=self.runtime.environment())
        try:
            self._wait_ready(timeout)
        except BaseException:
            self._terminate(5.0)
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = "socket not created"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.returncode if self._proc else None
                raise ContainerdError(f"containerd exited with status {code} while starting\n{self.log_tail()}")
            if os.path.exists(self.address):
                try:
                    self.cri_version()
                    return
                except Exception as exc:  # grpc.RpcError or a connection error: not ready yet
                    last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            time.sleep(0.1)
        raise ContainerdError(f"containerd CRI not ready after {timeout:.0f}s ({last_error})\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """Remove all pods and containers, stop containerd, kill stray shims and unmount leftovers.

        Afterwards ``removed_containers`` lists the (namespace, id) of every container that was cleaned up.
        """
        errors: list[str] = []
        if self.running:
            try:
                self.removed_containers = self.container_refs()
            except Exception as exc:
                errors.append(f"listing containers: {exc}")
            try:
                self.remove_all_pods()
            except Exception as exc:
                errors.append(f"CRI pod cleanup: {exc}")
            try:
                self.remove_all_containers()
            except Exception as exc:
                errors.append(f"ctr container cleanup: {exc}")
        self._terminate(timeout)
        for pid in self.shim_pids():
            errors.append(f"killed stray shim {pid}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns, cid in self.removed_containers:
            self.shim_socket(ns, cid).unlink(missing_ok=True)  # only left behind by a killed shim
        self.unmount_all()
        if errors:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write("".join(f"lab stop: {e}\n" for e in errors))

    def _terminate(self, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            end_process(proc, timeout)

    def __enter__(self) -> ContainerdInstance:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- cleanup helpers -----------------------------------------------------------------------------------

    def _cri(self) -> CriClient:
        return CriClient(open_channel(self.address))

    def cri_version(self) -> str:
        """CRI runtime.v1 Version: "<runtime_name> <runtime_version> <runtime_api_version>"."""
        client = self._cri()
        with client.channel:
            reply = client.runtime.Version(client.api.VersionRequest(), timeout=2.0)
        return f"{reply.runtime_name} {reply.runtime_version} {reply.runtime_api_version}"

    def pod_sandbox_ids(self) -> list[str]:
        """IDs of all pod sandboxes CRI knows (ListPodSandbox without filter)."""
        client = self._cri()
        with client.channel:
            return client.pod_ids()

    def remove_all_pods(self) -> list[str]:
        """StopPodSandbox + RemovePodSandbox for every pod (removes their containers too); returns the IDs."""
        import grpc

        client = self._cri()
        failures = []
        with client.channel:
            ids = client.pod_ids()
            for pod_id in ids:
                for step in (client.stop_pod, client.remove_pod):
                    try:
                        step(pod_id)
                    except grpc.RpcError as exc:
                        if exc.code() != grpc.StatusCode.NOT_FOUND:  # 1.6 says NotFound for a gone pod
                            failures.append(f"{step.__name__} {pod_id}: {exc.code().name} {exc.details()}")
        if failures:
            raise ContainerdError("; ".join(failures))
        return ids

    def cri_image_tags(self) -> list[str]:
        """repo_tags of every image CRI lists (ImageService.ListImages), as kubelet would see them."""
        client = self._cri()
        with client.channel:
            return client.image_tags()
    def ctr(self, *args: str, namespace: str | None = CRI_NAMESPACE, check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``ctr -a <address> [-n namespace] args...`` and return the completed process."""
        cmd = [str(self.runtime.binary("ctr")), "-a", self.address, *(["-n", namespace] if namespace else []), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise ContainerdError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def container_refs(self) -> list[tuple[str, str]]:
        """(namespace, container id) of every containerd container, CRI's (sandboxes included) or not."""
        return [(ns, cid) for ns in self.ctr("namespaces", "ls", "-q", namespace=None).stdout.split()
                for cid in self.ctr("containers", "ls", "-q", namespace=ns).stdout.split()]

    def remove_all_containers(self) -> None:
        """Kill and delete every task and container in every namespace (what CRI cleanup did not remove)."""
        for ns in self.ctr("namespaces", "ls", "-q", namespace=None).stdout.split():
            for task in self.ctr("tasks", "ls", "-q", namespace=ns).stdout.split():
                self.ctr("tasks", "delete", "--force", task, namespace=ns, check=False)
            containers = self.ctr("containers", "ls", "-q", namespace=ns).stdout.split()
            if containers:
                self.ctr("containers", "rm", *containers, namespace=ns, check=False)

    def shim_socket(self, namespace: str, container_id: str) -> Path:
        """Where containerd 1.6 puts the shim socket of a task: /run/containerd/s/sha256(address/ns/id)."""
        key = os.path.join(self.address, namespace, container_id)
        return SHIM_SOCKET_DIR / hashlib.sha256(key.encode()).hexdigest()

    def shim_pids(self) -> list[int]:
        """PIDs of containerd-shim processes that belong to this instance (started with its address)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                args = _process_args(int(entry.name))
                if args and "containerd-shim" in os.path.basename(args[0]) and self.address in args:
                    pids.append(int(entry.name))
        return pids

    def mounts(self) -> list[str]:
        """Mount points under ``base_dir`` (empty once the instance is cleanly stopped)."""
        prefixes = {str(self.base_dir) + "/", str(self.base_dir.resolve()) + "/"}
        return [m for m in _mount_points() if any(m.startswith(p) for p in prefixes)]

    def unmount_all(self) -> None:
        """Best effort: lazily unmount everything under ``base_dir``, deepest first."""
        for point in sorted(set(self.mounts()), key=len, reverse=True):
            try:
                _unmount(point)
            except OSError:
                pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no containerd log)"
        return "containerd log tail:\n" + "\n".join(text.splitlines()[-lines:])
