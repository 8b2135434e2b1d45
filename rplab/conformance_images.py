"""The image set the CRI conformance suite (critest) pulls, built offline from files on this machine.

critest pulls its images by name (``registry.k8s.io/e2e-test-images/...``, ``gcr.io/k8s-staging-cri-tools/...``,
``docker.io/library/busybox``) and checks what runs inside them: a shell with the usual tools, users and groups
in ``/etc/passwd``/``/etc/group``, web servers answering on their ports, a setuid binary. Every image here is
"FROM busybox" plus one small layer, so the busybox layer is built, compressed and pushed once:

* the base layer: Debian's dynamic busybox with all its applets as hard links, the host's ``ipcs``
  (util-linux) and ``pgrep`` (procps) with their libraries, and the users critest expects;
* web servers (nginx, hostnet-nginx, httpd): busybox ``httpd`` behind the process name, title, pid file and
  log line the specs look for;
* nonewprivs: a static setuid-root program printing ``Effective uid: N``;
* the test-image-* family: "FROM busybox; ADD <name>", with the users, groups and tags the image specs check.

Besides, the lab's pause image is published as ``pause:3.9`` of two registries, for the specs that pull one image by
two registries' names.

Nothing here can reproduce an upstream digest, so critest's "image with digest" spec cannot pass offline.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rplab.images import (
    DEFAULT_PATH, PAUSE_CONFIG, FileEntry, ImageBlobs, ImageBuildError, busybox_entries, compile_pause, compile_static,
    find_busybox, image_blobs, layer_tar, library_entries, oci_architecture, pause_entries,
)

E2E = "registry.k8s.io/e2e-test-images/"
CRI_TOOLS = "gcr.io/k8s-staging-cri-tools/"
BUSYBOX_REFS = (E2E + "busybox:1.29-2", "docker.io/library/busybox:latest")
NGINX_REF = E2E + "nginx:1.14-2"
HTTPD_REF = E2E + "httpd:2.4.39-4"
NONEWPRIVS_REF = E2E + "nonewprivs:1.3"
HOSTNET_NGINX_REF = CRI_TOOLS + f"hostnet-nginx-{oci_architecture()}:latest"
# One image under two registries' names, for the specs that pull it from both and expect one image ID: the lab's
# pause program stands in (pushed once to the local registry, so both names have one digest).
PAUSE_REFS = ("registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9")
# Upstream hosts critest pulls from: the registry mirror config names each of them.
UPSTREAM_HOSTS = ("registry.k8s.io", "gcr.io", "docker.io", "k8s.gcr.io")

WEB_PORT = 80
HOSTNET_NGINX_PORT = 12003  # what critest's hostnet-nginx image listens on

# Host programs the specs run inside containers that Debian's busybox lacks.
HOST_TOOLS = ("/usr/bin/ipcs", "/usr/bin/pgrep")

CONFORMANCE_PASSWD = (b"root:x:0:0:root:/root:/bin/sh\n"
                      b"www-data:x:33:33:www-data:/var/www:/bin/false\n"
                      b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
CONFORMANCE_GROUP = b"root:x:0:\nwww-data:x:33:\nnobody:x:65534:\n"
BASE_CONFIG = {"Cmd": ["sh"], "Env": [DEFAULT_PATH], "WorkingDir": "/"}

HTTPD_SCRIPT = """#!/bin/sh
# httpd stand-in for the CRI conformance suite: Apache's start-up line, then busybox httpd on :80.
echo "[core:notice] AH00094: Command line: 'httpd -D FOREGROUND'" >&2
httpd -f -v -p 80 -h /usr/local/apache2/htdocs &
trap 'kill $! 2>/dev/null; exit 0' TERM INT QUIT
wait
"""
HTTPD_ROOT = "usr/local/apache2/htdocs"
NGINX_ROOT = "usr/share/nginx/html"
INDEX_HTML = b"<html><body><h1>It works!</h1></body></html>\n"

# nginx stand-in. What the specs look for: a process named nginx whose pid is in /var/run/nginx.pid and
# whose command line says "master process" (real nginx sets its process title), and a page on its port.
# It re-executes itself under that title (the name, from the file, stays "nginx"), then runs busybox httpd
# as its worker and exits 0 on SIGTERM.
NGINX_SOURCE = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define TITLE "nginx: master process nginx -g daemon off;"

static pid_t worker;

static void on_term(int sig) {
    (void)sig;
    if (worker > 0)
        kill(worker, SIGTERM);
    _exit(0);
}

int main(int argc, char **argv) {
    FILE *pidfile;
    (void)argc;
    if (strcmp(argv[0], TITLE) != 0) {
        char *title[] = {TITLE, NULL};
        execv("/usr/sbin/nginx", title);
        perror("re-exec /usr/sbin/nginx");
        return 1;
    }
    pidfile = fopen("/var/run/nginx.pid", "w");
    if (pidfile == NULL) {
        perror("/var/run/nginx.pid");
        return 1;
    }
    fprintf(pidfile, "%d\n", (int)getpid());
    fclose(pidfile);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGQUIT, on_term);
    worker = fork();
    if (worker == 0) {
        execl("/bin/httpd", "httpd", "-f", "-p", PORT, "-h", "/usr/share/nginx/html", (char *)NULL);
        perror("exec /bin/httpd");
        _exit(1);
    }
    for (;;) {
        if (wait(NULL) < 0)
            pause();
    }
}
"""

