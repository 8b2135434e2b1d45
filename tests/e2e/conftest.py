"""A real containerd (private root, own sockets, offline images) and the proxy in front of it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rplab.conformance import ConformanceLab, conformance_prerequisites, echo_hooked_proxy
from rplab.conformance import report_dir as conformance_report_dir
from rplab.containerd import ContainerdInstance, check_prerequisites, lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.guest import Guest, GuestError, running_guest
from rplab.guest import prerequisites as guest_prerequisites
from rplab.kubelet import PEER as KUBELET_PEER
from rplab.peers import PeerBuildError, peer_binary
from rplab.process import ProxyProcess
from rplab.release import build_bundle
from rplab.runtimes import selected
from rplab.tested_with import TESTED_WITH_ENV, merged_outcome, write_record

from docker_fixtures import both, cri_dockerd, docker_mode_proxy, dockerd  # noqa: F401
from tests.kits.machine import IMAGE_CACHE, require_command, require_tool, skip_or_fail
from tests.kits.packages import built_wheel


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


def _require_lab() -> None:
    reason = check_prerequisites()
    if reason is not None:
        skip_or_fail(f"cannot run the e2e suite: {reason}")


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    # Short, because unix socket paths are limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="rp-e2e-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def containerd(workdir: Path) -> Iterator[ContainerdInstance]:
    _require_lab()
    with lab_containerd(workdir / "ctd", IMAGE_CACHE) as instance:
        yield instance


GUEST_SUMMARY: list[str] = []  # the cgroup v2 + systemd node's figures, for the terminal summary
KUBELET_SUMMARY: list[str] = []  # the real kubelet's figures and the calls it made (test_real_kubelet.py)
KOORDLET_SUMMARY: list[str] = []  # the small cluster's and koordlet's figures, each scenario's cgroups


@pytest.fixture(scope="module")
def guest_containerd(workdir: Path) -> Iterator[Guest]:
    """A cgroup v2 + systemd node (rplab.guest: a qemu guest restored from its snapshot, image and snapshot
    made on first use); its containerd's socket is `.address` on this machine, its shell `.shell()`. Per module:
    the emulated machine costs a host core while it runs."""
    reason = guest_prerequisites()
    if reason is not None:
        skip_or_fail(f"cannot run the cgroup v2 + systemd node: {reason}")
    try:
        with running_guest(workdir / "guest", IMAGE_CACHE) as guest:
            started = time.monotonic()
            yield guest
            up = time.monotonic() - started
    except GuestError as error:
        pytest.fail(f"the cgroup v2 + systemd node did not come up: {error}")
    made = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in guest.figures.items() if name != "qemu CPU")
    cpu = guest.figures.get("qemu CPU", 0.0)
    GUEST_SUMMARY.append(f"{made}; up for the tests {up:.0f} s, qemu {cpu:.0f} CPU s ({cpu / up:.2f} cores)")


@pytest.fixture(scope="session")
def guest_summary() -> list[str]:
    """Lines printed in the terminal summary's cgroup v2 + systemd node section."""
    return GUEST_SUMMARY


@pytest.fixture(scope="session")
def proxy_process(containerd: ContainerdInstance, workdir: Path) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(workdir / "proxy" / "rp.sock", containerd.address, extra_args=["--log-level=debug"])
    proxy.start()
    yield proxy
    assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="session")
def direct_channel(containerd: ContainerdInstance) -> Iterator[grpc.Channel]:
    channel = open_channel(containerd.address)
    yield channel
    channel.close()


@pytest.fixture(scope="session")
def proxied_channel(proxy_process: ProxyProcess) -> Iterator[grpc.Channel]:
    channel = open_channel(proxy_process.listen_path)
    yield channel
    channel.close()


