"""The offline world the CRI conformance suite expects, around a private containerd.

``ConformanceLab`` starts a local registry, builds critest's image set and pushes it there, writes a CNI
bridge network and starts a private containerd whose registry mirror config sends every pull from
``registry.k8s.io``, ``gcr.io`` and ``docker.io`` to that registry. The lab's own pause and busybox images are
imported too. Everything lives under one directory and is removed on exit (pods, bridge, registry).

``run_conformance`` runs critest in that lab four times: direct, through a bare proxy, through a proxy with a
koordlet-style echo plugin on all seven hooks, and through a proxy hosting NRI with the project's no-op NRI
plugin (rplab.nri_plugin, launched by the proxy) on every NRI event.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from rplab import CHECKOUT
from rplab.cni import remove_bridge, write_bridge_network
from rplab.conformance_images import UPSTREAM_HOSTS, build_conformance_images, split_ref
from rplab.containerd import DEFAULT_CNI_BIN_DIR, ContainerdInstance, check_prerequisites
from rplab.critest import CritestResult, run_critest_retrying
from rplab.example_plugin import plugin_process, registration
from rplab.images import build_and_import
from rplab.nri_plugin import install_noop
from rplab.peers import peer_binary
from rplab.process import ProxyProcess
from rplab.registry import LocalRegistry, write_mirror_config
from runtimeproxy.hooks.names import HOOK_NAMES


# (program, Debian package) the conformance lab needs besides the plain lab's.
CONFORMANCE_PROGRAMS = (("docker-registry", "docker-registry"), ("ipcmk", "util-linux"), ("ipcs", "util-linux"),
                        ("pgrep", "procps"), ("ip", "iproute2"), ("iptables", "iptables"))
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
T = TypeVar("T")


def conformance_prerequisites() -> str | None:
    """None when this machine can run the conformance lab, else a human-readable reason."""
    problems = [check_prerequisites() or ""]
    problems += [f"{program} not found (apt-get install -y {package})"
                 for program, package in CONFORMANCE_PROGRAMS if shutil.which(program) is None]
    problems += [f"CNI plugin {DEFAULT_CNI_BIN_DIR}/{plugin} not found (apt-get install -y containernetworking-plugins)"
                 for plugin in CNI_PLUGINS if not (Path(DEFAULT_CNI_BIN_DIR) / plugin).is_file()]
    return "; ".join(p for p in problems if p) or None


def publish_conformance_images(registry: LocalRegistry) -> list[str]:
    """Build critest's image set and push it to ``registry``; returns every reference published."""
    published = []
    for image in build_conformance_images():
        by_repository: dict[str, list[str]] = {}
        for ref in image.refs:
            _, repository, tag = split_ref(ref)
            by_repository.setdefault(repository, []).append(tag)
        for repository, tags in by_repository.items():
            registry.push(repository, tags, image.blobs)
        published += image.refs
    return published


class ConformanceLab:
    """containerd + registry + CNI bridge under ``base_dir`` (keep it short: unix socket paths are limited)."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.registry = LocalRegistry(self.base_dir / "registry")
        self.containerd = ContainerdInstance(self.base_dir / "ctd",
                                             registry_config_path=self.base_dir / "certs.d")
        self.bridge = ""
        self.published: list[str] = []
        self._stack = ExitStack()

    def start(self) -> None:
        with ExitStack() as stack:
            self.registry.start()
            stack.callback(self.registry.stop)
            self.published = publish_conformance_images(self.registry)
            write_mirror_config(self.base_dir / "certs.d", UPSTREAM_HOSTS, self.registry.url)
            self.bridge = write_bridge_network(self.containerd.cni_conf_dir, self.base_dir)
            stack.callback(remove_bridge, self.bridge)
            self.containerd.start()
            stack.callback(self.containerd.stop)
            build_and_import(self.containerd.address, self.base_dir / "image-cache")
            self._stack = stack.pop_all()

    def stop(self) -> None:
        self._stack.close()

    def keep(self, context: AbstractContextManager[T]) -> T:
        """Enter `context` for the lab's life (closed, before the lab's own parts, when it stops)."""
        return self._stack.enter_context(context)

    def __enter__(self) -> ConformanceLab:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


CRITEST_TARGETS = ("direct", "proxy", "proxy+plugin", "proxy+nri")
# Spec processes per critest run: most of a spec's time is waiting on containers (the four serial runs used about
# a quarter of two cores). Measured on containerd 1.6.20, 2 cores: the four runs with the lab 354 s serial, 207 s
# with 2 processes, 148 s with 4 (about 35 s a run), the same specs passing.
CRITEST_PARALLEL = 4
NRI_PLUGIN_ID = "10-noop"
REPORT_DIR_ENV = "RUNTIMEPROXY_REPORT_DIR"


def report_dir() -> Path:
    """Where junit reports go: ``$RUNTIMEPROXY_REPORT_DIR``, else ``<repo>/reports``."""
    configured = os.environ.get(REPORT_DIR_ENV)
    return Path(configured) if configured else CHECKOUT / "reports"


def conformance_verdict(results: dict[str, CritestResult]) -> str | None:
    """None when nothing failed and every target passed exactly what passed direct; else what differs."""
    problems = [f"{target}: {len(r.failed)} failed" for target, r in results.items() if r.failed]
    direct = set(results["direct"].passed)
    for target, result in results.items():
        lost = sorted(direct - set(result.passed))
        if lost:
            problems.append(f"{target}: passes direct, not here: {', '.join(lost)}")
    return "; ".join(problems) or None


@contextmanager
def echo_hooked_proxy(lab: ConformanceLab, name: str) -> Iterator[ProxyProcess]:
    """``echo_hooked_proxy_in(lab.base_dir / name, ...)`` in front of the lab's containerd;
    ``echo_record(lab, name)`` gets one JSON line per hook call."""
    with echo_hooked_proxy_in(lab.base_dir / name, lab.containerd.address) as proxy:
        yield proxy


@contextmanager
def echo_hooked_proxy_in(directory: Path, runtime_address: str) -> Iterator[ProxyProcess]:
    """A proxy in front of ``runtime_address`` with the example plugin in echo mode registered for all seven
    hooks, policy Fail: every hooked call is decoded, sent to the plugin, merged back, and fails if the
    plugin fails. Both live in ``directory``; ``echo_record_in(directory)`` gets one JSON line per hook call."""
    socket = directory / "echo.sock"
    with plugin_process(socket, echo_record_in(directory), "--echo"):
        proxy = ProxyProcess(directory / "proxy" / "rp.sock", runtime_address)
        proxy.hook_config_dir.mkdir(parents=True, exist_ok=True)
        (proxy.hook_config_dir / "echo.json").write_bytes(registration(socket, list(HOOK_NAMES), policy="Fail"))
        with proxy:
            yield proxy


@contextmanager
def nri_hosting_proxy(lab: ConformanceLab, name: str) -> Iterator[ProxyProcess]:
    """``nri_hosting_proxy_in(lab.base_dir / name, ...)`` in front of the lab's containerd."""
    with nri_hosting_proxy_in(lab.base_dir / name, lab.containerd.address) as proxy:
        yield proxy


