"""ValidateContainerAdjustment as containerd/nri v0.12.5 delivers it: the whole adjustment, its owners and the plugins
that took part reach every validator after CreateContainer's plugins; a rejection, an error or a timeout fails the
call whatever the validator's failure policy; the built-in default validator rejects per its config."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.protobuf.message import Message

from runtimeproxy.hooks import nri_events
from runtimeproxy.hooks.dispatcher import HookFailed
from runtimeproxy.nri.default_validator import DefaultValidator, DefaultValidatorConfig, load_config
from runtimeproxy.nri.session import event_mask
from runtimeproxy.nri.validation import Collected
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.nrihost import adjusting, attached, container_info, creation, host_on, plugin, run
from tests.kits.nri import NriPlugin

CREATE = event_mask(nri.CREATE_CONTAINER)
VALIDATE = event_mask(nri.VALIDATE_CONTAINER_ADJUSTMENT)
SHARES = nri.ContainerAdjustment(annotations={"a": "x"}, linux=nri.LinuxContainerAdjustment(
    resources=nri.LinuxResources(cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=512)))))


def validator(name: str, index: str, answer: nri.ValidateContainerAdjustmentResponse,
              seen: list[nri.ValidateContainerAdjustmentRequest]) -> NriPlugin:
    async def validate(kit: NriPlugin, request: Message) -> Message:
        seen.append(request)  # type: ignore[arg-type]
        return answer
    return plugin(name, index, VALIDATE,
                  ValidateContainerAdjustment=(nri.ValidateContainerAdjustmentRequest, validate))


def test_a_validator_sees_the_whole_adjustment_its_owners_and_every_plugin(socket_path: Path) -> None:
    seen: list[nri.ValidateContainerAdjustmentRequest] = []

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("adj", "10", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                              adjusting(SHARES))),
                           validator("check", "90", nri.ValidateContainerAdjustmentResponse(), seen))
            result = await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert result.request.container_resources.cpu_shares == 512
    run(scenario())
    [request] = seen
    assert (request.container.name, request.container.annotations["a"]) == ("app", "1")  # before the plugins
    assert dict(request.adjust.annotations) == {"a": "x"}
    assert request.adjust.linux.resources.cpu.shares.value == 512
    owners = request.owners.owners[request.container.id]
    assert owners.simple[nri.CPUShares] == "10-adj"
    assert dict(owners.compound[nri.Annotations].owners) == {"a": "10-adj"}
    assert [(p.index, p.name) for p in request.plugins] == [("10", "adj"), ("90", "check")]


def test_a_rejection_fails_create_container_with_containerd_s_words(socket_path: Path) -> None:
    seen: list[nri.ValidateContainerAdjustmentRequest] = []

    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("adj", "10", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                              adjusting(SHARES))),
                           validator("check", "90", nri.ValidateContainerAdjustmentResponse(
                               reject=True, reason="no shares"), seen))
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert failed.value.plugin.name == "90-check"
            assert 'validator "90-check" rejected container adjustment, reason: no shares' in str(failed.value)
            assert host.stats.of("90-check", nri_events.VALIDATE_CONTAINER_ADJUSTMENT).outcomes == {"rejected": 1}
    run(scenario())


@pytest.mark.parametrize("fail_request", [False, True])
@pytest.mark.parametrize("keep_connected", [False, True])
def test_a_validator_that_times_out_fails_the_call_under_every_failure_policy(
        socket_path: Path, fail_request: bool, keep_connected: bool) -> None:
    """containerd/nri: a validator's error always fails the request; keep_connected keeps it on a timeout."""
    release = asyncio.Event()

    async def stall(kit: NriPlugin, request: Message) -> Message:
        await release.wait()
        return nri.ValidateContainerAdjustmentResponse()

    slow = NriPlugin(name="slow", index="90", events=VALIDATE, failure_policy=nri.FailurePolicy(
        fail_request=fail_request, keep_connected=keep_connected),
        methods={"ValidateContainerAdjustment": (nri.ValidateContainerAdjustmentRequest, stall)})

    async def scenario() -> None:
        async with host_on(socket_path, request_timeout=0.2) as host:
            await attached(host, slow)
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert "validator plugin 90-slow failed" in str(failed.value)
            assert [p.plugin_id for p in host.plugins] == (["90-slow"] if keep_connected else [])
            release.set()
    run(scenario())


