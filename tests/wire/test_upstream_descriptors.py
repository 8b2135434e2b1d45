"""The proxy's CRI runtime.v1 and NRI protos are upstream's, as the pinned k8s.io/cri-api and containerd/nri
(peers/go.mod) register them.

The peer criapidesc prints the descriptor the Go package registers (`criapidesc nri`: NRI's pkg/api); this compares
it, message by message, with the descriptor of runtimeproxy/pb/cri/runtime/v1 (runtimeproxy/pb/nri/...). Any added,
removed, renamed, renumbered or retyped field, enum value or method fails here, so bumping cri-api or nri in
peers/go.mod shows what protos/cri/runtime/v1/api.proto or protos/nri/pkg/api/v1alpha1/api.proto must follow.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from tests.kits.machine import skip_or_fail
from rplab.peers import PeerBuildError, peer_binary
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

Described = dict[str, Any]
# Each API: our generated module, the peer's argument, the package.
APIS = {"cri": (cri, [], "runtime.v1"), "nri": (nri, ["nri"], "nri.pkg.api.v1alpha1")}

_TYPES = descriptor_pb2.FieldDescriptorProto.Type
_LABELS = descriptor_pb2.FieldDescriptorProto.Label


def _field(field: descriptor_pb2.FieldDescriptorProto, oneofs: list[str]) -> Described:
    """One field in the peer's shape: protoreflect's kind and cardinality names are descriptor.proto's, lowercased."""
    out: Described = {
        "name": field.name,
        "number": field.number,
        "type": _TYPES.Name(field.type).removeprefix("TYPE_").lower(),
        "label": _LABELS.Name(field.label).removeprefix("LABEL_").lower(),
    }
    if field.type_name:
        out["type_name"] = field.type_name.removeprefix(".")
    if field.HasField("oneof_index"):
        out["oneof"] = oneofs[field.oneof_index]
    if field.proto3_optional:
        out["proto3_optional"] = True
    return out


def _collect(scope: str, messages: Iterable[descriptor_pb2.DescriptorProto],
             enums: Iterable[descriptor_pb2.EnumDescriptorProto], into: Described) -> None:
    into["enums"] += [{"name": f"{scope}.{enum.name}", "values": [{"name": v.name, "number": v.number}
                                                                  for v in enum.value]} for enum in enums]
    for message in messages:
        name = f"{scope}.{message.name}"
        oneofs = [oneof.name for oneof in message.oneof_decl]
        described: Described = {"name": name, "fields": [_field(field, oneofs) for field in message.field]}
        if message.options.map_entry:
            described["map_entry"] = True
        into["messages"].append(described)
        _collect(name, message.nested_type, message.enum_type, into)


def _method(method: descriptor_pb2.MethodDescriptorProto) -> Described:
    return {"name": method.name, "input": method.input_type.removeprefix("."),
            "output": method.output_type.removeprefix("."),
            "client_streaming": method.client_streaming, "server_streaming": method.server_streaming}


def ours(api: str) -> Described:
    """The proxy's descriptor of the API in the shape criapidesc prints."""
    file = descriptor_pb2.FileDescriptorProto()
    APIS[api][0].DESCRIPTOR.CopyToProto(file)
    out: Described = {"package": file.package, "messages": [], "enums": [], "services": []}
    _collect(file.package, file.message_type, file.enum_type, out)
    out["services"] = [{"name": f"{file.package}.{service.name}", "methods": [_method(m) for m in service.method]}
                       for service in file.service]
    return out


@pytest.fixture(scope="module", params=sorted(APIS))
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def upstream(api: str) -> Described:
    try:
        binary = peer_binary("criapidesc")
    except PeerBuildError as error:
        skip_or_fail(str(error))
    printed = subprocess.run([str(binary), *APIS[api][1]], check=True, capture_output=True, text=True, timeout=60)
    described: Described = json.loads(printed.stdout)
    described.pop("path")  # upstream's path inside its tree; ours is protos/-relative
    return described


def _by_name(entries: list[Described]) -> dict[str, Described]:
    return {entry["name"]: entry for entry in entries}


def _differences(mine: dict[Any, Any], theirs: dict[Any, Any]) -> Described:
    """What differs between two tables keyed alike, each entry only when it differs (a readable failure)."""
    found: Described = {
        "missing": sorted(str(key) for key in theirs.keys() - mine.keys()),
        "extra": sorted(str(key) for key in mine.keys() - theirs.keys()),
        "changed": {str(key): {"ours": mine[key], "upstream": theirs[key]}
                    for key in sorted(mine.keys() & theirs.keys(), key=str) if mine[key] != theirs[key]},
    }
    return {kind: entries for kind, entries in found.items() if entries}


def test_the_package_is_upstreams(api: str, upstream: Described) -> None:
    assert ours(api)["package"] == upstream["package"] == APIS[api][2]


@pytest.mark.parametrize("kind", ["messages", "enums", "services"])
def test_every_upstream_definition_is_ours_and_no_other(api: str, upstream: Described, kind: str) -> None:
    differing = _differences(_by_name(ours(api)[kind]), _by_name(upstream[kind]))
    assert not differing.get("missing") and not differing.get("extra"), json.dumps(differing, indent=1)


def _differing(api: str, kind: str, upstream: Described,
               members: Callable[[Described], dict[Any, Any]]) -> Described:
    mine = _by_name(ours(api)[kind])
    return {name: differences for name, entry in _by_name(upstream[kind]).items()
            if name in mine and (differences := _differences(members(mine[name]), members(entry)))}


def test_every_message_has_upstreams_fields(api: str, upstream: Described) -> None:
    # By number: the order of declaration is not on the wire. A map entry message stays one.
    def fields(message: Described) -> dict[Any, Any]:
        return {"map_entry": bool(message.get("map_entry")), **{field["number"]: field for field in message["fields"]}}

    differing = _differing(api, "messages", upstream, fields)
    assert not differing, json.dumps(differing, indent=1)


def test_every_enum_has_upstreams_values(api: str, upstream: Described) -> None:
    # By name: an enum may alias (allow_alias) one number under two names.
    differing = _differing(api, "enums", upstream, lambda enum: {v["name"]: v["number"] for v in enum["values"]})
    assert not differing, json.dumps(differing, indent=1)


def test_every_service_has_upstreams_methods(api: str, upstream: Described) -> None:
    differing = _differing(api, "services", upstream, lambda service: _by_name(service["methods"]))
    assert not differing, json.dumps(differing, indent=1)
