"""The admin gRPC service on its unix socket, driven through runtimeproxyctl's main()."""

from __future__ import annotations

import io
import json
import logging
import re
import socket as sockets
import stat
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runtimeproxy import __version__
from runtimeproxy.admin.ctl import (
    ADMIN_ENDPOINT_ENV, EXIT_BACKEND_DOWN, EXIT_NO_SUCH_PLUGIN, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, author, main,
)
from runtimeproxy.options import DEFAULT_ADMIN_SOCKET
from rplab.loop import LoopThread
from runtimeproxy.hooks.toggles import STATE_FILE_NAME
from rplab.cri import open_channel
from rplab.synthetic import SyntheticBackend
from runtimeproxy.app import Proxy
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

from tests.kits.admin import http_get


def ctl(proxy: Proxy, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([f"--admin-endpoint={proxy.options.admin_path}", *args], out=out)
    return code, out.getvalue()


def register_plugin(proxy: Proxy, name: str, policy: str = "Fail", policy_key: str = "failure-policy") -> None:
    config_dir = proxy.options.hook_config_dir
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / name).write_text(json.dumps({
        "remote-endpoint": str(config_dir / "nobody.sock"), policy_key: policy,
        "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer"],
    }))


def test_admin_socket_is_root_only_and_serves_reflection(operated: Proxy) -> None:
    path = operated.options.admin_path
    assert path is not None and stat.S_IMODE(path.stat().st_mode) == 0o600
    with open_channel(path) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    names = {service.name for service in response.list_services_response.service}
    assert {"runtimeproxy.admin.v1.Admin", "grpc.health.v1.Health"} <= names


def test_status_shows_backend_plugins_store_and_toggles(operated: Proxy) -> None:
    register_plugin(operated, "koordlet.json")
    (operated.options.hook_config_dir / "broken.json").write_text("{")
    code, out = wait_for(operated, lambda s: len(s["plugins"]) == 2)
    status = json.loads(out)
    assert code == EXIT_OK
    (backend,) = status["backends"]
    assert backend["reachable"] and backend["runtime_name"] == "synthetic"
    broken, koordlet = status["plugins"]
    assert broken["file"] == "broken.json" and "invalid JSON" in broken["config_problem"]
    assert koordlet["failure_policy"] == "Fail" and koordlet["enabled"]
    assert [h["hook"] for h in koordlet["hook_stats"]] == ["PreRunPodSandbox", "PreCreateContainer"]
    assert status["store"] == {"pods": 0, "containers": 0}

    code, table = ctl(operated, "status")
    assert code == EXIT_OK
    assert "koordlet.json  enabled" in table and "policy Fail" in table and "synthetic 1.0" in table


def wait_for(proxy: Proxy, condition: Callable[[dict], bool], polls: int = 100) -> tuple[int, str]:
    """Until the registry (polled every 0.5 s) shows what the test wrote."""
    for _ in range(polls):
        code, out = ctl(proxy, "status", "-o", "json")
        if condition(json.loads(out)):
            return code, out
        time.sleep(0.05)
    raise AssertionError(f"status never matched: {out}")


def test_disable_and_enable_are_persisted_and_shown(operated: Proxy) -> None:
    register_plugin(operated, "koordlet.json")
    wait_for(operated, lambda s: len(s["plugins"]) == 1)
    code, out = ctl(operated, "disable", "koordlet", "--reason", "fail policy blocks pods", "-o", "json")
    assert code == EXIT_OK
    assert json.loads(out)["toggles"][0]["plugin"] == "koordlet.json"
    state = json.loads((operated.options.state_dir / STATE_FILE_NAME).read_text())
    assert state["toggles"][0]["reason"] == "fail policy blocks pods"

    _, out = ctl(operated, "status", "-o", "json")
    (plugin,) = json.loads(out)["plugins"]
    assert not plugin["enabled"] and plugin["disabled_reason"] == "fail policy blocks pods"
    _, table = ctl(operated, "status")
    assert "DISABLED (fail policy blocks pods)" in table

    code, out = ctl(operated, "enable", "koordlet.json", "--hook", "PreCreateContainer")
    assert code == EXIT_OK and "all hooks but PreCreateContainer" in out and "fail policy blocks pods" in out
    code, out = ctl(operated, "enable", "--all")
    assert code == EXIT_OK and "(none" in out
    assert json.loads((operated.options.state_dir / STATE_FILE_NAME).read_text())["toggles"] == []


