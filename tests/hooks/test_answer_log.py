"""What each plugin's answer changed (debug) and the env-drop warning, through the real dispatcher."""

from __future__ import annotations

import logging

import pytest

from tests.kits.hooks import PluginBench, ScriptedPlugin, container_request
from runtimeproxy.hooks import dispatcher
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

LOGGER = "runtimeproxy.hooks.dispatcher"


def answering(response: hooks.ContainerResourceHookResponse) -> ScriptedPlugin:
    return ScriptedPlugin({"PreCreateContainer": lambda request, context: response})


def test_debug_log_names_each_changed_field(bench: PluginBench, caplog: pytest.LogCaptureFixture) -> None:
    request = container_request()
    answer = hooks.ContainerResourceHookResponse(container_envs={**request.container_envs, "MY_VAR": "x"})
    answer.container_resources.CopyFrom(request.container_resources)
    answer.container_resources.cpu_shares = 512
    bench.register("kit.json", bench.serve(answering(answer)), ["PreCreateContainer"])
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, request)
    [line] = [r for r in caplog.records if r.levelno == logging.DEBUG and "changed" in r.getMessage()]
    assert line.getMessage() == ('plugin kit.json PreCreateContainer changed container_resources.cpu_shares: '
                                 '1024 -> 512; container_envs["MY_VAR"]: (unset) -> "x"')
    assert (line.plugin, line.hook) == ("kit.json", "PreCreateContainer")  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_answer_that_changes_nothing_says_so(bench: PluginBench, caplog: pytest.LogCaptureFixture) -> None:
    bench.register("quiet.json", bench.serve(answering(hooks.ContainerResourceHookResponse())),
                   ["PreCreateContainer"])
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert "plugin quiet.json PreCreateContainer changed nothing" in caplog.text


def test_dropping_env_vars_is_warned_naming_them(bench: PluginBench, caplog: pytest.LogCaptureFixture) -> None:
    bench.register("naive.json", bench.serve(answering(
        hooks.ContainerResourceHookResponse(container_envs={"MY_VAR": "x"}))), ["PreCreateContainer"])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        merged = bench.run(dispatcher.PRE_CREATE_CONTAINER, container_request())
    assert dict(merged.container_envs) == {"MY_VAR": "x"}  # the koordlet protocol's rule stands
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "plugin naive.json PreCreateContainer answered container_envs without 2 of the request's 2 " \
           "variables (HOME, PATH)" in warning.getMessage()
    assert not [r for r in caplog.records if r.levelno == logging.DEBUG]  # debug off: no change log


def test_an_echoing_answer_is_not_warned(bench: PluginBench, caplog: pytest.LogCaptureFixture) -> None:
    request = container_request()
    bench.register("echo.json", bench.serve(answering(
        hooks.ContainerResourceHookResponse(container_envs={**request.container_envs, "MY_VAR": "x"}))),
        ["PreCreateContainer"])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        bench.run(dispatcher.PRE_CREATE_CONTAINER, request)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
