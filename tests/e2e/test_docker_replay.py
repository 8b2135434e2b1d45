"""Docker mode, differential: cri-dockerd's requests for a pod's whole life (replayed, lab.cridockerd_replay)
sent direct to dockerd, through the bare proxy, and through the proxy with an echo plugin on all seven
hooks (policy Fail) must get the same answers and leave dockerd running the same containers.

Real parts: a private dockerd (the session's), the proxy processes, the example plugin process in echo mode.
No cri-dockerd needed: this is what proves Docker mode's relay and hooks in every CI run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtimeproxy.hooks.names import HOOK_NAMES
from rplab.cridockerd_replay import CriDockerdReplay, Exchange, Lifecycle
from rplab.cridockerd_requests import PodShape
from rplab.docker_lab import hooked_docker_proxy, recorded_hooks
from rplab.dockerd import DockerdInstance, DockerModeProxy
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE

PROXIED = ("proxy", "proxy+echo")
INSPECTED = ("sandbox", "container", "updated container")
VOLATILE_HEADERS = frozenset({"date"})
SHORT_ID = 12  # docker's short IDs (hostnames, some messages)


@pytest.fixture(scope="module")
def echo_docker_proxy(dockerd: DockerdInstance, workdir: Path) -> Iterator[tuple[DockerModeProxy, Path]]:
    with hooked_docker_proxy(workdir / "dkecho", dockerd.socket, "--echo", policy="Fail") as hooked:
        yield hooked


@pytest.fixture(scope="module")
def lives(dockerd: DockerdInstance, docker_mode_proxy: DockerModeProxy,
          echo_docker_proxy: tuple[DockerModeProxy, Path]) -> dict[str, tuple[Lifecycle, list[Exchange]]]:
    """One replayed pod life per target (each its own pod: names must not clash), run one after the other."""
    sockets = {"direct": dockerd.socket, "proxy": docker_mode_proxy.listen_path,
               "proxy+echo": echo_docker_proxy[0].listen_path}
    lives = {}
    for target, socket in sockets.items():
        pod = PodShape(name=f"rp-{target.replace('+', '-')}", uid=str(uuid.uuid4()), cgroup_parent="/rp-replay",
                       labels={"app": "rp-replay"}, annotations={"team": "a"}, sandbox_image=PAUSE_IMAGE,
                       image=BUSYBOX_IMAGE)
        with CriDockerdReplay(socket) as replay:
            lives[target] = (replay.lifecycle(pod), replay.exchanges)
    return lives


def _masker(life: Lifecycle) -> dict[str, str]:
    """What differs between two targets' pods by construction, longest first."""
    found = {life.sandbox_id: "<sandbox-id>", life.container_id: "<container-id>",
             life.sandbox_id[:SHORT_ID]: "<sandbox-short-id>", life.container_id[:SHORT_ID]: "<container-short-id>",
             life.pod.uid: "<uid>", life.pod.name: "<pod>"}
    return dict(sorted(found.items(), key=lambda item: -len(item[0])))


def _mask(text: str, life: Lifecycle) -> str:
    for value, placeholder in _masker(life).items():
        text = text.replace(value, placeholder)
    return text


def _masked_exchange(exchange: Exchange, life: Lifecycle) -> dict[str, Any]:
    body: Any = _mask(exchange.body.decode(errors="replace"), life)
    if "json" in (exchange.header("content-type") or "") and body:
        body = json.loads(body)
        if exchange.target.endswith("/json") and isinstance(body, dict):  # an inspect: compared field by field below
            body = sorted(body)
    return {"call": exchange.call, "request": f"{exchange.method} {_mask(exchange.target, life)}",
            "status": exchange.status, "body": body,
            "headers": {name: value for name, value in exchange.headers if name not in VOLATILE_HEADERS}}


def _fields(inspected: dict[str, Any], life: Lifecycle) -> dict[str, Any]:
    """HostConfig, Config.Labels and Config.Env of an inspect, one entry per field, IDs and names masked."""
    masked = json.loads(_mask(json.dumps(inspected), life))
    fields = {f"HostConfig.{key}": value for key, value in masked["HostConfig"].items()}
    fields.update({f"Config.Labels[{key}]": value for key, value in masked["Config"]["Labels"].items()})
    fields["Config.Env"] = masked["Config"]["Env"]
    fields["Name"] = masked["Name"]
    return fields


@pytest.mark.parametrize("target", PROXIED)
def test_every_answer_is_dockerds_own(lives: dict[str, tuple[Lifecycle, list[Exchange]]], target: str) -> None:
    (direct, direct_exchanges), (proxied, proxied_exchanges) = lives["direct"], lives[target]
    expected = [_masked_exchange(exchange, direct) for exchange in direct_exchanges]
    got = [_masked_exchange(exchange, proxied) for exchange in proxied_exchanges]
    assert [entry["request"] for entry in got] == [entry["request"] for entry in expected]
    for want, have in zip(expected, got):
        assert have == want, f"{want['call']}: {want['request']}"


@pytest.mark.parametrize("state", INSPECTED)
@pytest.mark.parametrize("target", PROXIED)
def test_dockerd_runs_what_cri_dockerd_asked_for(lives: dict[str, tuple[Lifecycle, list[Exchange]]],
                                                 target: str, state: str) -> None:
    (direct, _), (proxied, _) = lives["direct"], lives[target]
    expected, got = _fields(direct.inspected[state], direct), _fields(proxied.inspected[state], proxied)
    assert {key: got.get(key) for key in expected} == expected
    assert set(got) == set(expected)


def test_the_replay_is_what_cri_dockerd_asks_for(lives: dict[str, tuple[Lifecycle, list[Exchange]]]) -> None:
    """The direct run itself: dockerd accepted the bodies and runs what they ask (the fixtures are sound)."""
    life, _ = lives["direct"]
    container = life.inspected["container"]
    host = container["HostConfig"]
    assert (host["CpuShares"], host["Memory"], host["MemorySwap"]) == (256, 64 * 2**20, 64 * 2**20)
    assert (host["CpuPeriod"], host["CpuQuota"], host["CgroupParent"]) == (100000, 50000, "/rp-replay")
    assert host["NetworkMode"] == host["IpcMode"] == host["PidMode"] == f"container:{life.sandbox_id}"
    assert container["Config"]["Labels"]["io.kubernetes.sandbox.id"] == life.sandbox_id
    assert container["Config"]["Env"][:2] == ["KEEP=me", "ALSO=kept"]
    assert container["State"]["Running"]
    assert life.inspected["updated container"]["HostConfig"]["Memory"] == 32 * 2**20
    sandbox = life.inspected["sandbox"]
    assert sandbox["Config"]["Labels"]["annotation.team"] == "a"
    assert sandbox["HostConfig"]["IpcMode"] == "shareable" and sandbox["State"]["Running"]


def test_the_echo_plugin_got_every_hook_once(lives: dict[str, tuple[Lifecycle, list[Exchange]]],
                                            echo_docker_proxy: tuple[DockerModeProxy, Path]) -> None:
    assert lives["proxy+echo"]
    _, record = echo_docker_proxy
    assert recorded_hooks(record) == ["PreRunPodSandbox", "PreCreateContainer", "PreStartContainer",
                                      "PostStartContainer", "PreUpdateContainerResources", "PostStopContainer",
                                      "PostStopPodSandbox"]
    assert sorted(recorded_hooks(record)) == sorted(HOOK_NAMES)
