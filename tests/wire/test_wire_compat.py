"""Wire compatibility with a plugin built from an independent copy of the hook protocol.

tests/wire/independent_hooks.proto was written from the field table alone, with its own
message and field names; independent_plugin.py serves it in a separate process (both protos
define runtime.v1alpha1.*, which one descriptor pool cannot hold twice). If our encoding of
any field differed from koordinator's numbers and types, the plugin would see it under the
wrong field, as an unknown field, or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2

from runtimeproxy.hooks import dispatcher as hookpoints
from runtimeproxy.hooks.dispatcher import Dispatcher
from rplab.loop import LoopThread
from rplab.example_plugin import registration
from rplab.synthetic import SyntheticBackend
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.hooks.registry import PluginRegistry
from runtimeproxy.app import Proxy
from wirekit import ANNOTATION, PluginProcess, compile_proto, numbered

POD_CGROUP_PARENT = "/kubepods/wire-pod-parent"
CPU_SHARES = 640
MEMORY_LIMIT = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_proto(tmp_path_factory.mktemp("wiregen"))


@pytest.fixture(scope="module")
def independent(generated: Path) -> Iterator[PluginProcess]:
    base = generated.parent / f"{generated.name}-run"
    base.mkdir()
    plugin = PluginProcess(generated, base / "independent.sock", base / "records.jsonl",
                           "--pod-cgroup-parent", POD_CGROUP_PARENT, "--cpu-shares", str(CPU_SHARES),
                           "--memory-limit", str(MEMORY_LIMIT), "--env", "WIRE_PLUGIN=independent")
    plugin.start()
    yield plugin
    assert plugin.stop() == 0, plugin.log_text()


@pytest.fixture
def plugin(independent: PluginProcess) -> PluginProcess:
    independent.forget()
    return independent


@pytest.fixture
def stub(plugin: PluginProcess) -> Iterator[hooks_grpc.RuntimeHookServiceStub]:
    with grpc.insecure_channel(f"unix://{plugin.socket}") as channel:
        yield hooks_grpc.RuntimeHookServiceStub(channel)


# --- requests with every field set to a distinct, non-default value (edge values included) -------


def resources(seed: int) -> hooks.LinuxContainerResources:
    return hooks.LinuxContainerResources(
        cpu_period=seed + 1, cpu_quota=-(seed + 2), cpu_shares=seed + 3, memory_limit_in_bytes=(1 << 40) + seed,
        oom_score_adj=-(seed + 5), cpuset_cpus=f"{seed}-{seed + 3}", cpuset_mems=f"{seed % 7},{seed % 5}",
        hugepage_limits=[hooks.HugepageLimit(page_size="2MB", limit=(1 << 64) - 1 - seed),
                         hooks.HugepageLimit(page_size="1GB", limit=seed + 7)],
        unified={f"memory.high.{seed}": f"{seed}M", f"cpu.weight.{seed}": str(seed)},
        memory_swap_limit_in_bytes=(1 << 62) + seed,
    )


def pod_meta() -> hooks.PodSandboxMetadata:
    return hooks.PodSandboxMetadata(name="wire-pod", uid="8d1e6c4e-uid", namespace="wire-ns", attempt=(1 << 32) - 1)


def pod_request() -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(
        pod_meta=pod_meta(), runtime_handler="kata-wire",
        labels={"app": "wire", "tier": "ünïcode ✓"}, annotations={"note": "a" * 300, "empty": ""},
        cgroup_parent="/kubepods/burstable/pod8d1e6c4e", overhead=resources(100), resources=resources(200),
    )


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=pod_meta(),
        container_meta=hooks.ContainerMetadata(name="app", attempt=3, id="c" * 64),
        container_annotations={"c-note": "1", "c-empty": ""},
        container_resources=resources(300),
        pod_resources=resources(400),
        pod_annotations={"p-note": "2"},
        pod_labels={"app": "wire", "k8s.io/x": "y"},
        pod_cgroup_parent="/kubepods/burstable/pod8d1e6c4e",
        container_envs={"PATH": "/usr/bin:/bin", "EMPTY": "", "UNICODE": "✓"},
    )


def assert_every_field_set(message: Any) -> None:
    assert len(message.ListFields()) == len(message.DESCRIPTOR.fields), message.DESCRIPTOR.name
    for field, value in message.ListFields():
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            for item in (value if field.is_repeated else [value]):
                assert_every_field_set(item)


def has_unknown_fields(message: Any) -> bool:
    stripped = type(message)()
    stripped.CopyFrom(message)
    stripped.DiscardUnknownFields()
    return stripped.ByteSize() != message.ByteSize()


def test_the_requests_here_set_every_field() -> None:
    assert_every_field_set(pod_request())
    assert_every_field_set(container_request())


# --- the independent proto, statically ---------------------------------------------------------------


def test_independent_proto_has_our_numbers_and_types_under_other_names(tmp_path: Path) -> None:
    descriptor_set = tmp_path / "independent.pb"
    compile_proto(tmp_path / "gen", descriptor_set)
    (theirs,) = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file
    ours = descriptor_pb2.FileDescriptorProto()
    hooks.DESCRIPTOR.CopyToProto(ours)
    assert theirs.package == ours.package == "runtime.v1alpha1"
    (their_service,) = theirs.service
    (our_service,) = ours.service
    assert their_service.name == our_service.name == "RuntimeHookService"

    their_messages = {f".{theirs.package}.{m.name}": m for m in theirs.message_type}
    our_messages = {f".{ours.package}.{m.name}": m for m in ours.message_type}
    pairs: dict[str, str] = {}  # our type name -> theirs, discovered from the service and the fields

    def pair(our_type: str, their_type: str) -> None:
        assert pairs.setdefault(our_type, their_type) == their_type, f"{our_type} maps to two types"

    their_methods = {method.name: method for method in their_service.method}
    assert set(their_methods) == {method.name for method in our_service.method} == {f"{h}Hook" for h in HOOK_NAMES}
    for method in our_service.method:
        their_method = their_methods[method.name]
        assert not their_method.client_streaming and not their_method.server_streaming
        pair(method.input_type, their_method.input_type)
        pair(method.output_type, their_method.output_type)

    def compare(our_message: descriptor_pb2.DescriptorProto, their_message: descriptor_pb2.DescriptorProto) -> None:
        their_fields = {field.number: field for field in their_message.field}
        assert set(their_fields) == {field.number for field in our_message.field}, our_message.name
        for field in our_message.field:
            their_field = their_fields[field.number]
            where = f"{our_message.name}.{field.name} = {field.number}"
            assert (their_field.type, their_field.label) == (field.type, field.label), where
            if field.type != descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE:
                continue
            our_nested = {f"{n.name}": n for n in our_message.nested_type}
            their_nested = {f"{n.name}": n for n in their_message.nested_type}
            our_entry = our_nested.get(field.type_name.rsplit(".", 1)[1])
            if our_entry is not None and our_entry.options.map_entry:
                their_entry = their_nested[their_field.type_name.rsplit(".", 1)[1]]
                assert their_entry.options.map_entry, where
                compare(our_entry, their_entry)
            else:
                pair(field.type_name, their_field.type_name)

    compared: set[str] = set()
    while set(pairs) - compared:
        for our_type in sorted(set(pairs) - compared):
            compared.add(our_type)
            compare(our_messages[our_type], their_messages[pairs[our_type]])

    assert set(pairs) == set(our_messages), "every message of ours has a counterpart"
    # Independence: no shared message names, and no shared field names outside map entries.
    assert not {name.rsplit(".", 1)[1] for name in pairs} & {name.rsplit(".", 1)[1] for name in pairs.values()}
    for our_type, their_type in pairs.items():
        our_names = {field.name for field in our_messages[our_type].field}
        their_names = {field.name for field in their_messages[their_type].field}
        assert not our_names & their_names, (our_type, our_names & their_names)


# --- our generated classes against the independent plugin, over a plain channel ------------------------


def test_every_hook_reaches_the_plugin_field_for_field(plugin: PluginProcess, stub: Any) -> None:
    for hook in HOOK_NAMES:
        request = pod_request() if "PodSandbox" in hook else container_request()
        getattr(stub, f"{hook}Hook")(request, timeout=10)
    records = plugin.records()
    assert [record["hook"] for record in records] == list(HOOK_NAMES)
    for record in records:
        request = pod_request() if "PodSandbox" in record["hook"] else container_request()
        assert record["numbered"] == numbered(request), record["hook"]
        assert record["unknown_fields"] is False, record["hook"]


def test_the_plugin_reads_our_fields_under_its_own_names(plugin: PluginProcess, stub: Any) -> None:
    stub.PreRunPodSandboxHook(pod_request(), timeout=10)
    stub.PreCreateContainerHook(container_request(), timeout=10)
    (pod,) = plugin.records_for("PreRunPodSandbox")
    (container,) = plugin.records_for("PreCreateContainer")
    seen = pod["request"]
    assert seen["sandbox_identity"] == {"pod_name": "wire-pod", "pod_uid": "8d1e6c4e-uid",
                                        "pod_namespace": "wire-ns", "pod_attempt": (1 << 32) - 1}
    assert seen["handler"] == "kata-wire"
    assert seen["pod_labels"] == {"app": "wire", "tier": "ünïcode ✓"}
    assert seen["parent_cgroup"] == "/kubepods/burstable/pod8d1e6c4e"
    assert seen["pod_resources"]["cfs_quota"] == str(-202)  # int64 as a JSON string
    assert seen["pod_resources"]["hugepages"][0] == {"size": "2MB", "bytes_limit": str((1 << 64) - 1 - 200)}
    assert seen["pod_overhead"]["shares"] == "103"
    seen = container["request"]
    assert seen["container_mata"] == {"container_name": "app", "restart_attempt": 3, "container_id": "c" * 64}
    assert seen["owner_pod"]["pod_uid"] == "8d1e6c4e-uid"
    assert seen["env"] == {"PATH": "/usr/bin:/bin", "EMPTY": "", "UNICODE": "✓"}
    assert seen["sandbox_parent_cgroup"] == "/kubepods/burstable/pod8d1e6c4e"
    assert seen["resources"]["oom_adj"] == str(-305) and seen["sandbox_resources"]["oom_adj"] == str(-405)
    assert seen["sandbox_labels"] == {"app": "wire", "k8s.io/x": "y"}
    assert seen["sandbox_annotations"] == {"p-note": "2"}
    assert seen["annotations"] == {"c-note": "1", "c-empty": ""}


def test_echoed_responses_decode_field_for_field(stub: Any) -> None:
    request = container_request()
    response = stub.PreUpdateContainerResourcesHook(request, timeout=10)
    assert not has_unknown_fields(response)
    assert response == hooks.ContainerResourceHookResponse(
        container_annotations=request.container_annotations, container_resources=request.container_resources,
        pod_cgroup_parent=request.pod_cgroup_parent, container_envs=request.container_envs,
    )
    assert_every_field_set(response)

    pod = pod_request()
    response = stub.PostStopPodSandboxHook(pod, timeout=10)
    assert not has_unknown_fields(response)
    assert response == hooks.PodSandboxHookResponse(labels=pod.labels, annotations=pod.annotations,
                                                    cgroup_parent=pod.cgroup_parent, resources=pod.resources)
    assert_every_field_set(response)


def test_edited_responses_decode_as_intended(stub: Any) -> None:
    pod = pod_request()
    response = stub.PreRunPodSandboxHook(pod, timeout=10)
    assert dict(response.annotations) == {**pod.annotations, ANNOTATION: "PreRunPodSandbox"}
    assert dict(response.labels) == dict(pod.labels)
    assert response.cgroup_parent == POD_CGROUP_PARENT
    assert response.resources == pod.resources

    request = container_request()
    response = stub.PreCreateContainerHook(request, timeout=10)
    expected_resources = hooks.LinuxContainerResources()
    expected_resources.CopyFrom(request.container_resources)
    expected_resources.cpu_shares = CPU_SHARES
    expected_resources.memory_limit_in_bytes = MEMORY_LIMIT
    assert response == hooks.ContainerResourceHookResponse(
        container_annotations={**request.container_annotations, ANNOTATION: "PreCreateContainer"},
        container_resources=expected_resources,
        container_envs={**request.container_envs, "WIRE_PLUGIN": "independent"},
    )
    for hook in ("PreStartContainer", "PostStartContainer", "PostStopContainer"):
        assert getattr(stub, f"{hook}Hook")(request, timeout=10) == hooks.ContainerResourceHookResponse()


# --- our Dispatcher and PluginRegistry against it --------------------------------------------------------


@pytest.fixture
def dispatcher(plugin: PluginProcess, loop_thread: LoopThread, tmp_path: Path) -> Iterator[Dispatcher]:
    config_dir = tmp_path / "hookserver.d"
    config_dir.mkdir()
    (config_dir / "10-independent.json").write_bytes(registration(plugin.socket, list(HOOK_NAMES), "Fail"))
    registry = PluginRegistry(config_dir)

    async def refresh() -> None:
        registry.refresh()

    loop_thread.run(refresh())
    assert [p.name for p in registry.plugins] == ["10-independent.json"]
    yield Dispatcher(registry)
    loop_thread.run(registry.close())


def test_dispatcher_merges_the_independent_plugins_answers(
    dispatcher: Dispatcher, plugin: PluginProcess, loop_thread: LoopThread
) -> None:
    pod = loop_thread.run(dispatcher.run(hookpoints.PRE_RUN_POD_SANDBOX, pod_request(), 10))
    expected_pod = pod_request()
    expected_pod.annotations[ANNOTATION] = "PreRunPodSandbox"
    expected_pod.cgroup_parent = POD_CGROUP_PARENT
    assert pod == expected_pod

    container = loop_thread.run(dispatcher.run(hookpoints.PRE_CREATE_CONTAINER, container_request(), 10))
    expected = container_request()
    expected.container_annotations[ANNOTATION] = "PreCreateContainer"
    expected.container_resources.cpu_shares = CPU_SHARES
    requested = expected.container_resources
    # The swap allowance the request had is kept as the plugin raises memory (hooks/merge.py, swap follows memory).
    expected.container_resources.memory_swap_limit_in_bytes += MEMORY_LIMIT - requested.memory_limit_in_bytes
    expected.container_resources.memory_limit_in_bytes = MEMORY_LIMIT
    expected.container_envs["WIRE_PLUGIN"] = "independent"
    assert container == expected

    for point in (hookpoints.PRE_START_CONTAINER, hookpoints.POST_START_CONTAINER, hookpoints.POST_STOP_CONTAINER,
                  hookpoints.PRE_UPDATE_CONTAINER_RESOURCES):
        assert loop_thread.run(dispatcher.run(point, container_request(), 10)) == container_request(), point.name
    assert loop_thread.run(dispatcher.run(hookpoints.POST_STOP_POD_SANDBOX, pod_request(), 10)) == pod_request()
    assert all(outcome == "ok" for (_, _, outcome) in dispatcher.outcomes)
    assert sum(dispatcher.outcomes.values()) == 7
    assert [record["hook"] for record in plugin.records()] == [
        "PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer", "PostStopContainer",
        "PreUpdateContainerResources", "PostStopPodSandbox"]


# --- through an in-process proxy to the synthetic backend ---------------------------------------------------


def test_through_the_proxy_the_backend_gets_the_independent_plugins_changes(
    plugin: PluginProcess, loop_thread: LoopThread, tmp_path: Path, start_proxy: Any, synthetic: SyntheticBackend
) -> None:
    async def answer(data: bytes) -> Any:
        async def behaviour(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return data
        return behaviour

    async def not_found(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "unknown")
        return b""

    run_path, create_path = "/runtime.v1.RuntimeService/RunPodSandbox", "/runtime.v1.RuntimeService/CreateContainer"
    synthetic.unary[run_path] = loop_thread.run(answer(cri.RunPodSandboxResponse(pod_sandbox_id="p1").SerializeToString()))
    synthetic.unary[create_path] = loop_thread.run(answer(cri.CreateContainerResponse(container_id="c1").SerializeToString()))
    synthetic.unary["/runtime.v1.RuntimeService/PodSandboxStatus"] = not_found
    proxy: Proxy = start_proxy(runtime_path=synthetic.path)
    config_dir = proxy.options.hook_config_dir
    config_dir.mkdir(exist_ok=True)
    (config_dir / "10-independent.json").write_bytes(
        registration(plugin.socket, ["PreRunPodSandbox", "PreCreateContainer"], "Fail"))

    async def refresh() -> None:
        assert proxy.hook_service is not None
        proxy.hook_service.registry.refresh()

    loop_thread.run(refresh())

    pod_config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="web", uid="u-1", namespace="ns", attempt=1),
        labels={"app": "web"}, annotations={"a": "1"},
        linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/pod-u-1"),
    )
    create = cri.CreateContainerRequest(
        pod_sandbox_id="p1", sandbox_config=pod_config,
        config=cri.ContainerConfig(metadata=cri.ContainerMetadata(name="app"), envs=[cri.KeyValue(key="KEEP", value=b"me")],
                                   linux=cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(cpu_period=100_000))),
    )
    channel = grpc.insecure_channel(f"unix://{proxy.options.listen_path}")
    try:
        channel.unary_unary(run_path)(cri.RunPodSandboxRequest(config=pod_config).SerializeToString(), timeout=10)
        channel.unary_unary(create_path)(create.SerializeToString(), timeout=10)
    finally:
        channel.close()

    (run_call,) = synthetic.calls_to(run_path)
    upstream_pod = cri.RunPodSandboxRequest.FromString(run_call.request).config
    assert upstream_pod.linux.cgroup_parent == POD_CGROUP_PARENT
    assert dict(upstream_pod.annotations) == {"a": "1", ANNOTATION: "PreRunPodSandbox"}
    (create_call,) = synthetic.calls_to(create_path)
    upstream = cri.CreateContainerRequest.FromString(create_call.request)
    assert upstream.config.linux.resources == cri.LinuxContainerResources(
        cpu_period=100_000, cpu_shares=CPU_SHARES, memory_limit_in_bytes=MEMORY_LIMIT)
    assert [(kv.key, kv.value) for kv in upstream.config.envs] == [("KEEP", b"me"), ("WIRE_PLUGIN", b"independent")]
    assert upstream.sandbox_config.linux.cgroup_parent == POD_CGROUP_PARENT
    (seen,) = plugin.records_for("PreCreateContainer")
    assert seen["request"]["sandbox_parent_cgroup"] == POD_CGROUP_PARENT  # the hooked pod from the store
    assert seen["request"]["owner_pod"] == {"pod_name": "web", "pod_uid": "u-1", "pod_namespace": "ns", "pod_attempt": 1}
