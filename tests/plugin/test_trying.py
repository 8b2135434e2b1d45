"""`runtimeproxyctl try-plugin` against in-process plugins: diff, validation verdict, env-drop warning."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import orjson
import pytest

from tests.kits.docs import DOCS_DIR, doc_page
from tests.kits.hooks import ScriptedPlugin
from runtimeproxy.admin.ctl import main as ctl
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.plugin import HookPlugin, samples

Serve = Callable[[object], Path]


@pytest.fixture
def serve(loop_thread: LoopThread, tmp_path: Path) -> Iterator[Serve]:
    started: list[object] = []

    def start(plugin: object) -> Path:
        socket = tmp_path / f"plugin{len(started)}.sock"
        loop_thread.run(plugin.start(socket))  # type: ignore[attr-defined]
        started.append(plugin)
        return socket

    yield start
    for plugin in started:
        loop_thread.run(plugin.stop())  # type: ignore[attr-defined]


def try_plugin(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = ctl(["try-plugin", *args], out=out)
    return code, out.getvalue()


class Kit(HookPlugin):
    def pre_create_container(self, request: hooks.ContainerResourceHookRequest) -> hooks.ContainerResourceHookResponse:
        return hooks.ContainerResourceHookResponse(container_envs={"MY_VAR": "x"})


def test_every_hook_with_samples(serve: Serve) -> None:
    code, out = try_plugin("--endpoint", f"unix://{serve(Kit())}")
    assert code == 0, out
    assert out == (
        "PreRunPodSandbox: valid; no change\n"
        "PreCreateContainer: valid; the proxy would change:\n"
        '    container_envs["MY_VAR"]: (unset) -> "x"\n'
        "PreStartContainer: valid; no change\n"
        "PostStartContainer: answered (a post-hook: its answer changes nothing)\n"
        "PreUpdateContainerResources: valid; no change\n"
        "PostStopContainer: answered (a post-hook: its answer changes nothing)\n"
        "PostStopPodSandbox: answered (a post-hook: its answer changes nothing)\n")


def test_a_plain_answer_that_drops_envs_is_warned(serve: Serve) -> None:
    naive = ScriptedPlugin({"PreCreateContainer": lambda request, context:
                            hooks.ContainerResourceHookResponse(container_envs={"MY_VAR": "x"})})
    code, out = try_plugin("--endpoint", str(serve(naive)), "--hook", "PreCreateContainer")
    assert code == 0
    assert '    container_envs["PATH"]: "/usr/local/sbin' in out
    assert '-> (unset)' in out
    assert ("warning: the answer's container_envs lacks APP_MODE, HOSTNAME, KUBERNETES_SERVICE_HOST, "
            "KUBERNETES_SERVICE_PORT, PATH: the proxy removes them") in out


@pytest.mark.parametrize("driver,parent,verdict", [
    ("cgroupfs", "/kubepods/besteffort/pod1", "valid"),
    ("systemd", "kubepods-besteffort-pod1.slice", "valid"),
    ("cgroupfs", "kubepods-besteffort-pod1.slice", "INVALID answer, pod_cgroup_parent: "
                                                    '"kubepods-besteffort-pod1.slice" and the pod\'s parent'),
    ("cgroupfs", "/system.slice/x", 'INVALID answer, pod_cgroup_parent: "/system.slice/x" is outside "kubepods"'),
    ("cgroupfs", "kubepods/x", "INVALID answer, pod_cgroup_parent: \"kubepods/x\" is neither an absolute path"),
])
def test_validation_verdicts_are_the_proxys(serve: Serve, driver: str, parent: str, verdict: str) -> None:
    class Mover(HookPlugin):
        def pre_create_container(self, request: hooks.ContainerResourceHookRequest) -> hooks.ContainerResourceHookResponse:
            return hooks.ContainerResourceHookResponse(pod_cgroup_parent=parent)

    code, out = try_plugin("--endpoint", str(serve(Mover())), "--hook", "PreCreateContainer",
                           "--cgroup-driver", driver)
    assert out.startswith(f"PreCreateContainer: {verdict}"), out
    assert code == (0 if verdict == "valid" else 1)


def test_a_failing_hook_and_json_output(serve: Serve) -> None:
    async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no capacity")

    code, out = try_plugin("--endpoint", str(serve(ScriptedPlugin({"PreRunPodSandbox": refuse}))),
                           "--hook", "PreRunPodSandbox", "-o", "json")
    assert code == 1
    [trial] = orjson.loads(out)["hooks"]
    assert (trial["hook"], trial["code"], trial["details"]) == ("PreRunPodSandbox", "FAILED_PRECONDITION",
                                                                "no capacity")


def test_a_plugin_cannot_fake_a_verdict_on_screen(serve: Serve) -> None:
    """Its error's newline and escapes are shown escaped: the verdict line stays the proxy's (before: a carriage
    return and an erase-line turned FAILED into `PreRunPodSandbox: valid; no change` on a terminal)."""
    forged = "\r\x1b[2KPreRunPodSandbox: valid; no change\n\x1b[8m"

    async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, forged)

    code, out = try_plugin("--endpoint", str(serve(ScriptedPlugin({"PreRunPodSandbox": refuse}))),
                           "--hook", "PreRunPodSandbox")
    assert code == 1
    assert out.splitlines()[0].startswith("PreRunPodSandbox: FAILED FAILED_PRECONDITION: "
                                          "\\r\\x1b[2KPreRunPodSandbox: valid; no change\\n\\x1b[8m -- ")
    assert "\x1b" not in out and "\r" not in out and len(out.splitlines()) == 1


def test_a_request_from_a_record_line(serve: Serve, tmp_path: Path) -> None:
    from google.protobuf import json_format

    request = samples.container_request()
    request.container_envs.clear()
    request.container_envs["ONLY"] = "1"
    line = {"hook": "PreCreateContainer",
            "request": json_format.MessageToDict(request, preserving_proto_field_name=True)}
    (tmp_path / "request.json").write_bytes(orjson.dumps(line))
    code, out = try_plugin("--endpoint", str(serve(Kit())), "--request", str(tmp_path / "request.json"), "-o", "json")
    assert code == 0
    [trial] = orjson.loads(out)["hooks"]
    assert [c["field"] for c in trial["changes"]] == ['container_envs["MY_VAR"]']


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text("{}")
    code, _ = try_plugin("--endpoint", str(tmp_path / "none.sock"), "--request", str(tmp_path / "r.json"))
    assert code == 2 and "needs exactly one --hook" in capsys.readouterr().err


def test_an_unreachable_plugin(tmp_path: Path) -> None:
    code, out = try_plugin("--endpoint", str(tmp_path / "none.sock"), "--hook", "PreCreateContainer",
                           "--timeout", "1")
    assert code == 1
    assert "does not exist" in out and "PreCreateContainer: FAILED UNAVAILABLE" in out


def test_the_documented_request_example_is_tried_as_the_docs_show(serve: Serve) -> None:
    """docs/plugins.md's `--request docs/examples/try-plugin-request.json`: a labelled pod's PreCreateContainer."""
    example = DOCS_DIR / "examples" / "try-plugin-request.json"
    assert f"--request docs/{example.relative_to(DOCS_DIR)}" in doc_page("plugins.md")
    assert orjson.loads(example.read_bytes())["request"]["pod_labels"]["app"] == "web"
    code, out = try_plugin("--endpoint", f"unix://{serve(Kit())}", "--request", str(example))
    assert code == 0, out
    assert out == 'PreCreateContainer: valid; the proxy would change:\n    container_envs["MY_VAR"]: (unset) -> "x"\n'


def test_the_sample_pods_have_labels() -> None:
    for request in (samples.pod_request(), samples.container_request()):
        labels = request.labels if isinstance(request, hooks.PodSandboxHookRequest) else request.pod_labels
        assert labels["app"] == "sample"


def test_a_socket_the_proxy_refuses_is_no_valid_plugin(loop_thread: LoopThread, tmp_path: Path) -> None:
    """A plugin serving in /tmp (sticky, writable by all) answers try-plugin, but a proxy refuses every call to it
    (PERMISSION_DENIED): said with the reason and the fix, exit 1."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    plugin = Kit()
    loop_thread.run(plugin.start(shared / "plugin.sock"))
    try:
        code, out = try_plugin("--endpoint", f"unix://{shared}/plugin.sock", "--hook", "PreCreateContainer")
    finally:
        loop_thread.run(plugin.stop())
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith("warning: the proxy refuses every call to this plugin (PERMISSION_DENIED): directory "
                            f"{shared} holding socket {shared}/plugin.sock is writable by group or others"), first
    assert "serve the socket in a directory only root can write (e.g. /run/NAME/plugin.sock)" in first


