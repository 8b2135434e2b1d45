"""Outcomes as plain data, and how two sides' outcomes are made comparable."""

from __future__ import annotations

import grpc

from rplab.differential import MASKED, answer, differing_paths, failure, masked, normalized, outcome_of
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as v1


class _Error(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.NOT_FOUND

    def details(self) -> str:
        return "no such pod abc"


def _raise() -> None:
    raise _Error()


def test_answers_keep_proto_names_and_parse_info_documents() -> None:
    response = v1.PodSandboxStatusResponse(status=v1.PodSandboxStatus(id="abc", created_at=5),
                                           info={"info": '{"pid": 42}', "raw": "not json"})
    assert answer(response) == {"status": {"id": "abc", "created_at": "5"}, "info": {"info": {"pid": 42}, "raw": "not json"}}


def test_outcomes_of_answers_streams_and_errors() -> None:
    assert outcome_of(lambda: v1.VersionResponse(version="1")) == {"ok": {"version": "1"}}
    assert outcome_of(lambda: iter([v1.VersionResponse(version="1")])) == {"stream": [{"version": "1"}]}
    assert outcome_of(_raise) == failure(_Error()) == {"error": {"code": "NOT_FOUND", "details": "no such pod abc"}}


def test_tokens_masks_and_order_are_normalized_but_presence_is_compared() -> None:
    outcome = {"ok": {"items": [{"id": "pod-b", "at": 2}, {"id": "pod-a", "at": 1, "path": "/logs/pod-a/0.log"}]}}
    tokens = {"pod-a": "<a>", "pod-b": "<b>", "/logs/pod-a": "<dir>"}
    assert normalized(outcome, tokens, ["items.*.at"], ["items"]) == {"ok": {"items": [
        {"id": "<a>", "at": MASKED, "path": "<dir>/0.log"}, {"id": "<b>", "at": MASKED}]}}
    # a masked field present on one side only still differs
    assert normalized({"ok": {"at": 1}}, {}, ["at"]) != normalized({"ok": {}}, {}, ["at"])


def test_errors_are_never_masked_only_tokens_replaced() -> None:
    error = {"error": {"code": "NOT_FOUND", "details": "pod pod-a not found"}}
    assert normalized(error, {"pod-a": "<a>"}, ["error", "details"]) == {
        "error": {"code": "NOT_FOUND", "details": "pod <a> not found"}}


def test_differing_paths_name_each_leaf() -> None:
    assert differing_paths({"a": {"b": [1, 2]}, "c": 1}, {"a": {"b": [1, 3]}, "d": 1}) == [
        "a.b.1: 2 != 3", "c: 1 != '<absent>'", "d: '<absent>' != 1"]
    assert differing_paths({"x": 1}, {"x": 1}) == []


def test_an_optional_mask_hides_a_counter_present_on_one_side_only() -> None:
    counted = {"writable_layer": {"fs_id": "x", "timestamp": "5", "used_bytes": "4096"}}
    not_yet = {"writable_layer": {"fs_id": "x"}}
    paths = ("writable_layer.timestamp?", "writable_layer.used_bytes?")
    assert masked(counted, paths) == masked(not_yet, paths)
    assert masked({"writable_layer": {"fs_id": "y"}}, paths) != masked(not_yet, paths)  # the rest still counts
    assert masked(not_yet, ("writable_layer.timestamp",)) == not_yet  # a plain mask never adds a field