def test_bad_requests_exit_2_with_one_line(operated: Proxy, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl(operated, "disable", "koordlet", "--hook", "Nope", "--reason", "x")[0] == EXIT_USAGE
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as exited:
        ctl(operated, "disable", "--all", "koordlet", "--reason", "x")
    assert exited.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as exited:
        ctl(operated, "disable", "koordlet")  # no --reason
    assert exited.value.code == EXIT_USAGE


def test_a_toggle_state_that_cannot_be_written_is_one_line_without_an_errno(
    operated: Proxy, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    register_plugin(operated, "koordlet.json")
    wait_for(operated, lambda s: bool(s["plugins"]))
    state = operated.options.state_dir / STATE_FILE_NAME
    state.mkdir(parents=True)  # the file's place taken (as root, a mode would not stop the write)
    code, _ = ctl(operated, "disable", "koordlet", "--reason", "x")
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE and err.count("\n") == 1 and "[Errno" not in err, err
    assert f"cannot write the toggle state {state}: Is a directory" in err and err.endswith("; nothing changed\n"), err
    [logged] = [record.getMessage() for record in caplog.records if "cannot persist" in record.getMessage()]
    assert "Is a directory" in logged and "[Errno" not in logged, logged


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_timeout_of_no_time_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Not DEADLINE_EXCEEDED from a proxy that was never asked (exit 1, as if unreachable)."""
    with pytest.raises(SystemExit) as exited:
        main(["--admin-endpoint=/run/none.sock", f"--timeout={value}", "status"])
    assert exited.value.code == EXIT_USAGE
    assert capsys.readouterr().err == (f"runtimeproxyctl: error: argument --timeout: {value!r} is not a number of "
                                       "seconds above 0, e.g. 2 (see --help)\n")


def test_a_typo_is_refused_with_a_did_you_mean_and_changes_nothing(
    operated: Proxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: `disable koordlett` and `enable nothere` exited 0 with no word."""
    register_plugin(operated, "koordlet.json")
    register_plugin(operated, "nri.json")
    wait_for(operated, lambda s: len(s["plugins"]) == 2)
    capsys.readouterr()
    assert ctl(operated, "disable", "koordlett", "--reason", "INC-42") == (EXIT_NO_SUCH_PLUGIN, "")
    assert capsys.readouterr().err == (
        "runtimeproxyctl: no plugin koordlett is registered (registered: koordlet.json, nri.json); "
        "did you mean koordlet? To stage a toggle for a file that is not there yet, add --stage\n")
    assert ctl(operated, "enable", "nothere")[0] == EXIT_NO_SUCH_PLUGIN
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no plugin nothere is registered" in err and "--stage" not in err
    assert not (operated.options.state_dir / STATE_FILE_NAME).exists()  # nothing was written

    # A file written just before the command is found (the service rescans before refusing).
    register_plugin(operated, "late.json")
    assert ctl(operated, "disable", "late", "--reason", "x")[0] == EXIT_OK


def test_a_staged_toggle_is_shown_as_staged_until_its_file_appears(
    operated: Proxy, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = ctl(operated, "disable", "koordlet", "--stage", "--reason", "known bad build", "-o", "json")
    assert code == EXIT_OK
    (toggle,) = json.loads(out)["toggles"]
    assert toggle["plugin"] == "koordlet.json" and toggle["staged"] and toggle["author"] == author()
    _, table = ctl(operated, "status")
    assert "koordlet.json (staged)" in table and "(staged: no config file of that name is present" in table

    # A name with a toggle can be enabled (or disabled again) without --stage: it is no typo.
    assert ctl(operated, "enable", "koordlet", "--hook", "PreCreateContainer")[0] == EXIT_OK

    register_plugin(operated, "koordlet.json")
    _, out = wait_for(operated, lambda s: len(s["plugins"]) == 1)
    status = json.loads(out)
    (toggle,) = status["toggles"]
    assert not toggle["staged"] and toggle["except_hooks"] == ["PreCreateContainer"]
    (plugin,) = status["plugins"]
    assert [h["enabled"] for h in plugin["hook_stats"]] == [False, True]


def test_each_toggle_keeps_its_own_reason_author_and_time(
    operated: Proxy, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    register_plugin(operated, "koordlet.json")
    wait_for(operated, lambda s: len(s["plugins"]) == 1)
    monkeypatch.setenv("SUDO_USER", "alice")
    assert ctl(operated, "disable", "koordlet", "--reason", "fail policy blocks pods")[0] == EXIT_OK
    monkeypatch.setenv("SUDO_USER", "bob")
    capsys.readouterr()
    code, out = ctl(operated, "disable", "koordlet", "--hook", "PreCreateContainer", "--reason", "cpuset bug")
    assert code == EXIT_OK
    err = capsys.readouterr().err
    assert err.startswith("runtimeproxyctl: disabled koordlet.json (PreCreateContainer) with its own toggle; the "
                          "toggle of koordlet.json (all hooks) stays as it was, set by ")
    assert "(sudo: alice)" in err and err.rstrip().endswith(": fail policy blocks pods")

    _, out = ctl(operated, "status", "-o", "json")
    status = json.loads(out)
    whole, hook = status["toggles"]
    assert (whole["hooks"], whole["reason"]) == ([], "fail policy blocks pods") and "alice" in whole["author"]
    assert (hook["hooks"], hook["reason"]) == (["PreCreateContainer"], "cpuset bug") and "bob" in hook["author"]
    assert 0 < whole["since_unix_seconds"] <= hook["since_unix_seconds"] <= time.time()
    (plugin,) = status["plugins"]
    assert plugin["disabled_reason"] == "fail policy blocks pods"
    _, table = ctl(operated, "status")
    bob = author()  # the user these tests run as, and SUDO_USER
    alice = bob.replace("bob", "alice")
    assert re.search(rf"koordlet.json +all hooks +\S+ \S+ +{re.escape(alice)} +fail policy blocks pods\n", table)
    assert re.search(rf"koordlet.json +PreCreateContainer +\S+ \S+ +{re.escape(bob)} +cpuset bug\n", table)

    # Enabling a registered plugin that has no toggle is fine (it is on, as asked) and says so.
    assert ctl(operated, "enable", "koordlet")[0] == EXIT_OK
    capsys.readouterr()
    assert ctl(operated, "enable", "koordlet")[0] == EXIT_OK
    nothing = "runtimeproxyctl: nothing to enable: no toggle turns koordlet.json (all hooks) off\n"
    assert capsys.readouterr().err == nothing


def test_status_shows_unknown_config_keys_with_a_did_you_mean(operated: Proxy) -> None:
    register_plugin(operated, "koordlet.json", policy_key="failurePolicy")
    _, out = wait_for(operated, lambda s: len(s["plugins"]) == 1)
    (plugin,) = json.loads(out)["plugins"]
    assert plugin["failure_policy"] == "Ignore"
    assert plugin["config_warnings"] == ['unknown key "failurePolicy" (did you mean "failure-policy"?); ignored']
    _, table = ctl(operated, "status")
    assert 'koordlet.json  enabled\n  endpoint ' in table
    assert '\n  config: unknown key "failurePolicy" (did you mean "failure-policy"?); ignored\n' in table

    register_plugin(operated, "koordlet.json")  # fixed: the warning goes, the policy is Fail
    _, out = wait_for(operated, lambda s: s["plugins"][0]["failure_policy"] == "Fail")
    assert json.loads(out)["plugins"][0]["config_warnings"] == []


def test_an_absent_proxy_exits_1_naming_the_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    socket = tmp_path / "nothing-here.sock"
    assert main([f"--admin-endpoint={socket}", "--timeout=2", "status"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(socket) in err
    assert err == (f"runtimeproxyctl: cannot reach the proxy's admin socket: socket {socket} does not exist: nothing "
                   "serves it (not started yet?); start the proxy, or name its admin socket (the proxy's "
                   f"--admin-endpoint): --admin-endpoint PATH or ${ADMIN_ENDPOINT_ENV}\n")


def test_a_stale_admin_socket_says_so_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stale.sock"
    with sockets.socket(sockets.AF_UNIX) as stale:
        stale.bind(str(path))  # bound, never listening: what a killed proxy leaves
        assert main([f"--admin-endpoint={path}", "--timeout=2", "status"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"nobody listens on socket {path}: a stale socket (stopped?); start the proxy" in err


def test_operator_endpoints_are_off_unless_configured(proxy: Proxy) -> None:
    assert proxy.operator is not None
    assert proxy.operator.admin is None and proxy.operator.http is None
    with open_channel(proxy.options.listen_path) as channel:
        raw = channel.unary_unary("/runtime.v1.RuntimeService/Version")(b"", timeout=5)
    assert raw == b""


def test_a_taken_admin_socket_or_port_leaves_cri_serving(
    operated: Proxy, start_proxy: Callable[..., Proxy], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runtimeproxy.app")
    assert operated.operator is not None and operated.operator.http is not None
    taken_port = operated.operator.http.bound_port
    second = start_proxy(runtime_path=operated.options.runtime_path, admin_path=operated.options.admin_path,
                         metrics_address=f"127.0.0.1:{taken_port}")
    assert second.operator is not None
    assert second.operator.admin is None and second.operator.http is None
    assert "admin API not available" in caplog.text and "metrics endpoint" in caplog.text
    assert (f"admin API not available (runtimeproxyctl will not work): --admin-endpoint: "
            f"{operated.options.admin_path} is served by another running process") in caplog.text, caplog.text
    assert "; give --admin-endpoint a path no other process serves" in caplog.text
    assert (f"metrics endpoint not available: --metrics-bind-address 127.0.0.1:{taken_port}: Address already in use; "
            "give an address of this host and a port nothing else listens on") in caplog.text, caplog.text
    (started,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"listening on {second.options.listen_path}")]
    assert "admin API" not in started and "metrics on" not in started  # only what really listens
    with open_channel(second.options.listen_path) as channel:
        channel.unary_unary("/runtime.v1.RuntimeService/Version")(b"", timeout=5)
    assert ctl(operated, "status")[0] == EXIT_OK  # the first proxy keeps its socket


def test_the_start_up_line_names_the_admin_socket_and_metrics_address(
    start_proxy: Callable[..., Proxy], synthetic: SyntheticBackend, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runtimeproxy.app")
    proxy = start_proxy(runtime_path=synthetic.path, admin_path=tmp_path / "admin.sock",
                        state_dir=tmp_path / "state", metrics_address="127.0.0.1:0")
    assert proxy.operator is not None and proxy.operator.http is not None
    (started,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("listening on")]
    assert started.endswith(f"; admin API on {tmp_path / 'admin.sock'}; "
                            f"metrics on http://127.0.0.1:{proxy.operator.http.bound_port}/metrics"), started


def test_status_names_a_config_directory_that_is_missing_or_untrusted(operated: Proxy) -> None:
    config_dir = operated.options.hook_config_dir
    code, out = wait_for(operated, lambda s: "does not exist" in s["plugin_config_dir_problem"])
    assert code == EXIT_OK and json.loads(out)["plugin_config_dir"] == str(config_dir)

    register_plugin(operated, "koordlet.json")
    wait_for(operated, lambda s: s["plugin_config_dir_problem"] == "" and bool(s["plugins"])
             and s["plugins"][0]["endpoint"])
    config_dir.chmod(0o777)  # anyone could now register a plugin: no file of it is used
    _, out = wait_for(operated, lambda s: s["plugin_config_dir_problem"] != "")
    problem = json.loads(out)["plugin_config_dir_problem"]
    assert problem.startswith("not trusted:") and "writable" in problem, problem
    assert problem.endswith(f"no file in it is used until: chmod go-w {config_dir}"), problem
    code, table = ctl(operated, "status")
    assert code == EXIT_OK and f"config directory problem: {problem}" in table

    config_dir.chmod(0o755)
    wait_for(operated, lambda s: s["plugin_config_dir_problem"] == "")


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == EXIT_OK
    assert capsys.readouterr().out == f"runtimeproxyctl {__version__}\n"


def test_shadow_and_unshadow_are_persisted_and_shown(operated: Proxy, capsys: pytest.CaptureFixture[str]) -> None:
    register_plugin(operated, "koordlet.json")
    wait_for(operated, lambda s: len(s["plugins"]) == 1)
    code, out = ctl(operated, "shadow", "koordlet")
    assert code == EXIT_OK and "koordlet.json  in shadow" in out
    state = json.loads((operated.options.state_dir / STATE_FILE_NAME).read_text())
    assert state["shadows"][0]["plugin"] == "koordlet.json" and state["shadows"][0]["shadow"]
    _, table = ctl(operated, "status")
    assert "koordlet.json  enabled  IN SHADOW (called, never applied)" in table
    assert "WOULD CHANGE/DIFFER" in table
    assert ctl(operated, "unshadow", "koordlet")[0] == EXIT_OK
    _, out = ctl(operated, "status", "-o", "json")
    assert not json.loads(out)["plugins"][0]["shadow"]
    capsys.readouterr()
    assert ctl(operated, "shadow", "koordlett")[0] == EXIT_NO_SUCH_PLUGIN
    assert "did you mean koordlet? To put a plugin on trial before it registers, add --stage" in capsys.readouterr().err


def test_a_plugin_not_registered_yet_can_be_put_in_shadow_and_is_never_live(operated: Proxy) -> None:
    """The new version's shadow is staged first, and status shows it (table and json) as `disable --stage` shows
    a staged toggle; when its file appears it registers on trial."""
    code, out = ctl(operated, "shadow", "koordlet-next", "--stage")
    assert code == EXIT_OK and "koordlet-next.json (staged)  in shadow" in out
    code, table = ctl(operated, "status")
    assert code == EXIT_OK
    assert "SHADOW SETTINGS" in table and "koordlet-next.json (staged)  in shadow" in table, table
    _, out = ctl(operated, "status", "-o", "json")
    (setting,) = json.loads(out)["shadow_settings"]
    assert setting["plugin"] == "koordlet-next.json" and setting["shadow"] and setting["staged"]
    register_plugin(operated, "koordlet-next.json")
    wait_for(operated, lambda s: len(s["plugins"]) == 1)
    _, out = ctl(operated, "status", "-o", "json")
    status = json.loads(out)
    assert status["plugins"][0]["shadow"] and not status["shadow_settings"][0]["staged"]


def test_trace_of_an_unknown_pod_exits_3_saying_why(operated: Proxy, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl(operated, "trace", "default/nothere") == (EXIT_NO_SUCH_PLUGIN, "")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no trace of a pod 'default/nothere'" in err


def test_the_admin_socket_can_come_from_the_environment(
        operated: Proxy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """RUNTIMEPROXY_ADMIN_ENDPOINT: a second proxy's admin socket set once, not repeated on every command."""
    monkeypatch.setenv(ADMIN_ENDPOINT_ENV, f"unix://{operated.options.admin_path}")
    out = io.StringIO()
    assert main(["status", "-o", "json"], out=out) == EXIT_OK
    assert json.loads(out.getvalue())["admin_endpoint"] == str(operated.options.admin_path)
    monkeypatch.setenv(ADMIN_ENDPOINT_ENV, "tcp://nowhere")
    with pytest.raises(SystemExit) as exited:
        main(["status"])
    assert exited.value.code == EXIT_USAGE and f"${ADMIN_ENDPOINT_ENV}:" in capsys.readouterr().err


def test_status_with_an_unreachable_backend_says_why_and_exits_4(
    start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    proxy = start_proxy(runtime_path=tmp_path / "no-containerd.sock", admin_path=tmp_path / "admin.sock")
    out = ""
    for _ in range(100):
        code, out = ctl(proxy, "status", "-o", "json")
        (backend,) = json.loads(out)["backends"]
        if not backend["reachable"] and backend["problem"]:
            break
        time.sleep(0.05)
    assert code == EXIT_BACKEND_DOWN and not backend["reachable"], out
    assert backend["problem"] == (f"unreachable: socket {tmp_path / 'no-containerd.sock'} does not exist: nothing "
                                  "serves it (not started yet?)"), out
    code, table = ctl(proxy, "status")
    assert code == EXIT_BACKEND_DOWN
    row = next(line for line in table.splitlines() if "no-containerd.sock" in line)
    assert "NO" in row and backend["problem"] in row, table


def test_the_cri_socket_is_named_as_not_the_admin_socket(
    loop_thread: LoopThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gRPC server without the admin API (containerd's CRI socket answers `unknown service`): one line naming
    the admin socket's default and how to choose another."""
    async def serve_nothing() -> grpc.aio.Server:
        server = grpc.aio.server()
        server.add_insecure_port(f"unix://{tmp_path / 'containerd.sock'}")
        await server.start()
        return server

    server = loop_thread.run(serve_nothing())
    try:
        code = main([f"--admin-endpoint={tmp_path / 'containerd.sock'}", "status"])
    finally:
        loop_thread.run(server.stop(0))
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE and err.count("\n") == 1, err
    assert f"{tmp_path / 'containerd.sock'} is not a runtimeproxy admin socket" in err
    assert str(DEFAULT_ADMIN_SOCKET) in err and "--admin-endpoint" in err and ADMIN_ENDPOINT_ENV in err


def test_status_shows_a_plugin_whose_socket_nobody_serves_as_unreachable(operated: Proxy) -> None:
    """Registered (the plugin may start later), but said: table and json."""
    register_plugin(operated, "koordlet.json")
    code, out = wait_for(operated, lambda s: len(s["plugins"]) == 1)
    (plugin,) = json.loads(out)["plugins"]
    nobody = operated.options.hook_config_dir / "nobody.sock"
    assert code == EXIT_OK and plugin["enabled"]
    assert plugin["endpoint_problem"] == (f"socket {nobody} does not exist: nothing serves it (not started yet?); "
                                          "every call fails until the plugin serves it")
    _, table = ctl(operated, "status")
    assert f"  UNREACHABLE: {plugin['endpoint_problem']}" in table


def test_status_and_metrics_list_containers_created_without_a_plugin_failing_under_ignore(
        operated: Proxy, synthetic: SyntheticBackend) -> None:
    """The plugin is down under Ignore: the container is created without its answer; status (and the trace's
    result) say so until the container is removed."""
    register_plugin(operated, "koordlet.json", policy="Ignore")
    wait_for(operated, lambda s: len(s["plugins"]) == 1)
    create, remove = "/runtime.v1.RuntimeService/CreateContainer", "/runtime.v1.RuntimeService/RemoveContainer"

    async def created(request: bytes, context: object) -> bytes:
        return cri.CreateContainerResponse(container_id="c-missed-0123456789").SerializeToString()

    synthetic.unary[create] = created
    request = cri.CreateContainerRequest(pod_sandbox_id="p1", config=cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app")), sandbox_config=cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="web", namespace="default", uid="u1")))
    with open_channel(operated.options.listen_path) as channel:
        channel.unary_unary(create)(request.SerializeToString(), timeout=10)
        code, out = ctl(operated, "status", "-o", "json")
        missed = json.loads(out)["missed_plugins"]
        assert int(missed["count"]) == 1
        (entry,) = missed["newest"]
        # (the pod's name is the synthetic backend's: the lifecycle tests check it)
        assert (entry["id"], entry["container"], entry["hook"], entry["plugins"]) == (
            "c-missed-0123456789", "app", "PreCreateContainer", ["koordlet.json"])
        code, table = ctl(operated, "status")
        assert "MISSED PLUGINS  1 pods and containers were created without the answer" in table
        assert "c-missed-0123" in table and "koordlet.json" in table
        _, text = http_get(operated, "/metrics")
        assert 'runtimeproxy_objects_missing_plugin{plugin="koordlet.json"} 1.0' in text
        assert "runtimeproxy_objects_missed_plugin_total 1.0" in text
        code, trace = ctl(operated, "trace", "c-missed-0123456789")
        assert "without the answer of koordlet.json (policy Ignore: not re-applied)" in trace
        channel.unary_unary(remove)(cri.RemoveContainerRequest(container_id="c-missed-0123456789")
                                    .SerializeToString(), timeout=10)
    code, out = ctl(operated, "status", "-o", "json")
    missed = json.loads(out)["missed_plugins"]
    assert int(missed["count"]) == 0 and missed["newest"] == []
    assert "MISSED PLUGINS" not in ctl(operated, "status")[1]
