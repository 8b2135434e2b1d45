"""Build the lab's OCI images offline and import them into a containerd.

There is no registry to pull from, so the lab makes its own two images from files on this machine:

* a pause image: a tiny static C program (compiled here with ``gcc -static``) used as the CRI sandbox image;
* a busybox image: Debian's *dynamic* busybox plus the shared libraries it needs and hard-linked applets
  (a static busybox runs applets in-process, so ``sh -c ls`` would never exec ``ls``).

Each image is written as an OCI image-layout tar archive, built deterministically (fixed mtimes and owners,
sorted JSON, gzip without timestamp) so the same inputs give the same digests. Archives are cached by a
fingerprint of their inputs and imported with ``ctr images import`` into the ``k8s.io`` namespace, where the
CRI plugin sees them under the names below.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "localhost/runtimeproxy/pause:1.0"
BUSYBOX_IMAGE = "localhost/runtimeproxy/busybox:1.0"
LAB_IMAGES = (PAUSE_IMAGE, BUSYBOX_IMAGE)
# Where the built archives are kept between runs.
IMAGE_CACHE = Path(os.environ.get("RUNTIMEPROXY_IMAGE_CACHE", Path.home() / ".cache" / "runtimeproxy" / "images"))

# Namespace that the CRI plugin reads images from.
CRI_NAMESPACE = "k8s.io"

# Bump when the layout of the built images changes, so cached archives are rebuilt.
BUILDER_VERSION = "1"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"

# Every file in every tar gets this mtime (2000-01-01T00:00:00Z), and configs the matching date.
FIXED_MTIME = 946684800
FIXED_CREATED = "2000-01-01T00:00:00Z"

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Applets hard-linked into /bin when the host busybox has them.
BUSYBOX_APPLETS = (
    "[", "ash", "awk", "basename", "cat", "chmod", "cp", "cut", "date", "df", "dirname", "du", "echo", "env",
    "expr", "false", "find", "free", "grep", "head", "hostname", "id", "kill", "ln", "ls", "mkdir", "mount",
    "mv", "nproc", "pidof", "printf", "ps", "pwd", "readlink", "realpath", "rm", "rmdir", "sed", "seq", "sh",
    "sleep", "sort", "stat", "tail", "tee", "test", "timeout", "top", "touch", "tr", "true", "uname", "uniq",
    "wc", "which", "whoami", "xargs", "yes",
)

PAUSE_SOURCE = r"""
/* runtimeproxy lab pause: sleeps until SIGTERM/SIGINT (then exits 0) and reaps zombies. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv) {
    struct sigaction sa;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("runtimeproxy-lab-pause 1.0");
        return 0;
    }
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_term;
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0) {
        perror("sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) {
        perror("sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
    return 42;
}
"""


class ImageBuildError(RuntimeError):
    """An image could not be built or imported."""


@dataclass(frozen=True)
class FileEntry:
    """One entry of a layer: a directory, a regular file, or a hard link to an earlier entry."""

    path: str  # relative to the image root, no leading slash
    mode: int
    data: bytes = b""
    hardlink_to: str | None = None
    is_dir: bool = False


# ---------------------------------------------------------------------------------------------------------
# deterministic archives


def _tar_info(name: str, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _with_parents(entries: Iterable[FileEntry]) -> list[FileEntry]:
    """Insert any missing parent directory (mode 0755) before the first entry that needs it."""
    out: list[FileEntry] = []
    seen: set[str] = set()
    for entry in entries:
        parts = entry.path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in seen:
                seen.add(parent)
                out.append(FileEntry(parent, 0o755, is_dir=True))
        if entry.path in seen:
            if entry.is_dir:
                continue  # parent already made; explicit modes must come first to win
            raise ImageBuildError(f"duplicate layer entry {entry.path!r}")
        seen.add(entry.path)
        out.append(entry)
    return out


def layer_tar(entries: Iterable[FileEntry]) -> bytes:
    """An uncompressed layer tar of ``entries`` in the given order (hard-link targets must come first)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in _with_parents(entries):
            if entry.is_dir:
                info = _tar_info(entry.path + "/", entry.mode)
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.hardlink_to is not None:
                info = _tar_info(entry.path, entry.mode)
                info.type = tarfile.LNKTYPE
                info.linkname = entry.hardlink_to
                tar.addfile(info)
            else:
                info = _tar_info(entry.path, entry.mode)
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buf.getvalue()


@functools.lru_cache(maxsize=4)  # a shared base layer is compressed once for every image built on it
def gzip_deterministic(data: bytes) -> bytes:
    """gzip without a timestamp or file name in the header."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def _json_bytes(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_architecture() -> str:
    """This machine's architecture in OCI/Go spelling."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


@dataclass(frozen=True)
class ImageBlobs:
    """One image as registry blobs: its manifest, config and gzip layers (bottom first)."""

    manifest: bytes
    config: bytes
    layers: tuple[bytes, ...]

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest)


def image_blobs(layers: Iterable[bytes], image_config: Mapping[str, object]) -> ImageBlobs:
    """Manifest, config and compressed layers of an image made of uncompressed ``layers`` (bottom first).

    ``image_config`` is the runtime part of the image config (Entrypoint, Cmd, Env, User, ...).
    """
    layers = list(layers)
    compressed = tuple(gzip_deterministic(layer) for layer in layers)
    config = _json_bytes({
        "architecture": oci_architecture(),
        "os": "linux",
        "created": FIXED_CREATED,
        "config": dict(image_config),
        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer) for layer in layers]},
        "history": [{"created": FIXED_CREATED, "created_by": "rplab.images"} for _ in layers],
    })
    manifest = _json_bytes({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA_LAYER_GZIP, "digest": sha256_digest(gz), "size": len(gz)} for gz in compressed],
    })
    return ImageBlobs(manifest, config, compressed)


def oci_layout_tar(ref: str, entries: Iterable[FileEntry], image_config: Mapping[str, object]) -> bytes:
    """An OCI image-layout archive holding one single-layer image named ``ref``."""
    image = image_blobs([layer_tar(entries)], image_config)
    index = _json_bytes({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": image.digest,
            "size": len(image.manifest),
            "platform": {"architecture": oci_architecture(), "os": "linux"},
            "annotations": {REF_NAME_ANNOTATION: ref},
        }],
    })
    files = [("oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"})), ("index.json", index)]
    files += [(f"blobs/sha256/{sha256_digest(b)[7:]}", b) for b in (*image.layers, image.config, image.manifest)]

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirname in ("blobs/", "blobs/sha256/"):
            info = _tar_info(dirname, 0o755)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files:
            info = _tar_info(name, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------------
# the two lab images


def compile_static(source: str, workdir: Path, name: str, defines: Iterable[str] = ()) -> bytes:
    """Compile C ``source`` into a stripped static binary (``-D`` each of ``defines``) and return its bytes."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageBuildError(f"gcc not found: it is needed to build {name} for the lab images")
    src, out = workdir / f"{name}.c", workdir / name
    src.write_text(source)
    command = [gcc, "-static", "-Os", "-s", *(f"-D{d}" for d in defines), "-o", str(out), str(src)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageBuildError(f"gcc -static {name} failed (is libc6-dev installed?):\n{proc.stderr}")
    return out.read_bytes()


def compile_pause(workdir: Path) -> bytes:
    """Compile PAUSE_SOURCE into a stripped static binary and return its bytes."""
    return compile_static(PAUSE_SOURCE, workdir, "pause")


def pause_entries(pause_binary: bytes) -> list[FileEntry]:
    return [FileEntry("pause", 0o755, pause_binary)]


PAUSE_CONFIG = {"Entrypoint": ["/pause"], "Env": [DEFAULT_PATH], "WorkingDir": "/"}


def find_busybox() -> Path | None:
    """The host's busybox binary, if any."""
    found = shutil.which("busybox")
    for candidate in (found, "/bin/busybox", "/usr/bin/busybox"):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def shared_libraries(binary: Path) -> list[Path]:
    """Absolute paths of the shared libraries (and dynamic loader) ``binary`` needs, as ldd reports them.

    Empty for a static binary.
    """
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or "not a dynamic executable" in proc.stdout + proc.stderr:
        return []
    libs: list[Path] = []
    for line in proc.stdout.splitlines():
        # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)"
        for token in line.split():
            if token.startswith("/") and Path(token) not in libs:
                libs.append(Path(token))
    return libs


def busybox_applets(busybox: Path, wanted: Iterable[str] | None = BUSYBOX_APPLETS) -> list[str]:
    """The ``wanted`` applets (all, when None) that this busybox provides, sorted."""
    proc = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    available = set(proc.stdout.split())
    return sorted(available if wanted is None else available.intersection(wanted))


LAB_PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
LAB_GROUP = b"root:x:0:\nnobody:x:65534:\n"


def library_entries(binaries: Iterable[Path], skip: Iterable[str] = ()) -> list[FileEntry]:
    """The shared libraries the ``binaries`` need, once each, at the paths ldd reports (minus ``skip``)."""
    seen = set(skip)
    entries = []
    for binary in binaries:
        for lib in shared_libraries(binary):
            path = str(lib).lstrip("/")
            if path not in seen:
                seen.add(path)
                # Stored at the path ldd reports, with the content of whatever it resolves to.
                entries.append(FileEntry(path, 0o755, lib.resolve().read_bytes()))
    return entries


def busybox_entries(busybox: Path, *, applets: Iterable[str] | None = BUSYBOX_APPLETS,
                    passwd: bytes = LAB_PASSWD, group: bytes = LAB_GROUP) -> list[FileEntry]:
    """Root filesystem of a busybox image: busybox, its libraries, applet hard links, /etc and /tmp."""
    entries = [FileEntry(d, 0o755, is_dir=True) for d in ("bin", "dev", "etc", "proc", "sys", "usr/bin", "var")]
    entries += [FileEntry("root", 0o700, is_dir=True), FileEntry("tmp", 0o1777, is_dir=True)]
    entries.append(FileEntry("etc/passwd", 0o644, passwd))
    entries.append(FileEntry("etc/group", 0o644, group))
    entries += library_entries([busybox])
    entries.append(FileEntry("bin/busybox", 0o755, busybox.read_bytes()))
    names = [a for a in busybox_applets(busybox, applets) if a != "busybox"]
    entries += [FileEntry(f"bin/{a}", 0o755, hardlink_to="bin/busybox") for a in names]
    entries.append(FileEntry("usr/bin/env", 0o755, hardlink_to="bin/busybox"))  # for "#!/usr/bin/env" scripts
    return entries


BUSYBOX_CONFIG = {"Cmd": ["sh"], "Env": [DEFAULT_PATH], "WorkingDir": "/"}


# ---------------------------------------------------------------------------------------------------------
# cache and import


def _fingerprint(*parts: bytes) -> str:
    h = hashlib.sha256(BUILDER_VERSION.encode())
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _gcc_identity() -> bytes:
    gcc = shutil.which("gcc")
    if gcc is None:
        return b"no-gcc"
    proc = subprocess.run([gcc, "-dumpfullversion"], capture_output=True, check=False)
    return gcc.encode() + proc.stdout


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_pause_tar(cache_dir: Path) -> Path:
    """The pause image archive in ``cache_dir``, built if missing."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"pause-{_fingerprint(PAUSE_SOURCE.encode(), _gcc_identity(), oci_architecture().encode())}.tar"
    if not path.is_file():
        with tempfile.TemporaryDirectory(prefix="rp-pause-") as tmp:
            binary = compile_pause(Path(tmp))
        _write_atomic(path, oci_layout_tar(PAUSE_IMAGE, pause_entries(binary), PAUSE_CONFIG))
    return path


def build_busybox_tar(cache_dir: Path) -> Path:
    """The busybox image archive in ``cache_dir``, built if missing or if the host busybox/libs changed."""
    busybox = find_busybox()
    if busybox is None:
        raise ImageBuildError("busybox not found: install Debian's dynamic busybox (apt-get install -y busybox)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    inputs = [busybox, *shared_libraries(busybox)]
    key = _fingerprint(oci_architecture().encode(), *(str(p).encode() + p.resolve().read_bytes() for p in inputs))
    path = cache_dir / f"busybox-{key}.tar"
    if not path.is_file():
        _write_atomic(path, oci_layout_tar(BUSYBOX_IMAGE, busybox_entries(busybox), BUSYBOX_CONFIG))
    return path


def build_image_tars(cache_dir: Path) -> dict[str, Path]:
    """Build (or reuse from ``cache_dir``) both lab images; returns {image ref: archive path}."""
    return {PAUSE_IMAGE: build_pause_tar(cache_dir), BUSYBOX_IMAGE: build_busybox_tar(cache_dir)}


def import_images(ctr_address: str, tars: Mapping[str, Path], *, namespace: str = CRI_NAMESPACE,
                  snapshotter: str = "overlayfs", timeout: float = 120) -> None:
    """Import archives {image ref: path} into the containerd at socket ``ctr_address`` and unpack them.

    Each archive's index names its image with the full ref; ``--base-name`` (the ref without its tag) makes
    ctr keep exactly that name (without it, ctr would only accept names under "import-<date>").
    """
    ctr = shutil.which("ctr")
    if ctr is None:
        raise ImageBuildError("ctr not found (it comes with Debian's containerd package)")
    for ref, tar in tars.items():
        base_name = ref.rsplit(":", 1)[0]
        cmd = [ctr, "-a", ctr_address, "-n", namespace, "images", "import",
               "--base-name", base_name, "--snapshotter", snapshotter, str(tar)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise ImageBuildError(f"importing {ref} failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def build_and_import(ctr_address: str, cache_dir: Path) -> dict[str, Path]:
    """Build (or reuse) both lab images and import them into the CRI namespace of ``ctr_address``."""
    tars = build_image_tars(cache_dir)
    import_images(ctr_address, tars)
    return tars
