"""NRI validators hosted by the proxy against containerd's own NRI: the same two plugins, one adjusting (index 10)
and one validating (index 90, subscribed to ValidateContainerAdjustment), and containerd/nri's built-in default
validator configured by the same TOML table, on containerd 2.4's own NRI (the reference), hosted by the proxy in
front of containerd 1.6 (CRI mode) and in front of dockerd (Docker mode).

Per container the adjusting plugin answers one thing: an allowed variable, a variable the validator plugin
refuses, a seccomp policy the default validator refuses (`reject_unconfined_seccomp_adjustment`: the container
had no profile of its own). Compared: which
creates fail, the rejection's words (containerd/nri's `validator "<plugin>" rejected container adjustment, reason:
...` and the default validator's own), and what the validator plugin was shown (the adjustment's variables, their
owner, the plugins that took part).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from rplab.containerd import lab_containerd
from rplab.cri import CriClient, open_channel
from rplab.cridockerd_replay import CriDockerdReplay, ReplayError
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.loop import LoopThread
from rplab.process import ProxyProcess
from rplab.runtimes import newest
from runtimeproxy.nri.session import event_mask
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from test_nri import run_pod  # noqa: E402
from test_nri_docker import DockerNriLab  # noqa: E402
from tests.kits.machine import IMAGE_CACHE
from tests.kits.nri import NriPlugin

# A container with no seccomp profile of its own (as CriClient's) counts as unconfined to the default validator.
DEFAULT_VALIDATOR = "enable = true\nreject_unconfined_seccomp_adjustment = true\n"
FORBIDDEN = "FORBIDDEN"
REASON = f"{FORBIDDEN} may not be set"
SECCOMP = nri.LinuxSeccomp(default_action="SCMP_ACT_ALLOW", syscalls=[
    nri.LinuxSyscall(names=["swapon"], action="SCMP_ACT_ERRNO", errno_ret=nri.OptionalUInt32(value=1))])
ADJUSTMENTS = {
    "allowed": nri.ContainerAdjustment(env=[nri.KeyValue(key="ALLOWED", value="1")]),
    "forbidden": nri.ContainerAdjustment(env=[nri.KeyValue(key=FORBIDDEN, value="1")]),
    "seccomp": nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(seccomp_policy=SECCOMP)),
}
# The rejection's words, from containerd/nri (pkg/api/validate.go, the default validator's ErrValidation).
REJECTED = {
    "forbidden": f'validator "90-validator" rejected container adjustment, reason: {REASON}',
    # The two spaces are containerd/nri's.
    "seccomp": "validation error: plugin 10-adjuster attempted restricted  unconfined seccomp policy adjustment",
}


@dataclasses.dataclass
class Plugins:
    adjuster: NriPlugin
    validator: NriPlugin
    shown: list[nri.ValidateContainerAdjustmentRequest]


def plugins() -> Plugins:
    shown: list[nri.ValidateContainerAdjustmentRequest] = []

    async def create(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(adjust=ADJUSTMENTS[request.container.name])  # type: ignore[attr-defined]

    async def validate(plugin: NriPlugin, request: Message) -> Message:
        assert isinstance(request, nri.ValidateContainerAdjustmentRequest)
        shown.append(request)
        refused = any(entry.key == FORBIDDEN for entry in request.adjust.env)
        return nri.ValidateContainerAdjustmentResponse(reject=refused, reason=REASON if refused else "")

    adjuster = NriPlugin(name="adjuster", index="10", events=event_mask(nri.CREATE_CONTAINER),
                         methods={"CreateContainer": (nri.CreateContainerRequest, create)})
    validator = NriPlugin(name="validator", index="90", events=event_mask(nri.VALIDATE_CONTAINER_ADJUSTMENT),
                          methods={"ValidateContainerAdjustment": (nri.ValidateContainerAdjustmentRequest, validate)})
    return Plugins(adjuster, validator, shown)


def connected(loop: LoopThread, socket: Path, found: Plugins) -> None:
    for plugin in (found.adjuster, found.validator):
        loop.run(plugin.connect(socket))


def closed(loop: LoopThread, found: Plugins) -> None:
    async def close() -> None:  # their connections live on the loop thread
        found.adjuster.close()
        found.validator.close()
    loop.run(close())


def outcome(create: Callable[[str], object], name: str) -> str:
    """"created", or the rejection's words as containerd/nri has them (taken out of the runtime's wrapping)."""
    try:
        create(name)
    except (grpc.RpcError, ReplayError) as error:
        text = error.details() if isinstance(error, grpc.RpcError) else str(error)  # type: ignore[attr-defined]
        for words in REJECTED.values():
            if words in str(text):
                return words
        return f"failed otherwise: {text}"
    return "created"


def shown_view(shown: list[nri.ValidateContainerAdjustmentRequest]) -> dict[str, Any]:
    """What the validator plugin was shown, per container: the variables adjusted, their owners, the plugins."""
    view = {}
    for request in shown:
        owners = request.owners.owners[request.container.id].compound
        env_owners = dict(owners[nri.Field.Env].owners) if nri.Field.Env in owners else {}
        view[request.container.name] = {
            "env": sorted(f"{entry.key}={entry.value}" for entry in request.adjust.env),
            "env_owners": env_owners,
            "plugins": sorted(f"{p.index}-{p.name}" for p in request.plugins),
        }
    return view


def run(create: Callable[[str], object], found: Plugins) -> dict[str, Any]:
    return {"outcomes": {name: outcome(create, name) for name in ADJUSTMENTS}, "shown": shown_view(found.shown)}


@pytest.fixture
def validator_config(workdir: Path) -> Path:
    path = workdir / "default-validator.toml"
    path.write_text("[default_validator]\n" + DEFAULT_VALIDATOR)
    return path


def native_run(workdir: Path, loop: LoopThread, log_dir: Path) -> dict[str, Any]:
    with lab_containerd(workdir / "val-native", IMAGE_CACHE, newest("containerd"), nri=True,
                        nri_default_validator=DEFAULT_VALIDATOR) as containerd:
        found = plugins()
        connected(loop, containerd.nri_socket, found)
        client = CriClient(open_channel(containerd.address))
        pods: list[str] = []
        try:
            pod_id, config = run_pod(client, log_dir, pods)
            return run(lambda name: client.create_container(pod_id, client.container_config(name), config), found)
        finally:
            client.discard_pods(pods)
            closed(loop, found)


def hosted_run(workdir: Path, loop: LoopThread, log_dir: Path, validator_config: Path) -> dict[str, Any]:
    with lab_containerd(workdir / "val-16", IMAGE_CACHE) as containerd:
        base = workdir / "val-hosted"
        proxy = ProxyProcess(base / "rp.sock", containerd.address, extra_args=[
            f"--nri-socket={base / 'nri.sock'}", f"--nri-default-validator-config={validator_config}"])
        proxy.start()
        found = plugins()
        client = CriClient(open_channel(proxy.listen_path))
        pods: list[str] = []
        try:
            proxy.wait_for_log("NRI: serving plugins", timeout=30)
            connected(loop, base / "nri.sock", found)
            pod_id, config = run_pod(client, log_dir, pods)
            return run(lambda name: client.create_container(pod_id, client.container_config(name), config), found)
        finally:
            client.discard_pods(pods)
            closed(loop, found)
            assert proxy.stop() == 0, proxy.log_tail()


@pytest.fixture(scope="module")
def native(workdir: Path, loop_thread: LoopThread) -> dict[str, Any]:
    """containerd 2.4's own NRI: the reference every hosted run is held to."""
    logs = workdir / "val-logs"
    logs.mkdir(exist_ok=True)
    return native_run(workdir, loop_thread, logs)


