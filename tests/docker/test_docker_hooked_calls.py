"""DockerHooks (the Docker frontend's hooked calls) driven directly: a real hook core and in-process plugins;
dockerd is absent (store misses find nothing), which these cases do not need."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.kits.hooks import AttachedNri, ScriptedPlugin, refresh_on_loop, register
from runtimeproxy.docker.engine import EngineClient
from runtimeproxy.docker.hooks import HOOK_FAILED_STATUS, DockerHooks
from runtimeproxy.docker.interception import ErrorReply, InterceptedCall, UpstreamAnswer
from runtimeproxy.docker.runtime import DockerRuntime
from runtimeproxy.docker.routes import HookedRoute, hooked_route
from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.edits import ImageIdentity
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.journal import (
    CREATE_CONTAINER, JOURNAL_FILE_NAME, START_CONTAINER, CallJournal, InFlight, read_open_entries,
)
from runtimeproxy.hooks.hook_messages import pod_record
from rplab.loop import LoopThread
from runtimeproxy.options import ProxyOptions
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

SANDBOX_CREATE = b"/v1.41/containers/create?name=k8s_POD_web_ns_u-1_0"
SANDBOX_BODY = {"Labels": {"io.kubernetes.docker.type": "podsandbox", "app": "web"},
                "HostConfig": {"CgroupParent": "/kubepods", "CpuShares": 2}}


class Bench:
    def __init__(self, loop: LoopThread, base: Path, engine: object = None) -> None:
        """`engine`: dockerd's engine client (None: one to a dockerd that is absent)."""
        self.loop = loop
        self.base = base
        options = ProxyOptions(listen_path=base / "rp.sock", runtime_path=base / "absent-dockerd.sock",
                               backend_mode="Docker", hook_config_dir=base / "hookserver.d")
        self.service = HookService(options)
        engine = engine or EngineClient(options.runtime_path)
        self.hooks = DockerHooks(self.service, DockerRuntime(engine))  # type: ignore[arg-type]
        self.plugins: list[ScriptedPlugin] = []

    def plugin(self, plugin: ScriptedPlugin, hooks_: tuple[str, ...], policy: str = "Ignore") -> ScriptedPlugin:
        socket = self.base / f"plugin{len(self.plugins)}.sock"
        self.loop.run(plugin.start(socket))
        self.plugins.append(plugin)
        register(self.service.registry.config_dir, f"{len(self.plugins)}-scripted.json", socket, hooks_, policy)
        refresh_on_loop(self.loop, self.service.registry)
        return plugin

    def call(self, method: bytes, target: bytes) -> InterceptedCall:
        match = hooked_route(method, target)
        assert match is not None
        return InterceptedCall(match, method, target, ())

    def before(self, call: InterceptedCall, body: dict) -> bytes | ErrorReply:
        return self.loop.run(self.hooks.before(call, json.dumps(body).encode()))

    def after(self, call: InterceptedCall, status: int, body: bytes = b"") -> None:
        self.loop.run(self.hooks.after(call, UpstreamAnswer(status, (), body)))

    def close(self) -> None:
        self.loop.run(self.service.stop())
        for plugin in self.plugins:
            self.loop.run(plugin.stop())


@pytest.fixture
def docker_bench(loop_thread: LoopThread, tmp_path: Path) -> Iterator[Bench]:
    bench = Bench(loop_thread, tmp_path)
    yield bench
    bench.close()


def test_every_hooked_route_has_its_row_of_steps(docker_bench: Bench) -> None:
    """A route routes.py matches and the hooks have no row for would fail every such request."""
    assert set(docker_bench.hooks.routes) == set(HookedRoute)