@pytest.fixture(params=["v1", "v1alpha2"])
def api_version(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def served_api_version(api_version: str, direct_channel: grpc.Channel, containerd: ContainerdInstance) -> str:
    """``api_version``, skipped where the containerd under test does not serve it (2.x: no runtime.v1alpha2;
    the differential suite proves the proxy answers UNIMPLEMENTED there as containerd does)."""
    client = CriClient(direct_channel, api_version)
    try:
        client.runtime.Version(client.api.VersionRequest(), timeout=5)
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        pytest.skip(f"{containerd.cri_version().rsplit(' ', 1)[0]} serves no runtime.{api_version}")
    return api_version


@pytest.fixture
def proxied(proxied_channel: grpc.Channel, served_api_version: str) -> CriClient:
    return CriClient(proxied_channel, served_api_version)


@pytest.fixture
def direct(direct_channel: grpc.Channel, served_api_version: str) -> CriClient:
    return CriClient(direct_channel, served_api_version)


@pytest.fixture(scope="session")
def kubelet_client() -> Path:
    """The crilifecycle peer (the kubelet's own CRI client library, rplab.kubelet), built on first use; where it
    cannot be built (no Go), its tests skip, or fail when e2e is required."""
    try:
        return peer_binary(KUBELET_PEER)
    except PeerBuildError as error:
        skip_or_fail(f"cannot build the kubelet's CRI client peer: {error}")
        raise


@pytest.fixture
def log_dir(workdir: Path, request: pytest.FixtureRequest) -> Path:
    path = workdir / "logs" / request.node.name.replace("/", "_")[:60]
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def cleanup_pods(direct_channel: grpc.Channel) -> Iterator[list[str]]:
    """Pods a test registers here are stopped and removed (directly) whatever the test's outcome."""
    pods: list[str] = []
    yield pods
    CriClient(direct_channel).discard_pods(pods)


# -- conformance: crictl and critest against the offline world critest expects --------------------------

CONFORMANCE_SUMMARY: list[str] = []  # lines for the terminal summary, whatever -s says


@pytest.fixture(scope="session")
def crictl_binary() -> Path:
    return require_tool("crictl")


@pytest.fixture(scope="session")
def critest_binary() -> Path:
    return require_tool("critest")


@pytest.fixture(scope="session")
def report_dir() -> Path:
    """Where junit reports go (CI keeps this directory)."""
    return conformance_report_dir()


@pytest.fixture(scope="session")
def kubelet_summary() -> list[str]:
    """Lines printed in the terminal summary's "the real kubelet" section (tests/e2e/test_real_kubelet.py)."""
    return KUBELET_SUMMARY


@pytest.fixture(scope="session")
def koordlet_summary() -> list[str]:
    """Lines printed in the terminal summary's "koordlet on a small cluster" section (tests/e2e/test_koordlet.py)."""
    return KOORDLET_SUMMARY


@pytest.fixture(scope="session")
def conformance_summary() -> list[str]:
    """Lines printed in the terminal summary's "CRI conformance" section."""
    return CONFORMANCE_SUMMARY


@pytest.fixture(scope="session")
def conformance_lab() -> Iterator[ConformanceLab]:
    reason = conformance_prerequisites()
    if reason:
        skip_or_fail(f"cannot run the conformance lab: {reason}")
    base = Path(tempfile.mkdtemp(prefix="rp-conf-", dir="/tmp"))
    lab = ConformanceLab(base)
    try:
        with lab:
            yield lab
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def conformance_proxy(conformance_lab: ConformanceLab) -> Iterator[ProxyProcess]:
    """A bare proxy (no plugin) in front of the conformance lab's containerd."""
    proxy = ProxyProcess(conformance_lab.base_dir / "crictl-proxy" / "rp.sock", conformance_lab.containerd.address)
    proxy.start()
    yield proxy
    assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="session")
def conformance_hooked_proxy(conformance_lab: ConformanceLab) -> Iterator[ProxyProcess]:
    """A proxy with the echo plugin on all seven hooks, policy Fail, in front of the conformance containerd."""
    with echo_hooked_proxy(conformance_lab, "crictl-hooked") as proxy:  # test_crictl.HOOKED_PROXY_NAME
        yield proxy


# -- "Tested with": each e2e test's outcome, written per run with the runtimes it ran on (rplab.tested_with) ----

E2E_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    E2E_OUTCOMES[report.nodeid] = merged_outcome(E2E_OUTCOMES.get(report.nodeid), report.outcome)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, lines in (("CRI conformance", CONFORMANCE_SUMMARY),
                         ("cgroup v2 + systemd node (qemu guest)", GUEST_SUMMARY),
                         ("the real kubelet", KUBELET_SUMMARY),
                         ("koordlet on a small cluster", KOORDLET_SUMMARY)):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
    if E2E_OUTCOMES:
        runtimes = ", ".join(f"{selected(kind).name} ({selected(kind).version})" for kind in ("containerd", "dockerd"))
        # Only runs that ask (scripts/test.sh) write a record: a targeted run would replace a whole run's.
        path = write_record(E2E_OUTCOMES) if os.environ.get(TESTED_WITH_ENV) else None
        terminalreporter.write_line(f"e2e runtimes: {runtimes}" + (f"; tested-with record: {path}" if path else ""))


@pytest.fixture(scope="session")
def bundle(workdir: Path) -> Path:
    """The release bundle of this checkout's wheel (rplab.release), built in the Debian 11 root: its Python is
    built once and cached, the wheel frozen afresh."""
    require_command("debootstrap", "debootstrap")
    return build_bundle(built_wheel(), workdir / "release")