def test_the_reference_rejects_with_the_validator_plugin_and_the_default_validator(native: dict[str, Any]) -> None:
    assert native["outcomes"] == {"allowed": "created", **REJECTED}, native


def test_hosted_on_containerd_1_6_validators_reject_what_containerds_own_nri_rejects(
        native: dict[str, Any], workdir: Path, loop_thread: LoopThread, log_dir: Path,
        validator_config: Path) -> None:
    hosted = hosted_run(workdir, loop_thread, log_dir, validator_config)
    assert hosted["outcomes"] == native["outcomes"]
    assert hosted["shown"] == native["shown"], (hosted, native)


def test_hosted_by_a_docker_mode_proxy_validators_reject_what_containerds_own_nri_rejects(
        native: dict[str, Any], dockerd: DockerdInstance, workdir: Path, loop_thread: LoopThread,
        validator_config: Path) -> None:
    base = workdir / "val-docker"
    proxy = DockerModeProxy(base / "rp.sock", dockerd.socket, extra_args=[
        f"--nri-socket={base / 'nri.sock'}", f"--nri-default-validator-config={validator_config}"])
    proxy.start()
    lab = DockerNriLab(dockerd, proxy, loop_thread, CriDockerdReplay(proxy.listen_path))
    found = plugins()
    try:
        lab.attach(found.adjuster)
        lab.attach(found.validator)
        pod = lab.run_pod()
        hosted = run(lambda name: lab.create(pod, name), found)
    finally:
        lab.close()  # closes the attached plugins too
        assert proxy.stop() == 0, proxy.log_tail()
    assert hosted["outcomes"] == native["outcomes"]
    assert hosted["shown"] == native["shown"], (hosted, native)


def test_a_validator_sees_only_names_it_knows(native: dict[str, Any]) -> None:
    """The plugins list: the two plugins and containerd/nri's default validator, in NRI's own names."""
    for shown in native["shown"].values():
        assert shown["plugins"] == ["00-default-validator", "10-adjuster", "90-validator"], shown
        assert all(re.fullmatch(r"\d\d-[a-z-]+", owner) for owner in shown["env_owners"].values()), shown
