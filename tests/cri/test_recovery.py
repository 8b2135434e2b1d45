"""cri.recovery: every object the runtime lists gets a record, even one whose verbose status is too large
for containerd to send (issue 17: a 20.9 MB status, over containerd's 16 MiB max_send_message_size)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from runtimeproxy.cri.backend import BackendChannel
from runtimeproxy.cri import messages as cri_messages
from runtimeproxy.cri.recovery import BackendRecords, _recorded_env_value, recorded_container
from runtimeproxy.hooks.context import HookContext
from runtimeproxy.hooks.model import ContainerState
from runtimeproxy.hooks.rebuild import rebuild
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import Store
from rplab.loop import LoopThread
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

POD, SMALL, LARGE = "pod-1", "ctr-small", "ctr-large"
TOO_LARGE = "grpc: trying to send message larger than max (20975668 vs. 16777216)"


class Runtime:
    """containerd in miniature: a pod, two containers; the large one's verbose status cannot be sent."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._server: grpc.aio.Server | None = None

    def _container(self, container_id: str) -> cri.Container:
        return cri.Container(id=container_id, pod_sandbox_id=POD,
                             metadata=cri.ContainerMetadata(name=container_id, attempt=1))

    async def _answer(self, method: str, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.calls.append(method)
        if method == "ListPodSandbox":
            return cri.ListPodSandboxResponse(items=[cri.PodSandbox(id=POD)]).SerializeToString()
        if method == "PodSandboxStatus":
            return cri.PodSandboxStatusResponse(status=cri.PodSandboxStatus(id=POD)).SerializeToString()
        if method == "ListContainers":
            request = cri.ListContainersRequest.FromString(data)
            ids = [request.filter.id] if request.filter.id else [SMALL, LARGE]
            return cri.ListContainersResponse(containers=[self._container(i) for i in ids]).SerializeToString()
        request = cri.ContainerStatusRequest.FromString(data)
        status = cri.ContainerStatus(id=request.container_id, metadata=cri.ContainerMetadata(name="app", attempt=1),
                                     annotations={"io.kubernetes.container.hash": "abc"})
        status.resources.linux.memory_limit_in_bytes = 64 << 20
        response = cri.ContainerStatusResponse(status=status)
        if request.verbose:
            if request.container_id == LARGE:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, TOO_LARGE)
            # containerd writes env values as strings, not the base64 of proto3 JSON's bytes; "abcd" reads as both.
            config = {"metadata": {"name": "app"}, "envs": [{"key": "K", "value": "v"}, {"key": "B", "value": "abcd"}]}
            response.info["info"] = json.dumps({"sandboxID": POD, "config": config})
        return response.SerializeToString()

    async def start(self, socket: Path) -> None:
        def handler(method: str) -> grpc.RpcMethodHandler:
            async def answer(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await self._answer(method, data, context)
            return grpc.unary_unary_rpc_method_handler(answer)

        methods = ["ListPodSandbox", "PodSandboxStatus", "ListContainers", "ContainerStatus"]
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "runtime.v1.RuntimeService", {name: handler(name) for name in methods})])
        self._server.add_insecure_port(f"unix://{socket}")
        await self._server.start()

    async def stop(self) -> None:
        assert self._server is not None
        await self._server.stop(0)


@pytest.fixture
def records(loop_thread: LoopThread, tmp_path: Path) -> Iterator[tuple[Runtime, BackendRecords]]:
    runtime = Runtime()
    loop_thread.run(runtime.start(tmp_path / "runtime.sock"))
    channel = loop_thread.run(_channel(tmp_path / "runtime.sock"))
    yield runtime, BackendRecords(channel)
    loop_thread.run(channel.close())
    loop_thread.run(runtime.stop())


async def _channel(socket: Path) -> BackendChannel:
    return BackendChannel("runtime", socket, 256 << 20)