@pytest.mark.parametrize("document, message", [
    ({"pod_meta": {"name": "x"}, "container_env": {"A": "1"}},
     "ContainerResourceHookRequest has no field 'container_env' (did you mean 'container_envs'?); its fields: "
     "pod_meta, container_meta, container_annotations, container_resources, pod_resources, pod_annotations, "
     "pod_labels, pod_cgroup_parent, container_envs"),
    ({"pod_meta": {"nam": "x"}},
     "ContainerResourceHookRequest.pod_meta has no field 'nam' (did you mean 'name'?); its fields: name, uid, "
     "namespace, attempt"),
    ({"pod_meta": {"attempt": "x"}}, "Failed to parse pod_meta field: Failed to parse attempt field"),
    ([1], "expected a JSON object (a ContainerResourceHookRequest), got list"),
])
def test_a_bad_request_file_is_one_line_naming_the_field_with_the_usage_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: object, message: str
) -> None:
    """Field names are the .proto's snake_case ones, as docs/plugins.md says; a typo is a usage error (2), not a
    traceback with exit 1 (an invalid answer's code) suggesting camelCase."""
    request = tmp_path / "request.json"
    request.write_bytes(orjson.dumps(document))
    code, out = try_plugin("--endpoint", str(tmp_path / "none.sock"), "--hook", "PreCreateContainer",
                           "--request", str(request))
    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"runtimeproxyctl: error: try-plugin: --request {request}: ")
    assert message in err, err


def test_a_record_line_naming_an_unknown_hook_is_a_usage_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text('{"hook": "PreCreate", "request": {}}')
    assert try_plugin("--endpoint", str(tmp_path / "none.sock"), "--request", str(tmp_path / "r.json"))[0] == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hook 'PreCreate'; the hooks: PreRunPodSandbox," in err


@pytest.mark.parametrize("name", ["missing.json", "."])
def test_a_request_file_that_cannot_be_read_is_one_line_naming_it_and_the_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    request = tmp_path / name
    code, out = try_plugin("--endpoint", str(tmp_path / "none.sock"), "--request", str(request))
    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "[Errno" not in err, err
    assert err.startswith(f"runtimeproxyctl: error: try-plugin: --request {request}: "), err
    assert "a hook request as JSON (e.g. docs/examples/try-plugin-request.json" in err, err


def test_a_bad_endpoint_is_a_usage_error_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        try_plugin("--endpoint", "tcp://127.0.0.1:1")
    assert exited.value.code == 2