NONEWPRIVS_SOURCE = r"""
/* Prints the effective uid: 0 when the setuid bit took effect, the caller's uid under no_new_privs. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    printf("Effective uid: %d\n", (int)geteuid());
    return 0;
}
"""

# test-image-* references: (refs sharing one image, the file the image adds, image config user)
TEST_IMAGES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    ((CRI_TOOLS + "test-image-latest:latest",), "test-image-latest", ""),
    ((CRI_TOOLS + "test-image-digest:latest",), "test-image-digest", ""),
    ((CRI_TOOLS + "test-image-tag:test",), "test-image-tag-test", ""),
    ((CRI_TOOLS + "test-image-tag:all",), "test-image-tag-all", ""),
    ((CRI_TOOLS + "test-image-1:latest",), "test-image-1", ""),
    ((CRI_TOOLS + "test-image-2:latest",), "test-image-2", ""),
    ((CRI_TOOLS + "test-image-3:latest",), "test-image-3", ""),
    (tuple(CRI_TOOLS + f"test-image-tags:{n}" for n in (1, 2, 3)), "test-image-tags", ""),
    ((CRI_TOOLS + "test-image-user-uid:latest",), "test-image-user-uid", "1002"),
    ((CRI_TOOLS + "test-image-user-username:latest",), "test-image-user-username", "www-data"),
    ((CRI_TOOLS + "test-image-user-uid-group:latest",), "test-image-user-uid-group", "1003:1004"),
    ((CRI_TOOLS + "test-image-user-username-group:latest",), "test-image-user-username-group", "www-data:1004"),
)
PREDEFINED_GROUP_REF = CRI_TOOLS + "test-image-predefined-group:latest"


@dataclass(frozen=True)
class ConformanceImage:
    """One built image and every reference (host/repository:tag) it is published under."""

    refs: tuple[str, ...]
    blobs: ImageBlobs


def split_ref(ref: str) -> tuple[str, str, str]:
    """(host, repository, tag) of a fully qualified ``host/repo:tag`` reference."""
    host, rest = ref.split("/", 1)
    repository, tag = rest.rsplit(":", 1)
    return host, repository, tag