def test_no_validator_no_validation(socket_path: Path) -> None:
    async def scenario() -> None:
        async with host_on(socket_path) as host:
            await attached(host, plugin("adj", "10", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                              adjusting(SHARES))))
            assert (await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)) != container_info()
    run(scenario())


def test_the_default_validator_rejects_what_its_config_restricts(socket_path: Path) -> None:
    config = DefaultValidatorConfig(enable=True, reject_sysctl_adjustment=True, required_plugins=("adj",))

    async def scenario() -> None:
        async with host_on(socket_path, default_validator=DefaultValidator(config)) as host:
            with pytest.raises(HookFailed) as failed:
                await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)
            assert 'validator "00-default-validator" rejected container adjustment, reason: validation error: ' \
                   'required plugin "adj" not present' in str(failed.value)
            await attached(host, plugin("adj", "10", CREATE, CreateContainer=(nri.CreateContainerRequest,
                                                                              adjusting(SHARES))))
            assert (await host.adjust(nri_events.CREATE_CONTAINER, creation(), None)).request.container_resources \
                .cpu_shares == 512
    run(scenario())


def _owned(adjust: nri.ContainerAdjustment, plugin: str = "10-a") -> nri.ValidateContainerAdjustmentRequest:
    collected = Collected("c1")
    collected.add(plugin, adjust, [])
    return collected.request(nri.PodSandbox(), nri.Container(id="c1", name="app"))


@pytest.mark.parametrize(("config", "adjust", "reason"), [
    (DefaultValidatorConfig(enable=True, reject_oci_hook_adjustment=True),
     nri.ContainerAdjustment(hooks=nri.Hooks(prestart=[nri.Hook(path="/bin/true")])),
     'validation error: plugin "10-a" attempted restricted OCI hook injection'),
    (DefaultValidatorConfig(enable=True, reject_namespace_adjustment=True),
     nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(namespaces=[nri.LinuxNamespace(type="network")])),
     'validation error: attempted restricted namespace adjustment by plugin(s) "10-a" (namespace "network")'),
    (DefaultValidatorConfig(enable=True, reject_sysctl_adjustment=True),
     nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(sysctl={"net.core.somaxconn": "1"})),
     "validation error: attempted restricted sysctl adjustment by plugin(s) 10-a"),
    (DefaultValidatorConfig(enable=True, reject_unconfined_seccomp_adjustment=True),
     nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(seccomp_policy=nri.LinuxSeccomp())),
     "validation error: plugin 10-a attempted restricted  unconfined seccomp policy adjustment"),
    (DefaultValidatorConfig(enable=True, reject_sysctl_adjustment=True), SHARES, None),
])
def test_the_default_validator_s_checks(config: DefaultValidatorConfig, adjust: nri.ContainerAdjustment,
                                        reason: str | None) -> None:
    assert DefaultValidator(config).validate(_owned(adjust)) == reason


def test_owners_follow_result_go_hooks_accumulate_and_removals_are_marked() -> None:
    collected = Collected("c1")
    hook = nri.ContainerAdjustment(hooks=nri.Hooks(prestart=[nri.Hook(path="/x")]),
                                   env=[nri.KeyValue(key="A", value="1")])
    collected.add("10-a", hook, [])
    collected.add("20-b", nri.ContainerAdjustment(hooks=nri.Hooks(poststop=[nri.Hook(path="/y")]),
                                                  env=[nri.KeyValue(key="-A")], args=["", "sh"]), [])
    owners = collected.owners.owners["c1"]
    assert owners.simple[nri.OciHooks] == "10-a,20-b" and owners.simple[nri.Args] == "20-b"
    assert owners.compound[nri.Env].owners["A"] == "-20-b" and list(collected.adjust.env) == []
    assert list(collected.adjust.args) == ["sh"]


def test_the_config_is_read_as_containerd_reads_it(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('version = 3\n[plugins."io.containerd.nri.v1.nri".default_validator]\nenable = true\n'
                    'reject_oci_hook_adjustment = true\nrequired_plugins = ["a"]\n')
    assert load_config(toml) == DefaultValidatorConfig(enable=True, reject_oci_hook_adjustment=True,
                                                       required_plugins=("a",))
    toml.write_text("enable = true\nreject_everything = true\n")
    with pytest.raises(ValueError, match="reject_everything"):
        load_config(toml)
