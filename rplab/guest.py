"""A cgroup v2 + systemd node as a qemu guest: Debian 12 with systemd as PID 1 and containerd's systemd cgroup
driver (`SystemdCgroup = true`), the node most clusters run, on machines that are cgroup v1 without systemd.

The image is built from Debian's packages (rplab.roots' cached debootstrap root) into an ext4 file system
(`mkfs.ext4 -d`) and kept under ~/.cache/runtimeproxy/guest, keyed by a digest of its recipe, never committed.
The first boot is cold (software emulation: /dev/kvm on these machines cannot run a stock kernel), imports the
lab images and saves the guest's RAM and disk; every later boot restores that snapshot in a few seconds.

The guest's containerd socket is forwarded to a unix socket on the host (qemu user networking forwards a TCP port
on 127.0.0.1; socat turns it into a unix socket on both sides: qemu here has no vsock), and a second forwarded
port runs shell scripts in the guest (`Guest.shell`), which is how tests read its cgroup files; a third reaches a
kubelet's read-only port in the guest. The other way, one address of qemu's user network reaches a unix socket
of the host (`Guest.host_socket`: a proxy in front of the guest's containerd, for a kubelet in the guest). The
guest has no network beyond those (`restrict=on`). Files go in through a read-only 9p share of a host directory
(`Guest.put`: a binary into the guest; mounted only after a restore: qemu cannot save a guest with it mounted).

    python -m rplab.guest boot      # build (or find) the image and snapshot, boot, print figures, stop
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from rplab import roots
from rplab.containerd import ContainerdInstance
from rplab.cri import CriClient, open_channel
from rplab.images import build_image_tars, import_images
from rplab.runtimes import runtime_named
from runtimeproxy.usage import OneLineParser

CACHE = Path(os.environ.get("RUNTIMEPROXY_GUEST_CACHE", Path.home() / ".cache" / "runtimeproxy" / "guest"))
SUITE = "bookworm"
PACKAGES = ("systemd-sysv", "udev", "containerd", "runc", "linux-image-amd64", "socat")
RECIPE_VERSION = "1"  # bump when something the digest cannot see changes (the steps below)
GUEST_BASE = Path("/var/lib/rplab")  # the guest containerd's base dir (socket: GUEST_BASE/containerd.sock)
GUEST_ADDRESS = "10.0.2.15"
CRI_PORT = 10010
SHELL_PORT = 10022
KUBELET_PORT = 10255  # a kubelet's read-only port in the guest, forwarded to the host
HOST_ADDRESS = "10.0.2.100"  # qemu's user network: the guest's connections here are forwarded to the host
HOST_SOCKET_PORT = 10011  # HOST_ADDRESS:this -> Guest.host_socket (a unix socket of the host)
SHARE_TAG = "rplab"  # the 9p share of Guest.share, mounted read-only at SHARE_MOUNT in the guest by Guest.put
SHARE_MOUNT = "/mnt/rplab-host"
HEADROOM_MIB = 1024  # free space in the file system for images, containers and logs
BOOT_TIMEOUT_SECONDS = 600.0  # a cold boot under emulation on a busy 2-core machine
RESTORE_TIMEOUT_SECONDS = 120.0
QEMU = "qemu-system-x86_64"
COMMANDS = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "socat": "socat",
            "debootstrap": "debootstrap", "mkfs.ext4": "e2fsprogs", "ctr": "containerd"}  # ctr: image import
KERNEL_ARGS = ("root=/dev/vda rw init=/lib/systemd/systemd systemd.unified_cgroup_hierarchy=1 console=ttyS0 "
               "net.ifnames=0")
MIGRATION_POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None).prctl  # looked up here: a child between fork and exec should only call it


class GuestError(RuntimeError):
    pass


def prerequisites() -> str | None:
    """Why the guest cannot run here, or None."""
    missing = [f"{name} (Debian package {package})" for name, package in COMMANDS.items() if shutil.which(name) is None]
    if missing:
        return "not installed: " + ", ".join(missing) + "; run scripts/setup.sh"
    if os.geteuid() != 0:
        return "building the guest image needs root (debootstrap, mkfs.ext4 -d with the root's owners)"
    return None


# -- the image -----------------------------------------------------------------------------------------------

def guest_files() -> dict[str, str]:
    """Files written into the debootstrap root (path in the guest: content): what makes it a node."""
    containerd = ContainerdInstance(GUEST_BASE, runtime=runtime_named("containerd-1.6"), systemd_cgroup=True)
    socat = "/usr/bin/socat"
    return {
        "/etc/hostname": "rpnode\n",
        "/etc/hosts": "127.0.0.1 localhost\n127.0.1.1 rpnode\n",  # without it RunPodSandbox fails
        "/etc/fstab": "/dev/vda / ext4 rw,errors=remount-ro 0 1\n",
        "/etc/systemd/network/10-qemu.network":
            f"[Match]\nName=eth0\n\n[Network]\nAddress={GUEST_ADDRESS}/24\nGateway=10.0.2.2\n",
        "/etc/containerd/config.toml": containerd.config_toml(),
        "/usr/local/sbin/rplab-shell": "#!/bin/sh\nexec /bin/sh -s 2>&1\n",  # a script on stdin, all output out
        "/etc/systemd/system/rplab-cri.service": _unit(
            "The guest containerd's socket on a TCP port (forwarded to the host)",
            f"{socat} TCP-LISTEN:{CRI_PORT},reuseaddr,fork UNIX-CONNECT:{containerd.address}", "containerd.service"),
        "/etc/systemd/system/rplab-shell.service": _unit(
            "Shell scripts from the host (the guest listens on the forwarded port only)",
            f"{socat} -t 3600 TCP-LISTEN:{SHELL_PORT},reuseaddr,fork EXEC:/usr/local/sbin/rplab-shell",
            "network.target"),
    }


def _unit(description: str, command: str, after: str) -> str:
    return (f"[Unit]\nDescription={description}\nAfter={after}\n\n[Service]\nExecStart={command}\nRestart=always\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


ENABLED_UNITS = {  # multi-user.target.wants: unit file
    "systemd-networkd.service": "/lib/systemd/system/systemd-networkd.service",
    "containerd.service": "/lib/systemd/system/containerd.service",
    "rplab-cri.service": "/etc/systemd/system/rplab-cri.service",
    "rplab-shell.service": "/etc/systemd/system/rplab-shell.service",
}


def recipe_key() -> str:
    recipe = {"version": RECIPE_VERSION, "suite": SUITE, "packages": sorted(PACKAGES), "files": guest_files(),
              "units": ENABLED_UNITS, "headroom": HEADROOM_MIB}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class GuestImage:
    """The built image: a raw ext4 root file system plus the kernel and initrd booted with it."""

    directory: Path

    @property
    def rootfs(self) -> Path:
        return self.directory / "rootfs.ext4"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"


def build_image(cache: Path = CACHE) -> GuestImage:
    """The guest image for the current recipe, built on first use (a few minutes: debootstrap, then mkfs)."""
    image = GuestImage(cache / recipe_key())
    if image.rootfs.exists():
        return image
    reason = prerequisites()
    if reason:
        raise GuestError(reason)
    tarball = roots.make_root(SUITE, PACKAGES)
    partial = image.directory.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="rp-guest-", dir=partial) as work:
        root = roots.unpack(tarball, Path(work) / "root")
        _configure(root)
        for name, pattern in (("vmlinuz", "vmlinuz-*"), ("initrd.img", "initrd.img-*")):
            found = sorted((root / "boot").glob(pattern))
            if not found:
                raise GuestError(f"the guest root has no /boot/{pattern} (linux-image-amd64 not installed?)")
            shutil.copyfile(found[-1], partial / name)
        _mkfs(root, partial / "rootfs.ext4")
    for old in cache.iterdir():  # one image at a time: each is over a GB
        if old != partial and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    partial.rename(image.directory)
    return image


def _configure(root: Path) -> None:
    for path, content in guest_files().items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        if "/sbin/" in path:
            target.chmod(0o755)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for name, unit in ENABLED_UNITS.items():
        (wants / name).unlink(missing_ok=True)
        (wants / name).symlink_to(unit)
    (root / "etc/resolv.conf").write_text("")  # no DNS: the guest reaches nothing but the forwarded ports


def _mkfs(root: Path, image: Path) -> None:
    used = int(subprocess.run(["du", "-sxm", str(root)], check=True, capture_output=True, text=True).stdout.split()[0])
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "rpnode", "-d", str(root), str(image),
                           f"{used + HEADROOM_MIB}M"], capture_output=True, text=True)
    if made.returncode != 0:
        raise GuestError(f"mkfs.ext4 -d failed: {made.stderr[-2000:]}")


# -- running it ----------------------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """In a child before exec: SIGKILL when the process that started it dies (an emulated machine left running
    would take a host core until someone noticed). Signals the starting process blocks are unblocked: qemu's
    vCPU threads are kicked by signals, and an inherited mask would stall the guest."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Qmp:
    """qemu's machine protocol on a unix socket: one command at a time, events skipped."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(str(path))
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise GuestError(f"qemu's QMP socket {path} did not come up")
                time.sleep(0.1)
        self.sock.settimeout(timeout)
        self.reader = self.sock.makefile("rb")
        self._read()  # the greeting
        self.call("qmp_capabilities")

    def _read(self) -> dict:
        while True:
            line = self.reader.readline()
            if not line:
                raise GuestError("qemu closed its QMP socket")
            message = json.loads(line)
            if "event" not in message:
                return message

    def call(self, command: str, **arguments: object) -> object:
        request = {"execute": command, **({"arguments": arguments} if arguments else {})}
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        answer = self._read()
        if "error" in answer:
            raise GuestError(f"QMP {command}: {answer['error']}")
        return answer.get("return")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class Guest:
    """One running guest in `base` (a short directory: unix socket paths), from `image`; `address` is the guest
    containerd's socket forwarded to the host."""

    def __init__(self, base: Path, image: GuestImage) -> None:
        self.base = base
        self.image = image
        self.cri_port = free_port()
        self.shell_port = free_port()
        self.kubelet_port = free_port()
        self.address = str(base / "containerd.sock")
        self.host_socket = base / "host.sock"  # what the guest reaches at HOST_ADDRESS:HOST_SOCKET_PORT
        self.share = base / "share"  # the guest's SHARE_TAG
        self.console = base / "console.log"
        self._qemu: subprocess.Popen[bytes] | None = None
        self._forwarder: subprocess.Popen[bytes] | None = None
        self.qmp: Qmp | None = None
        self.figures: dict[str, float] = {}  # seconds: what running_guest built, the restore, qemu's CPU time

    def qemu_argv(self, disk: Path, incoming: Path | None = None) -> list[str]:
        forwards = ",".join(f"hostfwd=tcp:127.0.0.1:{host}-:{guest}" for host, guest in (
            (self.cri_port, CRI_PORT), (self.shell_port, SHELL_PORT), (self.kubelet_port, KUBELET_PORT)))
        # qemu spawns the command for each connection; a comma in an option value is written twice.
        command = f"socat - UNIX-CONNECT:{self.host_socket}".replace(",", ",,")  # a comma in a value is doubled
        forwards += f",guestfwd=tcp:{HOST_ADDRESS}:{HOST_SOCKET_PORT}-cmd:{command}"  # qemu runs it per connection
        argv = [QEMU, "-nodefaults", "-no-user-config", "-display", "none",
                "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "1024",
                "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd), "-append", KERNEL_ARGS,
                "-drive", f"file={disk},if=virtio,format=qcow2,cache=unsafe",
                "-netdev", f"user,id=net0,restrict=on,{forwards}", "-device", "virtio-net-pci,netdev=net0",
                "-device", "virtio-rng-pci", "-device", "vmgenid", "-serial", f"file:{self.console}",
                "-virtfs", f"local,path={self.share},mount_tag={SHARE_TAG},security_model=none,readonly=on",
                "-qmp", f"unix:{self.base / 'qmp.sock'},server=on,wait=off"]
        if incoming is not None:
            argv += ["-incoming", f"exec:cat {incoming}"]
        return argv

    def start(self, disk: Path, incoming: Path | None = None) -> None:
        self.share.mkdir(parents=True, exist_ok=True)
        log = open(self.base / "qemu.log", "wb")
        self._qemu = subprocess.Popen(self.qemu_argv(disk, incoming), stdout=log, stderr=subprocess.STDOUT,
                                      preexec_fn=_die_with_parent)
        log.close()
        self.qmp = Qmp(self.base / "qmp.sock")
        Path(self.address).unlink(missing_ok=True)
        self._forwarder = subprocess.Popen(
            ["socat", f"UNIX-LISTEN:{self.address},fork,unlink-early", f"TCP:127.0.0.1:{self.cri_port}"],
            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def wait_running(self, timeout: float) -> None:
        """Until the VM runs (an incoming snapshot loaded) and the guest containerd answers CRI."""
        deadline = time.monotonic() + timeout
        assert self.qmp is not None
        while (status := self.qmp.call("query-status")["status"]) != "running":  # type: ignore[index]
            if status == "paused":  # a snapshot loaded: it was saved stopped
                self.qmp.call("cont")
            self._check_alive(deadline)
            time.sleep(MIGRATION_POLL_SECONDS)
        while not self.cri_answers():
            self._check_alive(deadline)
            time.sleep(0.5)

    def _check_alive(self, deadline: float) -> None:
        if self._qemu is None or self._qemu.poll() is not None:
            raise GuestError(f"qemu exited: {self.log_tail()}")
        if time.monotonic() > deadline:
            raise GuestError(f"the guest's containerd did not answer in time: {self.log_tail()}")

    def cri_answers(self) -> bool:
        channel = open_channel(self.address)
        try:
            CriClient(channel).runtime.Version(CriClient(channel).api.VersionRequest(), timeout=3)
            return True
        except grpc.RpcError:
            return False
        finally:
            channel.close()

    def shell(self, script: str, timeout: float = 60.0, check: bool = True) -> str:
        """`script` run by sh in the guest as root; its output (stdout and stderr). Fails on a non-zero exit
        unless `check` is false."""
        with socket.create_connection(("127.0.0.1", self.shell_port), timeout=timeout) as channel:
            channel.sendall(script.encode() + b'\necho "rplab-exit=$?"\n')
            channel.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := channel.recv(65536):
                chunks.append(chunk)
        output, _, status = b"".join(chunks).decode(errors="replace").rpartition("rplab-exit=")
        if not status.strip().isdigit():
            raise GuestError(f"the guest shell gave no exit status for {script!r}: {output[-2000:]}")
        if check and int(status) != 0:
            raise GuestError(f"{script!r} failed in the guest ({status.strip()}): {output[-2000:]}")
        return output

    def restart_containerd(self, timeout: float = 60.0) -> None:
        """A new containerd process: every restored guest's containerd hands out the same IDs (its random
        generator was saved with it; the kernel's is reseeded on restore through qemu's vmgenid device)."""
        self.shell("systemctl restart containerd")
        deadline = time.monotonic() + timeout
        while not self.cri_answers():
            self._check_alive(deadline)
            time.sleep(0.2)

    def put(self, source: Path, target: str, mode: str = "0755", timeout: float = 300.0) -> None:
        """Copies the host file `source` to `target` in the guest, through the 9p share (the emulated network
        moves a few MB/s: a 120 MB binary took 48 s)."""
        shared = self.share / Path(source).name
        shared.unlink(missing_ok=True)
        try:
            os.link(source, shared)
        except OSError:  # another file system
            shutil.copyfile(source, shared)
        try:
            self.shell(f"mountpoint -q {SHARE_MOUNT} || {{ mkdir -p {SHARE_MOUNT} && "
                       f"mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,ro {SHARE_TAG} {SHARE_MOUNT}; }} && "
                       f"cp '{SHARE_MOUNT}/{shared.name}' '{target}.partial' && chmod {mode} '{target}.partial' && "
                       f"mv '{target}.partial' '{target}'", timeout=timeout)
        finally:
            shared.unlink(missing_ok=True)

    def put_once(self, source: Path, target: str, mode: str = "0755") -> float:
        """`put`, unless `target` is there with `source`'s size already (a binary copied earlier into this guest):
        the seconds the copy took, 0 when there was none."""
        size = self.shell(f"stat -c %s '{target}' 2>/dev/null || true").strip()
        if size == str(Path(source).stat().st_size):
            return 0.0
        started = time.monotonic()
        self.put(source, target, mode)
        return time.monotonic() - started

    def read(self, path: str) -> str:
        """A file of the guest (a cgroup file: /sys/fs/cgroup/...), stripped."""
        return self.shell(f"cat '{path}'").strip()

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        """`text` written to `path` in the guest (its directory made), whole: a partial file renamed into place."""
        self.shell(f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}.partial' <<'RPLAB_EOF'\n{text}\n"
                   f"RPLAB_EOF\nchmod {mode} '{path}.partial' && mv '{path}.partial' '{path}'")

    def save(self, state: Path) -> None:
        """The guest's RAM and device state to `state`; the VM stays paused (its disk is then final)."""
        assert self.qmp is not None
        self.shell("sync")
        self.qmp.call("stop")
        self.qmp.call("migrate", uri=f"exec:cat > {state}")
        while True:
            status = self.qmp.call("query-migrate")["status"]  # type: ignore[index]
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise GuestError(f"saving the guest's state failed: {status}")
            time.sleep(MIGRATION_POLL_SECONDS)

    def cpu_seconds(self) -> float:
        """The CPU time qemu has used so far (user + system), 0 once it has exited."""
        try:
            fields = Path(f"/proc/{self._qemu.pid}/stat").read_text().rsplit(")", 1)[1].split()  # type: ignore
        except (AttributeError, FileNotFoundError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        for process in (self._forwarder, self._qemu):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None

    def log_tail(self, lines: int = 30) -> str:
        texts = []
        for path in (self.base / "qemu.log", self.console):
            if path.exists():
                texts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)