def test_a_fail_policy_failure_is_a_docker_error_naming_plugin_and_hook(docker_bench: Bench) -> None:
    async def refuse(request: hooks.PodSandboxHookRequest, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not on this node")

    docker_bench.plugin(ScriptedPlugin({"PreRunPodSandbox": refuse}), ("PreRunPodSandbox",), policy="Fail")
    outcome = docker_bench.before(docker_bench.call(b"POST", SANDBOX_CREATE), SANDBOX_BODY)
    assert isinstance(outcome, ErrorReply) and outcome.status == HOOK_FAILED_STATUS
    assert "1-scripted.json" in outcome.message and "PreRunPodSandbox" in outcome.message
    assert "not on this node" in outcome.message


def test_a_sandbox_create_is_rewritten_and_recorded_under_the_new_id(docker_bench: Bench) -> None:
    def move(request: hooks.PodSandboxHookRequest, context: object) -> hooks.PodSandboxHookResponse:
        return hooks.PodSandboxHookResponse(cgroup_parent="/kubepods/be", annotations={"hooked": "yes"})

    plugin = docker_bench.plugin(ScriptedPlugin({"PreRunPodSandbox": move}), ("PreRunPodSandbox",))
    call = docker_bench.call(b"POST", SANDBOX_CREATE)
    sent = json.loads(docker_bench.before(call, SANDBOX_BODY))  # type: ignore[arg-type]
    assert sent["HostConfig"] == {"CgroupParent": "/kubepods/be", "CpuShares": 2}
    assert sent["Labels"]["annotation.hooked"] == "yes"
    (seen,) = plugin.seen_by("PreRunPodSandbox")
    assert seen.pod_meta.name == "web" and dict(seen.labels) == {"app": "web"}
    docker_bench.after(call, 201, b'{"Id":"s-1","Warnings":[]}')
    record = docker_bench.service.store.pod("s-1")
    assert record is not None and record.cgroup_parent == "/kubepods/be"


def test_a_container_kubernetes_did_not_create_gets_no_hooks(docker_bench: Bench) -> None:
    plugin = docker_bench.plugin(ScriptedPlugin(), ("PreRunPodSandbox", "PreCreateContainer"), policy="Fail")
    body = {"Image": "busybox", "Labels": {"owner": "me"}, "HostConfig": {}}
    call = docker_bench.call(b"POST", b"/containers/create?name=mine")
    assert docker_bench.before(call, body) == json.dumps(body).encode()
    docker_bench.after(call, 201, b'{"Id":"m-1"}')
    assert plugin.seen == [] and len(docker_bench.service.store) == 0


def test_a_create_whose_strings_are_not_utf8_still_meets_a_fail_plugin(docker_bench: Bench) -> None:
    """dockerd reads such bytes as U+FFFD and creates the container: the hooks must see it too."""
    async def refuse(request: hooks.PodSandboxHookRequest, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not on this node")

    plugin = docker_bench.plugin(ScriptedPlugin({"PreRunPodSandbox": refuse}), ("PreRunPodSandbox",), policy="Fail")
    body = json.dumps(SANDBOX_BODY).encode().replace(b'"web"', b'"web\xff"')
    outcome = docker_bench.loop.run(docker_bench.hooks.before(docker_bench.call(b"POST", SANDBOX_CREATE), body))
    assert isinstance(outcome, ErrorReply) and outcome.status == HOOK_FAILED_STATUS
    (seen,) = plugin.seen_by("PreRunPodSandbox")
    assert seen.labels["app"] == "web\ufffd"


def test_a_body_that_is_not_json_is_relayed_untouched(docker_bench: Bench) -> None:
    docker_bench.plugin(ScriptedPlugin(), ("PreRunPodSandbox",), policy="Fail")
    call = docker_bench.call(b"POST", SANDBOX_CREATE)
    assert docker_bench.loop.run(docker_bench.hooks.before(call, b"{broken")) == b"{broken"


def test_stop_and_remove_of_an_unknown_id_leave_the_answer_to_dockerd(docker_bench: Bench) -> None:
    plugin = docker_bench.plugin(ScriptedPlugin(), ("PostStopContainer", "PostStopPodSandbox"))
    docker_bench.after(docker_bench.call(b"POST", b"/v1.41/containers/nope/stop"), 404, b'{"message":"No such container: nope"}')
    docker_bench.after(docker_bench.call(b"POST", b"/v1.41/containers/gone/stop"), 204)  # dockerd unreachable here
    docker_bench.after(docker_bench.call(b"DELETE", b"/v1.41/containers/nope"), 404)
    assert plugin.seen == []


CONTAINER_CREATE = b"/v1.41/containers/create?name=k8s_app_web_ns_u-1_0"
CONTAINER_BODY = {"Labels": {"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": "s-unknown"},
                  "Env": ["KEEP=me"], "HostConfig": {"CgroupParent": "/kubepods/pod-u-1", "CpuShares": 2}}


def test_a_container_of_a_pod_the_proxy_does_not_know_gets_its_hooks(docker_bench: Bench) -> None:
    """As in CRI mode (which has sandbox_config): the pod's context is what the request says of it."""
    def shares(request: hooks.ContainerResourceHookRequest, context: object) -> hooks.ContainerResourceHookResponse:
        return hooks.ContainerResourceHookResponse(container_resources=hooks.LinuxContainerResources(cpu_shares=700))

    plugin = docker_bench.plugin(ScriptedPlugin({"PreCreateContainer": shares}), ("PreCreateContainer",))
    call = docker_bench.call(b"POST", CONTAINER_CREATE)
    sent = json.loads(docker_bench.before(call, CONTAINER_BODY))  # type: ignore[arg-type]
    (seen,) = plugin.seen_by("PreCreateContainer")
    assert (seen.pod_meta.name, seen.pod_meta.namespace, seen.pod_meta.uid) == ("web", "ns", "u-1")
    assert seen.pod_cgroup_parent == "/kubepods/pod-u-1"
    assert sent["HostConfig"] == {"CgroupParent": "/kubepods/pod-u-1", "CpuShares": 700}
    docker_bench.after(call, 201, b'{"Id":"c-1"}')
    record = docker_bench.service.store.container("c-1")
    assert record is not None and record.pod_id == "s-unknown"


class ImageEngine:
    """EngineClient in miniature for a create's reads: no containers, CDI off, every image busybox; the GETs it
    was sent."""

    def __init__(self) -> None:
        self.gets: list[str] = []

    async def inspect(self, container_id: str) -> object:
        return None

    async def get_json(self, path: str) -> object:
        self.gets.append(path)
        if path == "/info":
            return {}
        return {"Id": "sha256:cfg", "RepoTags": ["busybox:1.36"], "RepoDigests": ["busybox@sha256:index"],
                "Config": {"Entrypoint": ["/entry"], "Cmd": ["sh"]}}


@pytest.mark.parametrize("events", [None, (), (nri_events.CREATE_CONTAINER,)],
                         ids=["no NRI plugin", "attached elsewhere", "subscribed to CreateContainer"])
def test_a_create_s_edits_are_decoded_once_with_the_image_only_while_an_nri_plugin_is_attached(
        loop_thread: LoopThread, tmp_path: Path, events: tuple[str, ...] | None) -> None:
    """The body has no Entrypoint: the argv is the image's, read (one GET /images/{name}/json) only for an
    attached NRI plugin, which may see it at CreateContainer or later from the model."""
    engine = ImageEngine()
    bench = Bench(loop_thread, tmp_path, engine)
    nri = AttachedNri(events or ())
    if events is not None:
        bench.service.nri = nri
    try:
        call = bench.call(b"POST", CONTAINER_CREATE)
        bench.before(call, {**CONTAINER_BODY, "Image": "busybox"})
        bench.after(call, 201, b'{"Id":"c-1"}')
        record = bench.service.store.container("c-1")
    finally:
        bench.close()
    images = [get for get in engine.gets if get.startswith("/images/")]
    assert record is not None and record.edits is not None
    if events is None:
        assert images == [] and record.edits.args == () and record.edits.image is None
    else:
        assert images == ["/images/busybox/json"] and record.edits.args == ("/entry", "sh")
        assert record.edits.image == ImageIdentity("busybox:1.36", "sha256:index", "sha256:cfg")
    assert nri.shown == ([record.edits] if events else [])  # CreateContainer's plugin saw what the model records


class Dockerd:
    """EngineClient in miniature: one sandbox and one container."""

    def __init__(self) -> None:
        self.objects = {
            "s-1": {"Id": "s-1", "Name": "/k8s_POD_web_ns_u-1_0",
                    "Config": {"Labels": {"io.kubernetes.docker.type": "podsandbox", "app": "web"}},
                    "HostConfig": {"CgroupParent": "/kubepods/old"}},
            "c-1": {"Id": "c-1", "Name": "/k8s_app_web_ns_u-1_0",
                    "Config": {"Labels": {"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": "s-1"},
                               "Env": ["A=1"]},
                    "HostConfig": {"CpuShares": 2}},
        }

    async def list_labelled(self, label: str) -> dict[str, dict[str, str]]:
        return {cid: each["Config"]["Labels"] for cid, each in self.objects.items()}  # type: ignore[index]

    async def inspect(self, container_id: str) -> object:
        return self.objects.get(container_id)


def test_the_store_rebuild_from_dockerd_never_overwrites_what_a_call_recorded(docker_bench: Bench) -> None:
    """As in CRI mode (Docker mode used to overwrite): a record put by a live call is at least as new. The hook
    service runs the rebuild itself and says when it is over (`rebuilt`)."""
    service = docker_bench.service
    store = service.store
    store.put_pod("s-1", pod_record(hooks.PodSandboxHookRequest(cgroup_parent="/kubepods/new")))
    service.use_runtime(DockerRuntime(Dockerd()))  # type: ignore[arg-type]

    async def rebuild() -> None:
        service.start_rebuild()
        await service.store_rebuilt()
        assert service.rebuilt.is_set()

    docker_bench.loop.run(rebuild())
    pod, container = store.pod("s-1"), store.container("c-1")
    assert pod is not None and pod.cgroup_parent == "/kubepods/new"
    assert container is not None and container.pod_id == "s-1" and container.env == {"A": "1"}


def test_a_container_create_and_start_are_journaled_until_their_answer(docker_bench: Bench) -> None:
    """Docker mode's calls in flight, for the next proxy after a crash (hooks.journal): begun once the pre-hooks
    let the call through, ended in after() before cri-dockerd gets the answer, or at a pre-hook's failure."""
    state = docker_bench.base / "state"
    state.mkdir()
    journal = docker_bench.service.journal = CallJournal(state)
    journal.start()
    path = state / JOURNAL_FILE_NAME
    create = docker_bench.call(b"POST", CONTAINER_CREATE)
    docker_bench.before(create, CONTAINER_BODY)
    assert read_open_entries(path) == [InFlight(CREATE_CONTAINER, "s-unknown", "app", 0)]
    docker_bench.after(create, 201, b'{"Id":"c-1"}')
    start = docker_bench.call(b"POST", b"/v1.41/containers/c-1/start")
    docker_bench.before(start, {})
    assert read_open_entries(path) == [InFlight(START_CONTAINER, container_id="c-1")]
    docker_bench.after(start, 204)
    assert read_open_entries(path) == []

    async def refuse(request: hooks.ContainerResourceHookRequest, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not on this node")

    docker_bench.plugin(ScriptedPlugin({"PreStartContainer": refuse}), ("PreStartContainer",), policy="Fail")
    outcome = docker_bench.before(docker_bench.call(b"POST", b"/v1.41/containers/c-1/start"), {})
    assert isinstance(outcome, ErrorReply) and read_open_entries(path) == []
    journal.close()