def test_a_container_whose_verbose_status_is_too_large_is_recorded_from_its_plain_status(
    loop_thread: LoopThread, records: tuple[Runtime, BackendRecords]
) -> None:
    _, source = records
    store = Store()
    loop_thread.run(rebuild(HookContext(store, source, SkipRule("skip", "true")), source))
    assert store.container_count == 2
    small, large = store.container(SMALL), store.container(LARGE)
    assert small is not None and large is not None
    assert small.env == {"K": "v", "B": "abcd"}  # the verbose status's config
    assert large.pod_id == POD  # from the list
    assert large.id == LARGE and large.name == "app"
    assert large.annotations["io.kubernetes.container.hash"] == "abc"
    assert large.resources is not None and large.resources.memory_limit_in_bytes == 64 << 20


def test_a_lazy_fill_of_such_a_container_finds_its_pod_with_a_list(
    loop_thread: LoopThread, records: tuple[Runtime, BackendRecords]
) -> None:
    runtime, source = records
    record = loop_thread.run(source.load_container(LARGE))
    assert record is not None and record.pod_id == POD
    assert runtime.calls == ["ContainerStatus", "ContainerStatus", "ListContainers"]


@pytest.mark.parametrize(("value", "spec_env", "expected"), [
    ("v", {"K=v"}, b"v"),  # containerd built on a cri-api with string values
    (base64.b64encode(b"\xffs").decode(), {"K=\ufffds"}, b"\xffs"),  # with bytes values: base64
    ("abcd", {"K=abcd"}, b"abcd"),  # text that also reads as base64: the spec says text
    ("abcd", set(), b"abcd"),  # no spec to tell: text
    ("not base64!", set(), b"not base64!"),
])
def test_an_env_value_of_the_verbose_config_is_read_as_the_spec_shows_it(
        value: str, spec_env: set[str], expected: bytes) -> None:
    assert _recorded_env_value({"key": "K", "value": value}, spec_env) == expected


def test_a_container_s_model_comes_from_its_status_and_verbose_info() -> None:
    """Labels, state and times from the status; argv and pid from containerd's verbose info (the OCI spec's
    process, the task's pid); bind mounts and devices from the config it was created with."""
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app"), labels={"io.kubernetes.container.name": "app"},
        mounts=[cri.Mount(container_path="/data", host_path="/srv", readonly=True)],
        devices=[cri.Device(container_path="/dev/fuse", host_path="/dev/fuse", permissions="rw")])
    status = cri.ContainerStatus(state=cri.CONTAINER_RUNNING, created_at=10, started_at=20, labels={"x": "y"})
    info = {"pid": 4242, "runtimeSpec": {"process": {"args": ["/bin/app", "-v"]}}}
    record = recorded_container(cri_messages.container_model(POD, config), config, status, info)
    assert (record.pod_id, record.labels, record.state, record.pid) == \
        (POD, {"io.kubernetes.container.name": "app", "io.cri-containerd.kind": "container"},
         ContainerState.RUNNING, 4242)
    assert (record.created_ns, record.started_ns, record.finished_ns) == (10, 20, 0)
    assert record.edits is not None and record.edits.args == ("/bin/app", "-v")
    assert [(m.destination, m.readonly) for m in record.edits.mounts] == [("/data", True)]
    assert [(d.path, d.permissions) for d in record.edits.devices] == [("/dev/fuse", "rw")]
    exited = cri.ContainerStatus(state=cri.CONTAINER_EXITED, finished_at=30, labels={"x": "y"})
    plain = recorded_container(cri_messages.container_model(POD, config), None, exited, {})
    # Without the verbose config (too large to be sent): the status's labels, the edits not known.
    assert (plain.labels, plain.state, plain.edits, plain.pid, plain.finished_ns) == \
        ({"x": "y", "io.cri-containerd.kind": "container"}, ContainerState.STOPPED, None, 0, 30)


def test_the_rebuild_records_each_container_s_state(records: tuple[Runtime, BackendRecords],
                                                    loop_thread: LoopThread) -> None:
    _, backend = records
    store = Store()
    loop_thread.run(rebuild(HookContext(store, backend, SkipRule("skip", "true")), backend))
    small = store.container(SMALL)
    assert small is not None and small.state is ContainerState.CREATED  # the status's state (0: CREATED)