# -- the snapshot ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    directory: Path

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def state(self) -> Path:
        return self.directory / "state.bin"


def _qemu_version() -> str:
    return subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]


def _overlay(disk: Path, backing: Path, backing_format: str) -> None:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(backing), "-F", backing_format, str(disk)],
                   check=True)


def make_snapshot(image: GuestImage, image_cache: Path, work: Path) -> tuple[Snapshot, dict[str, float]]:
    """The saved guest (booted, lab images imported), made on first use: (snapshot, figures in seconds)."""
    tars = build_image_tars(image_cache)
    machine = Guest(Path("/"), image).qemu_argv(Path("disk"))  # a saved state loads only into the same machine
    machine = [arg for arg in machine if "hostfwd" not in arg]
    forwards = [CRI_PORT, SHELL_PORT, KUBELET_PORT, HOST_ADDRESS, HOST_SOCKET_PORT]  # the network
    key = hashlib.sha256(json.dumps([_qemu_version(), machine, forwards, sorted(p.name for p in tars.values())])
                         .encode()).hexdigest()[:12]
    snapshot = Snapshot(image.directory / f"snapshot-{key}")
    if snapshot.state.exists():
        return snapshot, {}
    for old in image.directory.glob("snapshot-*"):  # one snapshot per image: each is about 400 MB
        shutil.rmtree(old, ignore_errors=True)
    partial = Snapshot(snapshot.directory.with_suffix(".partial"))
    shutil.rmtree(partial.directory, ignore_errors=True)
    partial.directory.mkdir(parents=True)
    _overlay(partial.disk, image.rootfs, "raw")
    guest = Guest(work, image)
    started = time.monotonic()
    try:
        guest.start(partial.disk)
        guest.wait_running(BOOT_TIMEOUT_SECONDS)
        booted = time.monotonic() - started
        import_images(guest.address, tars)
        guest._forwarder.terminate()  # type: ignore[union-attr]  # no host connection into the saved state
        time.sleep(1)
        guest.save(partial.state)
    finally:
        guest.stop()
    partial.directory.rename(snapshot.directory)
    return snapshot, {"cold boot": booted, "snapshot": time.monotonic() - started}


@contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _restored(base: Path, image_cache: Path, cache: Path) -> Guest:
    """A guest restored from the snapshot and answering CRI. A restore that never answers (seen once under heavy
    load) is tried once more from a snapshot made anew: a saved state is a cache, never the only way to a node."""
    for attempt in (1, 2):
        with _cache_lock(cache):  # two sessions on one machine build once
            started = time.monotonic()
            built = not GuestImage(cache / recipe_key()).rootfs.exists()
            image = build_image(cache)
            figures = {"image build": time.monotonic() - started} if built else {}
            snapshot, made = make_snapshot(image, image_cache, base / f"cold-{attempt}")
        guest = Guest(base / str(attempt), image)
        guest.figures.update(figures, **made)
        guest.base.mkdir(parents=True, exist_ok=True)
        disk = guest.base / "disk.qcow2"
        _overlay(disk, snapshot.disk, "qcow2")
        started = time.monotonic()
        try:
            guest.start(disk, incoming=snapshot.state)
            guest.wait_running(RESTORE_TIMEOUT_SECONDS / 2 if attempt == 1 else RESTORE_TIMEOUT_SECONDS)
        except GuestError:
            guest.stop()
            if attempt == 2:
                raise
            with _cache_lock(cache):
                shutil.rmtree(snapshot.directory, ignore_errors=True)
            continue
        guest.figures["restore"] = time.monotonic() - started
        return guest
    raise AssertionError("unreachable")


