"""Parsing one registration file (runtimeproxy.hooks.config)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.kits.config import KNOWN_HOOKS, KOORDLET, config_bytes, messages
from runtimeproxy.hooks.config import FailurePolicy, PluginConfig, PluginConfigError, parse_plugin_config
from runtimeproxy.hooks.names import HOOK_NAMES


def test_parses_the_koordinator_example() -> None:
    config = parse_plugin_config("koordlet.json", KOORDLET)
    assert config == PluginConfig(
        name="koordlet.json",
        endpoint=Path("/var/run/koordlet/koordlet.sock"),
        failure_policy=FailurePolicy.IGNORE,
        hooks=frozenset({"PreRunPodSandbox"}),
        timeout_seconds=5.0,
    )
    assert config.describe() == (
        "endpoint unix:///var/run/koordlet/koordlet.sock, policy Ignore, hooks PreRunPodSandbox, "
        "timeout 5s"
    )


@pytest.mark.parametrize("policy", [..., None, ""])
def test_failure_policy_defaults_to_ignore(policy: object) -> None:
    config = parse_plugin_config("p.json", config_bytes(failure_policy=policy))
    assert config.failure_policy is FailurePolicy.IGNORE


@pytest.mark.parametrize(
    ("text", "policy"),
    [("Fail", FailurePolicy.FAIL), ("fail", FailurePolicy.FAIL), ("FAIL", FailurePolicy.FAIL),
     ("Ignore", FailurePolicy.IGNORE), ("iGnOrE", FailurePolicy.IGNORE)],
)
def test_failure_policy_is_case_insensitive_and_normalized(text: str, policy: FailurePolicy) -> None:
    config = parse_plugin_config("p.json", config_bytes(failure_policy=text))
    assert config.failure_policy is policy
    assert policy.value in config.describe()


def test_hooks_are_normalized_deduplicated_and_described_in_lifecycle_order() -> None:
    hooks = ["PostStopPodSandbox", "precreatecontainer", "PreRunPodSandbox", "PreCreateContainer"]
    config = parse_plugin_config("p.json", config_bytes(runtime_hooks=hooks))
    assert config.hooks == {"PostStopPodSandbox", "PreCreateContainer", "PreRunPodSandbox"}
    assert config.ordered_hooks == ("PreRunPodSandbox", "PreCreateContainer", "PostStopPodSandbox")
    assert "hooks PreRunPodSandbox,PreCreateContainer,PostStopPodSandbox," in config.describe()


def test_all_seven_hooks_are_known() -> None:
    config = parse_plugin_config("p.json", config_bytes(runtime_hooks=list(HOOK_NAMES)))
    assert config.ordered_hooks == HOOK_NAMES and len(HOOK_NAMES) == 7


@pytest.mark.parametrize(
    ("value", "seconds"), [(..., 5.0), (None, 5.0), (1, 1.0), (0.25, 0.25), (30, 30.0)]
)
def test_timeout_defaults_to_five_seconds(value: object, seconds: float) -> None:
    config = parse_plugin_config("p.json", config_bytes(timeout_seconds=value))
    assert config.timeout_seconds == seconds
    assert f"timeout {seconds:g}s" in config.describe()


@pytest.mark.parametrize("endpoint", ["unix:///run/k.sock", "unix:/run/k.sock", "/run/k.sock"])
def test_endpoint_accepts_a_path_or_unix_uri(endpoint: str) -> None:
    config = parse_plugin_config("p.json", config_bytes(remote_endpoint=endpoint))
    assert config.endpoint == Path("/run/k.sock")


def test_a_utf8_bom_is_tolerated() -> None:
    assert parse_plugin_config("koordlet.json", b"\xef\xbb\xbf" + KOORDLET).name == "koordlet.json"


cfg = config_bytes
POSITIVE = "must be a positive number of seconds"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty file"),
        (b" \n\t", "empty file"),
        (KOORDLET[:40], "invalid JSON: unexpected end of data at line 1 column 41 (truncated?)"),
        (b"{,}", "invalid JSON: "),
        (b'{"remote-endpoint": "/run/\xff.sock"}', "not valid UTF-8 (byte 26)"),
        (b"\xff\xfe{}", "not valid UTF-8 (byte 0)"),
        (b"[]", "expected a JSON object, got an array"),
        (b'"koordlet"', "expected a JSON object, got a string"),
        (b"null", "expected a JSON object, got null"),
        (cfg(remote_endpoint=...), "remote-endpoint: missing"),
        (cfg(remote_endpoint=7), "remote-endpoint: expected a string, got a number"),
        (cfg(remote_endpoint="tcp://1.2.3.4:5"), "remote-endpoint: 'tcp://1.2.3.4:5': only unix sockets"),
        (cfg(remote_endpoint="run/k.sock"), "remote-endpoint: 'run/k.sock': the socket path must be"),
        (cfg(remote_endpoint=""), "remote-endpoint: '': empty socket path"),
        (cfg(failure_policy="Retry"), 'failure-policy: unknown policy "Retry" (known: Fail or Ignore)'),
        (cfg(failure_policy=True), "failure-policy: expected a string, got a boolean"),
        (cfg(runtime_hooks=...), f"runtime-hooks: missing (a list of: {KNOWN_HOOKS})"),
        (cfg(runtime_hooks=None), "runtime-hooks: expected a list of hook names, got null"),
        (cfg(runtime_hooks="PreRunPodSandbox"), "runtime-hooks: expected a list of hook names, got a string"),
        (cfg(runtime_hooks=[]), f"runtime-hooks: empty list; name at least one of: {KNOWN_HOOKS}"),
        (cfg(runtime_hooks=["PreRunPodSandbox", 3]), "runtime-hooks: expected hook names, got a number"),
        (cfg(runtime_hooks=["PreRunPodSandbox", "PreFoo"]),
         f'runtime-hooks: unknown hook "PreFoo" (known: {KNOWN_HOOKS})'),
        (cfg(timeout_seconds=0), f"timeout-seconds: {POSITIVE}, got 0"),
        (cfg(timeout_seconds=-1.5), f"timeout-seconds: {POSITIVE}, got -1.5"),
        (cfg(timeout_seconds="5"), "timeout-seconds: expected a number, got a string"),
        (cfg(timeout_seconds=True), "timeout-seconds: expected a number, got a boolean"),
        # orjson refuses infinities itself.
        (cfg(timeout_seconds=1).replace(b":1}", b":1e999}"), "invalid JSON: "),
    ],
)
def test_malformed_configs_name_the_file_and_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(PluginConfigError) as raised:
        parse_plugin_config("koordlet.json", data)
    assert raised.value.name == "koordlet.json"
    assert str(raised.value).startswith(f"koordlet.json: {problem}"), str(raised.value)


def test_unknown_keys_are_accepted_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    data = config_bytes(zeta=1, alpha={"x": 1})
    config = parse_plugin_config("koordlet.json", data)
    assert config.endpoint == Path("/run/plugin.sock")
    assert config.warnings == ('unknown key "alpha"; ignored', 'unknown key "zeta"; ignored')
    assert messages(caplog) == [
        'plugin config koordlet.json: unknown key "alpha"; ignored; unknown key "zeta"; ignored']


def test_a_misspelt_key_names_the_key_it_probably_meant() -> None:
    """Issue 18: `"failurePolicy": "Fail"` registered the plugin under Ignore with only a log line."""
    document = {"remote-endpoint": "/run/plugin.sock", "runtime-hooks": ["PreRunPodSandbox"],
                "runtimeHooks": ["PreRunPodSandbox"], "failurePolicy": "Fail", "timeout_seconds": 2, "timeout": 2,
                "comment": "x"}
    config = parse_plugin_config("koordlet.json", orjson.dumps(document))
    assert config.failure_policy is FailurePolicy.IGNORE  # the default, as before: but now it is shown
    assert config.warnings == (
        'unknown key "comment"; ignored',
        'unknown key "failurePolicy" (did you mean "failure-policy"?); ignored',
        'unknown key "runtimeHooks" (did you mean "runtime-hooks"?); ignored',
        'unknown key "timeout" (did you mean "timeout-seconds"?); ignored',
        'unknown key "timeout_seconds" (did you mean "timeout-seconds"?); ignored',
    )


def test_a_broken_file_with_unknown_keys_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(PluginConfigError):
        parse_plugin_config("koordlet.json", config_bytes(zeta=1, runtime_hooks=[]))
    assert messages(caplog) == []


def test_the_shadow_key_puts_a_plugin_on_trial() -> None:
    document = b'{"remote-endpoint": "/run/p.sock", "runtime-hooks": ["PreCreateContainer"], "shadow": true}'
    config = parse_plugin_config("next.json", document)
    assert config.shadow and not config.warnings and config.describe().endswith("shadow in its file")
    assert not parse_plugin_config("p.json", document.replace(b"true", b"false")).shadow
    with pytest.raises(PluginConfigError, match="shadow: expected true or false, got a string"):
        parse_plugin_config("p.json", document.replace(b"true", b'"yes"'))
