"""One kubelet call, one chain across plugin kinds (issue 36): a CreateContainer's hook plugin (koordinator's
protocol) and then its NRI plugin record into one chain record, finished once by the hook point: one trace
entry with both kinds' steps, a field both set one collision naming both owners (the later, NRI's, stands),
counted once; a failure of either kind ends the same entry. The real pieces: the hook service, a hook plugin
served over gRPC, the NRI host with a plugin attached over its socket; the runtime is the kits' stub."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf.message import Message

from rplab.example_plugin import ScriptedPlugin
from runtimeproxy.hooks import chain
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.lifecycle import ContainerCreation, HookPoints
from runtimeproxy.hooks.service import HookService
from runtimeproxy.hooks.trace import OK, REFUSED, Collision, TraceEntry
from runtimeproxy.hooks.validate import Problem, result_problem
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


HookAnswer = Callable[[hooks.ContainerResourceHookRequest, object], hooks.ContainerResourceHookResponse]


def create_through_both_kinds(tmp_path: Path, socket_path: Path, *nri_plugins: NriPlugin, hook_served: bool = True,
                              hook_policy: str = "Ignore", hook_answer: HookAnswer | None = None,
                              ) -> tuple[HookService, ContainerCreation | HookFailed]:
    """One CreateContainer of pod default/web through hook plugin 10-koordlet.json (setting CPU shares to 2048, or
    answering `hook_answer`; `hook_served=False`: its socket served by nobody) and then the NRI plugins given;
    returns the service (its trace and statistics) and the creation, or the failure."""
    options = ProxyOptions(listen_path=tmp_path / "rp.sock", runtime_path=tmp_path / "containerd.sock",
                           hook_config_dir=tmp_path / "hookserver.d", state_dir=tmp_path / "state")
    hook_plugin = ScriptedPlugin({"PreCreateContainer": hook_answer or hook_shares(2048)})
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
                await points.pod_sandbox_ran("pod-1", await points.pre_run_pod_sandbox(pod_record(pod_info()), None))
                try:
                    return service, await points.pre_create_container(
                        "pod-1", container_record("pod-1", container_info()), None)
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


# --- validation once over the whole result (issue 36): both kinds' answers, their owners, one validation -------

MiB = 1 << 20
MEMORY, SWAP = "container_resources.memory_limit_in_bytes", "container_resources.memory_swap_limit_in_bytes"


def nri_memory(limit: int = 0, swap: int = 0) -> nri.ContainerAdjustment:
    memory = nri.LinuxMemory()
    if limit:
        memory.limit.value = limit
    if swap:
        memory.swap.value = swap
    return nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=nri.LinuxResources(memory=memory)))


def hook_memory(limit: int, swap: int = 0) -> HookAnswer:
    def answer(request: hooks.ContainerResourceHookRequest, _: object) -> hooks.ContainerResourceHookResponse:
        resources = hooks.LinuxContainerResources()
        resources.CopyFrom(request.container_resources)
        resources.memory_limit_in_bytes = limit
        resources.memory_swap_limit_in_bytes = swap or resources.memory_swap_limit_in_bytes
        return hooks.ContainerResourceHookResponse(container_resources=resources)
    return answer


def count_validations(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """The results hooks.chain validates, one per validation."""
    validated: list[Message] = []

    def counted(original: Message, result: Message) -> Problem | None:
        validated.append(result)
        return result_problem(original, result)
    monkeypatch.setattr(chain, "result_problem", counted)
    return validated


def test_a_hook_plugin_s_memory_and_an_nri_plugin_s_swap_below_it_fail_once_blaming_the_later_owner(
        tmp_path: Path, socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    validated = count_validations(monkeypatch)
    service, failure = create_through_both_kinds(
        tmp_path, socket_path, plugin("swap", "10", CREATE, CreateContainer=(
            nri.CreateContainerRequest, adjusting(nri_memory(swap=128 * MiB)))),
        hook_answer=hook_memory(256 * MiB))
    # The swap limit is fine beside the request's 64 MiB, the memory limit alone too: together they are not. The
    # later owner (the NRI plugin, of swap) is blamed, and NRI's rule fails the call, naming it and its field.
    assert isinstance(failure, HookFailed) and failure.plugin.name == "10-swap" and failure.field == SWAP
    assert "invalid answer" in failure.details and len(validated) == 1
    entry = the_entry(service)
    assert [(step.plugin, step.outcome, step.code) for step in entry.steps] == [
        ("10-koordlet.json", OK, ""), ("nri:10-swap", REFUSED, "invalid")]
    assert entry.steps[1].details.startswith(f"invalid answer: {SWAP}: the swap limit")
    assert entry.result == "not sent: 10-swap failed (INTERNAL); the call fails"
    assert [(key, calls.outcomes) for key, calls in service.stats.items()] == [
        (("NRI", "10-swap", "CreateContainer"), {"invalid": 1}),
        (("hook", "10-koordlet.json", "PreCreateContainer"), {OK: 1})]


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_an_invalid_result_blamed_on_a_hook_plugin_drops_its_answer_alone_or_fails_by_its_policy(
        tmp_path: Path, socket_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    validated = count_validations(monkeypatch)
    service, outcome = create_through_both_kinds(
        tmp_path, socket_path, plugin("cpu", "10", CREATE, CreateContainer=(
            nri.CreateContainerRequest, adjusting(nri_shares(4096)))),
        hook_policy=policy, hook_answer=hook_memory(256 * MiB, swap=128 * MiB))
    entry = the_entry(service)
    assert [(step.plugin, step.outcome) for step in entry.steps] == [("10-koordlet.json", REFUSED), ("nri:10-cpu", OK)]
    assert entry.steps[0].code == "INTERNAL" and f"invalid answer: {SWAP}" in entry.steps[0].details
    if policy == "Fail":
        assert isinstance(outcome, HookFailed) and outcome.plugin.name == "10-koordlet.json"
        assert outcome.field == SWAP and len(validated) == 1
        assert entry.result.startswith("not sent: 10-koordlet.json failed under failure-policy Fail")
        return
    # Dropped whole, the result folded again from the NRI plugin's answer and validated again: valid.
    assert isinstance(outcome, ContainerCreation) and outcome.missed == ("10-koordlet.json",)
    resources = outcome.request.container_resources
    assert (resources.cpu_shares, resources.memory_limit_in_bytes, resources.memory_swap_limit_in_bytes) == (
        4096, 64 * MiB, 0)
    assert len(validated) == 2
    assert entry.result.startswith("sent to the runtime without the answer of 10-koordlet.json")
    assert [(c.field, c.before, c.after) for c in entry.sent_changes] == [(SHARES, 512, 4096)]
    assert entry.collisions == ()
    assert service.stats.of_kind("hook").of("10-koordlet.json", "PreCreateContainer").outcomes == {"INTERNAL": 1}


def test_two_nri_answers_valid_alone_and_invalid_together_fail_naming_the_later(
        tmp_path: Path, socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    validated = count_validations(monkeypatch)
    service, failure = create_through_both_kinds(tmp_path, socket_path, *(plugin(
        name, index, CREATE, CreateContainer=(nri.CreateContainerRequest, adjusting(adjust)))
        for name, index, adjust in (("a", "10", nri_memory(swap=200 * MiB)), ("b", "20", nri_memory(256 * MiB)))))
    # b raises the memory limit over the swap limit a set (an NRI answer takes no swap along, as containerd's):
    # before, b's answer was judged through the hook merge, as if swap followed, and passed.
    assert isinstance(failure, HookFailed) and failure.plugin.name == "20-b" and failure.field == MEMORY
    assert len(validated) == 1
    assert [(step.plugin, step.outcome) for step in the_entry(service).steps] == [
        ("10-koordlet.json", OK), ("nri:10-a", OK), ("nri:20-b", REFUSED)]


def test_one_plugin_s_call_is_validated_once_and_a_call_nothing_changed_not_at_all(
        tmp_path: Path, socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    validated = count_validations(monkeypatch)
    _, creation = create_through_both_kinds(tmp_path, socket_path)
    assert isinstance(creation, ContainerCreation) and creation.changed and len(validated) == 1

    def echo(request: hooks.ContainerResourceHookRequest, _: object) -> hooks.ContainerResourceHookResponse:
        return hooks.ContainerResourceHookResponse(container_resources=request.container_resources,
                                                   container_envs=request.container_envs)
    validated.clear()
    _, creation = create_through_both_kinds(tmp_path / "echo", socket_path, hook_answer=echo)
    assert isinstance(creation, ContainerCreation) and not creation.changed and validated == []
