"""The plugin-socket race of issue 17: a local user swaps a socket in between the proxy's check and its connect.

The attacker is a real process under uid 65534 (tests/hooks/socket_thief.py) that records every byte it is
sent. The swap is injected at the one point between the check and the connect that Python sees: the
creation of the gRPC channel (the connect follows inside the call). Where the attacker cannot write the
endpoint's directory, its swap fails and the real plugin is called; where it can, the proxy refuses the
plugin before any channel exists. In no case does the attacker receive a byte.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.kits.hooks import PluginBench, ScriptedPlugin
from runtimeproxy.hooks import dispatcher
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

NOBODY = 65534
SECRET = "s3cret-db-password"
THIEF = Path(__file__).with_name("socket_thief.py")
# The system interpreter: the one running the tests may live where uid 65534 cannot reach (/root/.pyenv).
THIEF_PYTHON = Path("/usr/bin/python3")
ANSWER_SECONDS = 10.0

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the attacker runs as uid 65534: needs root"),
    pytest.mark.skipif(not THIEF_PYTHON.exists(), reason=f"the attacker runs under {THIEF_PYTHON}"),
]


class Thief:
    """socket_thief.py under uid 65534, driven line by line."""

    def __init__(self, own_dir: Path, target: Path) -> None:
        self.process = subprocess.Popen(
            [str(THIEF_PYTHON), "-I", str(THIEF), str(own_dir), str(target)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, user=NOBODY, group=NOBODY,
            extra_groups=[], cwd="/",
        )
        assert self._answer() == "ready"
        self.swap_result: str | None = None

    def swap(self) -> str:
        if self.swap_result is None:
            self.swap_result = self._ask("swap")
        return self.swap_result

    def report(self) -> tuple[int, bytes]:
        connections, received = (self._ask("report").split(" ") + [""])[:2]
        return int(connections), bytes.fromhex(received)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def _ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], ANSWER_SECONDS)
        assert ready, "the thief did not answer"
        return self.process.stdout.readline().strip()


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the attacker can reach (pytest's own tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="rp-swap-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _secret_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns"),
        container_meta=hooks.ContainerMetadata(name="app", id="c-1"),
        container_envs={"DB_PASSWORD": SECRET},
    )


def _call(bench: PluginBench) -> str:
    """The plugin's outcome for one PostStopContainer call ("ok" or a status code name)."""
    before = dict(bench.dispatcher.outcomes)
    bench.run(dispatcher.POST_STOP_CONTAINER, _secret_request())  # a post hook never fails the CRI call
    (outcome,) = [key[2] for key, count in bench.dispatcher.outcomes.items() if count != before.get(key, 0)]
    return outcome


# (mode of the endpoint's directory, what the attacker's swap gets, call outcome with the plugin serving / missing)
CASES = {
    "0755": (0o755, "refused EACCES", "ok", "UNAVAILABLE"),
    "0777": (0o777, "swapped", "PERMISSION_DENIED", "PERMISSION_DENIED"),
    # Sticky: the attacker cannot replace root's socket, but may create one while it is missing.
    "1777": (0o1777, None, "PERMISSION_DENIED", "PERMISSION_DENIED"),
}


@pytest.mark.parametrize("serving", [True, False], ids=["plugin-serving", "plugin-missing"])
@pytest.mark.parametrize("case", CASES)
def test_a_socket_swapped_in_between_check_and_connect_is_never_sent_a_request(
    loop_thread: LoopThread, base: Path, monkeypatch: pytest.MonkeyPatch, case: str, serving: bool,
) -> None:
    mode, swap_result, serving_code, missing_code = CASES[case]
    plugin_dir, thief_dir = base / "plugins", base / "thief"
    plugin_dir.mkdir()
    os.chmod(plugin_dir, mode)
    thief_dir.mkdir(mode=0o700)
    os.chown(thief_dir, NOBODY, NOBODY)
    endpoint = plugin_dir / "plugin.sock"
    bench = PluginBench(loop_thread, base)
    thief = Thief(thief_dir, endpoint)
    try:
        plugin = ScriptedPlugin()
        if serving:
            bench.serve(plugin, endpoint)
        bench.register("10-plugin.json", endpoint, ["PostStopContainer"], policy="Fail")

        create_channel = grpc.aio.insecure_channel

        def swap_then_create(*args: object, **kwargs: object) -> grpc.aio.Channel:
            thief.swap()  # after the proxy's check, before its connect
            return create_channel(*args, **kwargs)

        monkeypatch.setattr(grpc.aio, "insecure_channel", swap_then_create)
        first = _call(bench)
        thief.swap()  # if the proxy refused before creating a channel, the attacker goes on anyway
        second = _call(bench)
        connections, received = thief.report()
    finally:
        thief.close()
        bench.close()

    assert (connections, SECRET.encode() in received) == (0, False), received
    expected = serving_code if serving else missing_code
    assert (first, second) == (expected, expected)
    if swap_result is not None:
        assert thief.swap_result == swap_result
    else:  # sticky: only an absent socket can be taken
        assert thief.swap_result == ("refused EPERM" if serving else "swapped")
    assert len(plugin.seen_by("PostStopContainer")) == (2 if expected == "ok" else 0)