def base_entries() -> list[FileEntry]:
    """The shared busybox layer: busybox with every applet, ipcs and pgrep, and critest's users."""
    busybox = find_busybox()
    if busybox is None:
        raise ImageBuildError("busybox not found: install Debian's dynamic busybox (apt-get install -y busybox)")
    entries = busybox_entries(busybox, applets=None, passwd=CONFORMANCE_PASSWD, group=CONFORMANCE_GROUP)
    tools = [Path(t) for t in HOST_TOOLS]
    missing = [str(t) for t in tools if not t.is_file()]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} not found (apt-get install -y util-linux procps)")
    present = {e.path for e in entries}
    entries += library_entries(tools, skip=present)
    entries += [FileEntry(str(t).lstrip("/"), 0o755, t.read_bytes()) for t in tools]
    entries += [FileEntry(d, 0o755, is_dir=True) for d in ("var/run", "var/www")]
    return entries


def nginx_entries(workdir: Path, port: int) -> list[FileEntry]:
    binary = compile_static(NGINX_SOURCE, workdir, f"nginx-{port}", [f'PORT="{port}"'])
    return [FileEntry("usr/sbin/nginx", 0o755, binary), FileEntry(f"{NGINX_ROOT}/index.html", 0o644, INDEX_HTML)]


def httpd_entries() -> list[FileEntry]:
    return [FileEntry("usr/local/bin/httpd-foreground", 0o755, HTTPD_SCRIPT.encode()),
            FileEntry(f"{HTTPD_ROOT}/index.html", 0o644, INDEX_HTML)]


def _config(**overrides: object) -> dict[str, object]:
    return {**BASE_CONFIG, **overrides}


def conformance_images(workdir: Path) -> list[ConformanceImage]:
    """Build every image critest pulls; ``workdir`` holds the compiler's scratch files."""
    base = layer_tar(base_entries())

    def on_base(refs: Iterable[str], entries: list[FileEntry], **config: object) -> ConformanceImage:
        return ConformanceImage(tuple(refs), image_blobs([base, layer_tar(entries)], _config(**config)))

    nnp = compile_static(NONEWPRIVS_SOURCE, workdir, "nnp")
    images = [
        # Not the lab's sandbox image itself: the specs remove it by ID, which would remove every name of it.
        ConformanceImage(PAUSE_REFS, image_blobs([layer_tar(pause_entries(compile_pause(workdir)))],
                                                 {**PAUSE_CONFIG, "Labels": {"runtimeproxy.critest": "pause"}})),
        ConformanceImage(BUSYBOX_REFS, image_blobs([base], BASE_CONFIG)),
        on_base([NGINX_REF], nginx_entries(workdir, WEB_PORT), Cmd=["nginx", "-g", "daemon off;"]),
        on_base([HOSTNET_NGINX_REF], nginx_entries(workdir, HOSTNET_NGINX_PORT), Cmd=["nginx", "-g", "daemon off;"]),
        on_base([HTTPD_REF], httpd_entries(), Cmd=["httpd-foreground"]),
        on_base([NONEWPRIVS_REF], [FileEntry("usr/local/bin/nnp", 0o4755, nnp)], Entrypoint=["/usr/local/bin/nnp"],
                Cmd=[]),
        on_base([PREDEFINED_GROUP_REF], [
            FileEntry("etc/passwd", 0o644, CONFORMANCE_PASSWD + b"default-user:x:1000:1000::/home/default-user:/bin/sh\n"),
            FileEntry("etc/group", 0o644, CONFORMANCE_GROUP + b"default-user:x:1000:\n"
                                                              b"group-defined-in-image:x:50000:default-user\n"),
        ], User="1000"),
    ]
    for refs, added, user in TEST_IMAGES:
        images.append(on_base(refs, [FileEntry(added, 0o644, added.encode() + b"\n")],
                              **({"User": user} if user else {})))
    return images


def build_conformance_images() -> list[ConformanceImage]:
    """Build the image set in a scratch directory that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="rp-critest-images-") as tmp:
        return conformance_images(Path(tmp))