@contextmanager
def nri_hosting_proxy_in(directory: Path, runtime_address: str) -> Iterator[ProxyProcess]:
    """A proxy in front of ``runtime_address`` hosting NRI, with the no-op NRI plugin (NRI_PLUGIN_ID) launched
    from its plugin directory and subscribed to every event; yielded once the plugin is attached (its calls per
    event are in `runtimeproxyctl status`). Both live in ``directory``."""
    install_noop(directory / "nri-plugins", NRI_PLUGIN_ID)
    proxy = ProxyProcess(directory / "proxy" / "rp.sock", runtime_address, extra_args=[
        f"--nri-socket={directory / 'nri.sock'}", f"--nri-plugin-path={directory / 'nri-plugins'}",
        f"--nri-plugin-config-path={directory / 'nri-conf.d'}", "--log-level=info"])
    with proxy:
        proxy.wait_for_log(f"NRI plugin {NRI_PLUGIN_ID} attached", timeout=30)
        yield proxy


def echo_record(lab: ConformanceLab, name: str) -> Path:
    """The hook calls the echo plugin of ``echo_hooked_proxy(lab, name)`` received, one JSON line each."""
    return echo_record_in(lab.base_dir / name)


def critest_nri_admin(lab: ConformanceLab) -> Path:
    """The admin socket of run_conformance's NRI-hosting proxy (its plugin's calls per event: `status`)."""
    return lab.base_dir / "critest-nri" / "proxy" / "admin.sock"


def echo_record_in(directory: Path) -> Path:
    """The hook calls the echo plugin of ``echo_hooked_proxy_in(directory, ...)`` received, one JSON line each."""
    return directory / "echo-requests.jsonl"


def run_conformance(lab: ConformanceLab, critest: Path, report_dir: Path,
                    on_result: Callable[[str, CritestResult, Path], None] | None = None) -> dict[str, CritestResult]:
    """critest direct, through a bare proxy, the echo-hooked proxy and the NRI-hosting proxy, one after the other,
    each with CRITEST_PARALLEL spec processes.

    Reports go to ``report_dir/critest-<target>.xml``; ``on_result`` hears about each run as it ends. The
    echo plugin's record is ``echo_record(lab, "critest-hooked")``; the NRI proxy's admin socket is
    ``critest_nri_admin(lab)``, left open for its `status` until the lab stops.
    """
    results: dict[str, CritestResult] = {}
    with ExitStack() as stack:
        bare = stack.enter_context(ProxyProcess(lab.base_dir / "critest-bare" / "rp.sock", lab.containerd.address))
        hooked = stack.enter_context(echo_hooked_proxy(lab, "critest-hooked"))
        hosting = lab.keep(nri_hosting_proxy(lab, "critest-nri"))
        sockets = {"direct": Path(lab.containerd.address), "proxy": bare.listen_path,
                   "proxy+plugin": hooked.listen_path, "proxy+nri": hosting.listen_path}
        for target in CRITEST_TARGETS:
            report = report_dir / f"critest-{target.replace('+', '-')}.xml"
            results[target] = run_critest_retrying(critest, sockets[target], report, CRITEST_PARALLEL,
                                                   peer_binary("ginkgo"))
            if on_result is not None:
                on_result(target, results[target], report)
    return results
