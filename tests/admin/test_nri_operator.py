"""NRI plugins for operators: `runtimeproxyctl status` lists them with their calls by event, /metrics counts them,
`runtimeproxyctl disable/enable` toggles one (or one of its events) by its id and `shadow` puts it on trial, its
calls in `trace` (in-process proxy hosting NRI, the project's own NRI plugin on its socket)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from google.protobuf.message import Message

from tests.kits.admin import http_get, promtool_check
from rplab.loop import LoopThread
from rplab.synthetic import SyntheticBackend, install_benchmark_answers
from runtimeproxy.admin.ctl import EXIT_OK, EXIT_USAGE
from runtimeproxy.app import Proxy
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.model import PodRecord
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from test_service import ctl

from tests.kits.nri import NriPlugin  # noqa: E402


@pytest.fixture
def hosting(start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend, tmp_path: Path,
            loop_thread: LoopThread) -> tuple[Proxy, NriPlugin]:
    install_benchmark_answers(synthetic)
    proxy = start_proxy(runtime_path=synthetic.path, admin_path=tmp_path / "admin.sock",
                        state_dir=tmp_path / "state", metrics_address="127.0.0.1:0", nri_socket=tmp_path / "nri.sock")
    plugin = NriPlugin(name="ops", index="10", every_event=True,
                       events=event_mask(nri.RUN_POD_SANDBOX, nri.STOP_POD_SANDBOX))
    loop_thread.run(plugin.connect(tmp_path / "nri.sock"))
    deadline = time.monotonic() + 10
    while not proxy.nri or not proxy.nri.plugins:
        assert time.monotonic() < deadline, "the NRI plugin never attached"
        time.sleep(0.01)
    return proxy, plugin


def run_pod(proxy: Proxy, loop_thread: LoopThread) -> None:
    assert proxy.hook_service is not None
    subject = Subject("pod-1", PodRecord(name="web"))
    loop_thread.run(proxy.hook_service.nri.notify(nri_events.RUN_POD_SANDBOX, subject))


def test_status_and_metrics_show_an_nri_plugin_and_its_calls(hosting: tuple[Proxy, NriPlugin],
                                                             loop_thread: LoopThread) -> None:
    proxy, plugin = hosting
    run_pod(proxy, loop_thread)
    code, out = ctl(proxy, "status", "-o", "json")
    assert code == EXIT_OK
    status = json.loads(out)
    assert status["nri_endpoint"] == str(proxy.options.nri_socket)
    (shown,) = status["nri_plugins"]
    assert (shown["name"], shown["toggle_name"], shown["kind"]) == ("10-ops", "nri:10-ops", "connected")
    assert shown["events"] == ["RunPodSandbox", "StopPodSandbox"] and shown["enabled"]
    assert shown["nri_version"] == "v0.8.0" and shown["connected_since_unix_seconds"] > 0
    stats = {entry["hook"]: entry for entry in shown["event_stats"]}
    assert (stats["RunPodSandbox"]["calls"], stats["RunPodSandbox"]["failures"]) == (1, 0)
    assert stats["StopPodSandbox"]["calls"] == 0

    _, human = ctl(proxy, "status")
    assert "NRI PLUGINS" in human and "10-ops  enabled" in human and "RunPodSandbox" in human

    status_code, exposition = http_get(proxy, "/metrics")
    assert status_code == 200
    assert "runtimeproxy_nri_plugins 1.0" in exposition
    assert 'runtimeproxy_nri_calls_total{event="RunPodSandbox",outcome="ok",plugin="10-ops"} 1.0' in exposition
    promtool_check(exposition)


def test_disable_and_enable_toggle_an_nri_plugin_by_its_id(hosting: tuple[Proxy, NriPlugin],
                                                          loop_thread: LoopThread) -> None:
    proxy, plugin = hosting
    code, out = ctl(proxy, "disable", "10-ops", "--reason", "noisy")
    assert code == EXIT_OK, out
    run_pod(proxy, loop_thread)
    assert plugin.requests("RunPodSandbox") == []
    (shown,) = json.loads(ctl(proxy, "status", "-o", "json")[1])["nri_plugins"]
    assert not shown["enabled"] and shown["disabled_reason"] == "noisy"
    (toggle,) = json.loads(ctl(proxy, "status", "-o", "json")[1])["toggles"]
    assert toggle["plugin"] == "nri:10-ops" and not toggle["staged"]

    assert ctl(proxy, "disable", "10-ops", "--hook", "PreRunPodSandbox", "--reason", "x")[0] == EXIT_USAGE
    assert ctl(proxy, "enable", "nri:10-ops")[0] == EXIT_OK
    run_pod(proxy, loop_thread)
    assert len(plugin.requests("RunPodSandbox")) == 1


def test_one_event_of_an_nri_plugin_is_toggled_off_and_status_metrics_and_errors_show_it(
        hosting: tuple[Proxy, NriPlugin], loop_thread: LoopThread, capsys: pytest.CaptureFixture[str]) -> None:
    proxy, plugin = hosting
    code, out = ctl(proxy, "disable", "10-ops", "--hook", "runpodsandbox", "--reason", "slow on pods")
    assert code == EXIT_OK, out
    assert "nri:10-ops  RunPodSandbox" in out and "slow on pods" in out
    run_pod(proxy, loop_thread)
    assert plugin.requests("RunPodSandbox") == []
    assert proxy.hook_service is not None and proxy.hook_service.nri.wants(nri_events.STOP_POD_SANDBOX)

    status = json.loads(ctl(proxy, "status", "-o", "json")[1])
    (shown,) = status["nri_plugins"]
    assert shown["enabled"] and shown["disabled_reason"] == ""  # on while one of its events is
    assert {e["hook"]: e["enabled"] for e in shown["event_stats"]} == {"RunPodSandbox": False, "StopPodSandbox": True}
    assert shown["event_stats"][0]["calls"] == 0  # not sent, not counted
    (toggle,) = status["toggles"]
    assert (toggle["plugin"], toggle["hooks"], toggle["staged"]) == ("nri:10-ops", ["RunPodSandbox"], False)
    human = ctl(proxy, "status")[1]
    assert "10-ops  enabled" in human and "RunPodSandbox   OFF" in human and "StopPodSandbox  on" in human
    exposition = http_get(proxy, "/metrics")[1]
    assert 'runtimeproxy_nri_events_disabled{event="RunPodSandbox"} 1.0' in exposition
    assert 'runtimeproxy_nri_events_disabled{event="StopPodSandbox"} 0.0' in exposition
    assert "runtimeproxy_nri_plugins_disabled 0.0" in exposition
    promtool_check(exposition)

    capsys.readouterr()
    assert ctl(proxy, "disable", "10-ops", "--hook", "PreRunPodSandbox", "--reason", "x")[0] == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("runtimeproxyctl: error: PreRunPodSandbox is a hook of hook plugins;")
    assert err.rstrip().endswith("did you mean RunPodSandbox?")
    assert ctl(proxy, "enable", "nri:10-ops", "--hook", "StopPodSandbox")[0] == EXIT_OK  # nothing to enable
    assert "nothing to enable" in capsys.readouterr().err

    assert ctl(proxy, "enable", "nri:10-ops", "--hook", "RunPodSandbox")[0] == EXIT_OK
    run_pod(proxy, loop_thread)
    assert len(plugin.requests("RunPodSandbox")) == 1
    assert json.loads(ctl(proxy, "status", "-o", "json")[1])["toggles"] == []


def test_an_event_toggle_of_an_nri_plugin_not_attached_yet_is_staged_by_its_toggle_name(
        hosting: tuple[Proxy, NriPlugin], capsys: pytest.CaptureFixture[str]) -> None:
    proxy, _ = hosting
    assert ctl(proxy, "disable", "nri:20-later", "--hook", "CreateContainer", "--reason", "x")[0] == 3
    code, out = ctl(proxy, "disable", "nri:20-later", "--hook", "CreateContainer", "--reason", "x", "--stage")
    assert code == EXIT_OK and "nri:20-later (staged)  CreateContainer" in out
    capsys.readouterr()
    # The bare id of a plugin that is not attached names a hook plugin's config file: an NRI event is refused.
    assert ctl(proxy, "disable", "20-other", "--hook", "CreateContainer", "--reason", "x", "--stage")[0] == EXIT_USAGE
    assert "(an NRI plugin that is not attached is named nri:20-other)" in capsys.readouterr().err


def test_a_staged_shadow_puts_an_nri_plugin_on_trial_from_its_first_attach(
        hosting: tuple[Proxy, NriPlugin], loop_thread: LoopThread, tmp_path: Path) -> None:
    proxy, _ = hosting
    assert proxy.nri is not None
    assert ctl(proxy, "shadow", "nri:20-next")[0] == 3  # not attached: a typo is not a shadow
    code, out = ctl(proxy, "shadow", "nri:20-next", "--stage")
    assert code == EXIT_OK and "nri:20-next (staged)  in shadow" in out, out
    later = NriPlugin(name="next", index="20", events=event_mask(nri.RUN_POD_SANDBOX))
    loop_thread.run(later.connect(tmp_path / "nri.sock"))
    deadline = time.monotonic() + 10
    while len(proxy.nri.plugins) < 2:
        assert time.monotonic() < deadline, "the staged NRI plugin never attached"
        time.sleep(0.01)
    assert proxy.nri.in_shadow(next(p for p in proxy.nri.plugins if p.plugin_id == "20-next"))


def test_shadow_puts_an_nri_plugin_on_trial_by_its_id_and_its_calls_are_traced(hosting: tuple[Proxy, NriPlugin],
                                                                              loop_thread: LoopThread) -> None:
    proxy, plugin = hosting
    assert proxy.nri is not None
    code, out = ctl(proxy, "shadow", "10-ops")
    assert code == EXIT_OK, out
    assert proxy.nri.in_shadow(proxy.nri.plugins[0])
    (shown,) = json.loads(ctl(proxy, "status", "-o", "json")[1])["nri_plugins"]
    assert shown["shadow"]
    assert "10-ops  enabled, in shadow" in ctl(proxy, "status")[1]
    run_pod(proxy, loop_thread)
    assert len(plugin.requests("RunPodSandbox")) == 1  # called in shadow
    code, out = ctl(proxy, "trace", "web")
    assert code == EXIT_OK, out
    assert "NRI RunPodSandbox  pod" in out and "nri:10-ops  ok (shadow: not applied)" in out
    assert ctl(proxy, "unshadow", "nri:10-ops")[0] == EXIT_OK
    assert not proxy.nri.in_shadow(proxy.nri.plugins[0])

    proxy.nri.stats.evicted("10-ops", "ok")
    status_code, exposition = http_get(proxy, "/metrics")
    assert 'runtimeproxy_nri_evictions_total{outcome="ok",plugin="10-ops"} 1.0' in exposition
    promtool_check(exposition)


# -- plugin text, bounded and escaped --------------------------------------------------------------------------
MiB = 1 << 20
# What a plugin could answer to forge a log line and a `try-plugin` verdict, ahead of 3 MiB.
FORGED = "\n\x1b[2K\rI1126 10:00:00 runtimeproxy: 10-ops: valid; no change\n\u202e"


def refusing(message: str) -> Callable[[NriPlugin, Message], Awaitable[Message]]:
    async def handle(plugin: NriPlugin, request: Message) -> Message:
        raise TtrpcError(Code.UNKNOWN, message)
    return handle


def assert_bounded_and_escaped(text: str, limit: int) -> None:
    assert len(text) < limit, len(text)
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\nI1126" not in text
    assert "\\x1b[2K" in text


def test_plugin_text_is_clipped_and_escaped_in_status_trace_logs_and_the_kubelets_error(
        start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend, tmp_path: Path, loop_thread: LoopThread,
        caplog: pytest.LogCaptureFixture) -> None:
    """Before: two plugins each answering a 3 MiB error made every `status` fail (over gRPC's 4 MiB), a 1 MiB
    eviction reason made `trace` fail and flooded the log, the kubelet got a 3-million-character message, and
    newlines and terminal escapes were printed raw."""
    install_benchmark_answers(synthetic)
    proxy = start_proxy(runtime_path=synthetic.path, admin_path=tmp_path / "admin.sock",
                        state_dir=tmp_path / "state", nri_socket=tmp_path / "nri.sock")
    loud = FORGED + "e" * 3 * MiB
    methods = {"RunPodSandbox": (nri.RunPodSandboxRequest, refusing(loud)),
               "StopPodSandbox": (nri.StopPodSandboxRequest, refusing(loud))}
    plugins = [NriPlugin(name=f"loud{n}", index=f"1{n}", events=event_mask(nri.RUN_POD_SANDBOX, nri.STOP_POD_SANDBOX),
                         methods=methods)  # type: ignore[arg-type]
               for n in (1, 2)]
    for plugin in plugins:
        loop_thread.run(plugin.connect(tmp_path / "nri.sock"))
    deadline = time.monotonic() + 10
    while not proxy.nri or len(proxy.nri.plugins) < 2:
        assert time.monotonic() < deadline, "the NRI plugins never attached"
        time.sleep(0.01)
    assert proxy.hook_service is not None
    subject = Subject("pod-1", PodRecord(name="web"))
    loop_thread.run(proxy.hook_service.nri.notify(nri_events.STOP_POD_SANDBOX, subject))  # both errors: logged
    with pytest.raises(HookFailed) as failed:
        loop_thread.run(proxy.hook_service.nri.notify(nri_events.RUN_POD_SANDBOX, subject))
    assert_bounded_and_escaped(str(failed.value), 2048)  # the CRI status message the kubelet gets
    eviction = nri.ContainerEviction(container_id="gone\n\x1b[2K", reason=FORGED + "r" * MiB)
    loop_thread.run(plugins[0].update_containers(evict=(eviction,)))

    code, out = ctl(proxy, "status")
    assert code == EXIT_OK, out[:200]
    assert_bounded_and_escaped(out, 16 * 1024)
    code, out = ctl(proxy, "trace", "web")
    assert code == EXIT_OK, out[:200]
    assert_bounded_and_escaped(out, 16 * 1024)
    logged = [record.getMessage() for record in caplog.records if "loud" in record.getMessage()]
    assert logged and all(len(line) < 4096 for line in logged)
    assert not any("\x1b" in line or "\nI1126" in line for line in logged)


def test_a_plugin_name_too_long_or_with_controls_is_refused_at_registration(hosting: tuple[Proxy, NriPlugin],
                                                                            tmp_path: Path,
                                                                            loop_thread: LoopThread) -> None:
    proxy, _ = hosting
    for name in ("n" * MiB, "ops\n\x1b[2Kfake"):
        plugin = NriPlugin(name=name, index="20", events=event_mask(nri.RUN_POD_SANDBOX))
        with pytest.raises(TtrpcError, match="invalid plugin name"):
            loop_thread.run(plugin.connect(tmp_path / "nri.sock"))
    assert proxy.nri is not None and [p.plugin_id for p in proxy.nri.plugins] == ["10-ops"]
