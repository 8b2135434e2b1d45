"""One kubelet call, one chain across plugin kinds (issue 36): a CreateContainer's hook plugin (koordinator's
protocol) and then its NRI plugin record into one chain record, finished once by the hook point: one trace
entry with both kinds' steps, a field both set one collision naming both owners (the later, NRI's, stands),
counted once; a failure of either kind ends the same entry. The real pieces: the hook service, a hook plugin
served over gRPC, the NRI host with a plugin attached over its socket; the runtime is the kits' stub."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import Message

from rplab.example_plugin import ScriptedPlugin
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.lifecycle import ContainerCreation, HookPoints
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.trace import OK, REFUSED, Collision, TraceEntry
from runtimeproxy.nri.session import event_mask
from runtimeproxy.options import ProxyOptions
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.hooks import register
from tests.kits.nri import NriPlugin
from tests.kits.nrihost import StubRuntime, adjusting, attached, container_info, host_on, plugin, pod_info, run

CREATE = event_mask(nri.CREATE_CONTAINER)
SHARES = "container_resources.cpu_shares"


def nri_shares(value: int) -> nri.ContainerAdjustment:
    return nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(
        cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=value)))))


def hook_shares(value: int) -> Callable[[hooks.ContainerResourceHookRequest, object],
                                        hooks.ContainerResourceHookResponse]:
    def answer(request: hooks.ContainerResourceHookRequest, _: object) -> hooks.ContainerResourceHookResponse:
        resources = hooks.LinuxContainerResources()
        resources.CopyFrom(request.container_resources)
        resources.cpu_shares = value
        return hooks.ContainerResourceHookResponse(container_resources=resources)
    return answer


def create_through_both_kinds(tmp_path: Path, socket_path: Path, *nri_plugins: NriPlugin, hook_served: bool = True,
                              hook_policy: str = "Ignore") -> tuple[HookService, ContainerCreation | HookFailed]:
    """One CreateContainer of pod default/web through hook plugin 10-koordlet.json (setting CPU shares to 2048;
    `hook_served=False`: its socket served by nobody) and then the NRI plugins given; returns the service (its
    trace and statistics) and the creation, or the failure."""
    options = ProxyOptions(listen_path=tmp_path / "rp.sock", runtime_path=tmp_path / "containerd.sock",
                           hook_config_dir=tmp_path / "hookserver.d", state_dir=tmp_path / "state")
    hook_plugin = ScriptedPlugin({"PreCreateContainer": hook_shares(2048)})
    hook_socket = tmp_path / "koordlet.sock"

    async def scenario() -> tuple[HookService, ContainerCreation | HookFailed]:
        service = HookService(options)
        if hook_served:
            await hook_plugin.start(hook_socket)
        register(options.hook_config_dir, "10-koordlet.json", hook_socket, ["PreCreateContainer"], hook_policy,
                 timeout=2)
        await service.registry.reload()
        try:
            async with host_on(socket_path, store=service.store, trace=service.trace, toggles=service.toggles,
                               stats=service.stats) as host:
                service.nri = host
                points = HookPoints(service, StubRuntime())
                await attached(host, *nri_plugins)
                await points.pod_sandbox_ran("pod-1", await points.pre_run_pod_sandbox(pod_info(), None))
                try:
                    return service, await points.pre_create_container("pod-1", container_info(), None)
                except HookFailed as failure:
                    return service, failure
        finally:
            await service.registry.close()
            if hook_served:
                await hook_plugin.stop()

    return run(scenario())  # type: ignore[return-value]


def the_entry(service: HookService) -> TraceEntry:
    pod = service.trace.find("default/web")
    assert pod is not None
    entry, = pod.entries  # one kubelet call, one entry
    return entry


def test_a_hook_plugin_and_an_nri_plugin_setting_one_field_are_one_chain_one_entry_one_collision(
        tmp_path: Path, socket_path: Path) -> None:
    service, creation = create_through_both_kinds(tmp_path, socket_path, plugin(
        "cpu", "10", CREATE, CreateContainer=(nri.CreateContainerRequest, adjusting(nri_shares(4096)))))
    assert isinstance(creation, ContainerCreation)
    assert creation.request.container_resources.cpu_shares == 4096  # the later plugin (NRI's) stands
    entry = the_entry(service)
    assert entry.hook == "PreCreateContainer" and entry.result == "sent to the runtime"
    assert [(step.plugin, step.outcome) for step in entry.steps] == [("10-koordlet.json", OK), ("nri:10-cpu", OK)]
    assert entry.collisions == (Collision(SHARES, "10-koordlet.json", 2048, "nri:10-cpu", 4096),)
    assert [(c.field, c.before, c.after) for c in entry.sent_changes] == [(SHARES, 512, 4096)]
    assert service.dispatcher.stats.collisions == {
        ("PreCreateContainer", "10-koordlet.json", "nri:10-cpu", SHARES): 1}
    # One table of calls for both kinds, keyed by kind, plugin and scope (what status and metrics read).
    assert [(key, calls.outcomes) for key, calls in service.stats.items()] == [
        (("NRI", "10-cpu", "CreateContainer"), {OK: 1}), (("hook", "10-koordlet.json", "PreCreateContainer"), {OK: 1})]


def test_two_nri_plugins_on_one_field_still_fail_the_call_by_nri_s_rule_and_the_one_entry_says_so(
        tmp_path: Path, socket_path: Path) -> None:
    service, failure = create_through_both_kinds(tmp_path, socket_path, *(plugin(
        name, index, CREATE, CreateContainer=(nri.CreateContainerRequest, adjusting(nri_shares(value))))
        for name, index, value in (("a", "10", 100), ("b", "20", 200))))
    assert isinstance(failure, HookFailed) and "both tried to set" in failure.details
    entry = the_entry(service)
    assert [(step.plugin, step.outcome) for step in entry.steps] == [
        ("10-koordlet.json", OK), ("nri:10-a", OK), ("nri:20-b", REFUSED)]
    # Worded by the failing plugin's kind: no failure policy is NRI's.
    assert entry.result == "not sent: 20-b failed (UNKNOWN); the call fails" and entry.sent_changes == ()
    assert not service.dispatcher.stats.collisions  # the conflict is NRI's own rule, not a later-wins collision


def test_a_hook_plugin_failing_the_call_ends_the_one_entry_before_any_nri_plugin_is_asked(
        tmp_path: Path, socket_path: Path) -> None:
    asked: list[str] = []

    async def answer(plugin: NriPlugin, request: Message) -> nri.CreateContainerResponse:
        asked.append("asked")
        return nri.CreateContainerResponse()

    service, failure = create_through_both_kinds(
        tmp_path, socket_path, plugin("cpu", "10", CREATE, CreateContainer=(nri.CreateContainerRequest, answer)),
        hook_served=False, hook_policy="Fail")
    assert isinstance(failure, HookFailed) and failure.plugin.name == "10-koordlet.json" and asked == []
    entry = the_entry(service)
    assert [step.plugin for step in entry.steps] == ["10-koordlet.json"]
    assert entry.result.startswith("not sent: 10-koordlet.json failed under failure-policy Fail")