@contextmanager
def running_guest(base: Path, image_cache: Path, cache: Path = CACHE, fresh_ids: bool = False) -> Iterator[Guest]:
    """A guest restored from the snapshot (image and snapshot made on first use), stopped when the block ends.
    `base` must be short (unix socket paths); `image_cache`: where the lab images are (rplab.images);
    `fresh_ids`: restart containerd, whose IDs are otherwise the same in every restored guest."""
    guest = _restored(base, image_cache, cache)
    try:
        started = time.monotonic()
        guest.shell(f"date -s @{int(time.time())} >/dev/null")  # the saved clock is the snapshot's
        if fresh_ids:
            guest.restart_containerd()
        guest.figures["restore"] += time.monotonic() - started
        yield guest
        guest.figures["qemu CPU"] = guest.cpu_seconds()
    finally:
        guest.stop()


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.guest", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["boot"])
    parser.add_argument("--images", type=Path, default=Path.home() / ".cache" / "runtimeproxy" / "images")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="rp-guest-", dir="/tmp"))
    try:
        with running_guest(base, args.images) as guest:
            for name, seconds in guest.figures.items():
                print(f"{name}: {seconds:.1f} s")
            print(guest.shell("uname -r; stat -fc %T /sys/fs/cgroup; cat /proc/1/comm"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
