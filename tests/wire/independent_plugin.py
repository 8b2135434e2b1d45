"""A standalone hook plugin built only from tests/wire/independent_hooks.proto.

It never imports runtimeproxy: its messages define the same full names (runtime.v1alpha1.*)
as runtimeproxy's generated module, and one process cannot hold both. Run it as its own process:

    python -m grpc_tools.protoc -I tests/wire --python_out=GEN --grpc_python_out=GEN independent_hooks.proto
    python tests/wire/independent_plugin.py --generated GEN --socket /tmp/p.sock --record /tmp/p.jsonl

Every request is appended to the record file as one JSON line:
  {"hook": ..., "request": MessageToDict(preserving_proto_field_name=True),
   "numbered": the set fields keyed by field number (names differ between the two protos),
   "unknown_fields": whether anything in the request did not decode into a known field}
Answers (koordlet-like: echo the request back with edits):
  PreRunPodSandbox:            + annotation, cgroup parent set (if --pod-cgroup-parent), rest echoed
  PreCreateContainer:          + annotation, cpu shares and memory limit set, env added, rest echoed
  PreUpdateContainerResources: everything echoed (annotations, resources, cgroup parent, env)
  PostStopPodSandbox:          everything echoed
  other hooks:                 empty response
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

ANNOTATION = "wire.independent.example/hooked"


def numbered(message: Any) -> dict[str, Any]:
    """The fields that are set, keyed by field number; maps as dicts, messages recursively."""
    result: dict[str, Any] = {}
    for field, value in message.ListFields():
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value_is_message = entry.fields_by_name["value"].message_type is not None
            result[str(field.number)] = {
                str(key): numbered(item) if value_is_message else item for key, item in value.items()
            }
        elif field.is_repeated:
            result[str(field.number)] = [numbered(item) if entry is not None else item for item in value]
        elif entry is not None:
            result[str(field.number)] = numbered(value)
        elif isinstance(value, bytes):
            result[str(field.number)] = value.hex()
        else:
            result[str(field.number)] = value
    return result


def has_unknown_fields(message: Any) -> bool:
    stripped = type(message)()
    stripped.CopyFrom(message)
    stripped.DiscardUnknownFields()
    return stripped.ByteSize() != message.ByteSize()


class IndependentPlugin:
    def __init__(self, pb: Any, args: argparse.Namespace) -> None:
        self.pb = pb
        self.args = args
        self.envs = dict(item.split("=", 1) for item in args.env)

    def record(self, hook: str, request: Any) -> None:
        from google.protobuf import json_format

        line = {
            "hook": hook,
            "request": json_format.MessageToDict(request, preserving_proto_field_name=True),
            "numbered": numbered(request),
            "unknown_fields": has_unknown_fields(request),
        }
        with open(self.args.record, "a", encoding="utf-8") as record:
            record.write(json.dumps(line, sort_keys=True) + "\n")

    # -- pod hooks ----------------------------------------------------------------------------

    def pod_echo(self, request: Any) -> Any:
        response = self.pb.RunPodSandboxHookResponse(
            new_labels=request.pod_labels, new_annotations=request.pod_annotations,
            new_parent_cgroup=request.parent_cgroup,
        )
        if request.HasField("pod_resources"):
            response.new_resources.CopyFrom(request.pod_resources)
        return response

    async def PreRunPodSandboxHook(self, request: Any, context: Any) -> Any:
        self.record("PreRunPodSandbox", request)
        response = self.pod_echo(request)
        response.new_annotations[ANNOTATION] = "PreRunPodSandbox"
        if self.args.pod_cgroup_parent:
            response.new_parent_cgroup = self.args.pod_cgroup_parent
        return response

    async def PostStopPodSandboxHook(self, request: Any, context: Any) -> Any:
        self.record("PostStopPodSandbox", request)
        return self.pod_echo(request)

    # -- container hooks ------------------------------------------------------------------------

    def container_echo(self, request: Any) -> Any:
        response = self.pb.ContainerHookResponse(
            annotations=request.annotations, sandbox_parent_cgroup=request.sandbox_parent_cgroup, env=request.env,
        )
        if request.HasField("resources"):
            response.resources.CopyFrom(request.resources)
        return response

    async def PreCreateContainerHook(self, request: Any, context: Any) -> Any:
        self.record("PreCreateContainer", request)
        response = self.pb.ContainerHookResponse(
            annotations={**request.annotations, ANNOTATION: "PreCreateContainer"},
            env={**request.env, **self.envs},
        )
        response.resources.CopyFrom(request.resources)
        response.resources.shares = self.args.cpu_shares
        response.resources.mem_limit = self.args.memory_limit
        return response

    async def PreUpdateContainerResourcesHook(self, request: Any, context: Any) -> Any:
        self.record("PreUpdateContainerResources", request)
        return self.container_echo(request)

    async def PreStartContainerHook(self, request: Any, context: Any) -> Any:
        self.record("PreStartContainer", request)
        return self.pb.ContainerHookResponse()

    async def PostStartContainerHook(self, request: Any, context: Any) -> Any:
        self.record("PostStartContainer", request)
        return self.pb.ContainerHookResponse()

    async def PostStopContainerHook(self, request: Any, context: Any) -> Any:
        self.record("PostStopContainer", request)
        return self.pb.ContainerHookResponse()


async def serve(args: argparse.Namespace) -> None:
    import grpc

    sys.path.insert(0, str(args.generated))
    pb = importlib.import_module("independent_hooks_pb2")
    pb_grpc = importlib.import_module("independent_hooks_pb2_grpc")
    leaked = sorted(name for name in sys.modules if name.split(".")[0] == "runtimeproxy")
    if leaked:
        raise SystemExit(f"independent plugin must not load runtimeproxy, but has {leaked}")

    server = grpc.aio.server()
    pb_grpc.add_RuntimeHookServiceServicer_to_server(IndependentPlugin(pb, args), server)
    if not server.add_insecure_port(f"unix://{args.socket}"):
        raise SystemExit(f"cannot listen on {args.socket}")
    await server.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generated", type=Path, required=True, help="dir with independent_hooks_pb2*.py")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True, help="append each request as a JSON line here")
    parser.add_argument("--pod-cgroup-parent", default="")
    parser.add_argument("--cpu-shares", type=int, default=640)
    parser.add_argument("--memory-limit", type=int, default=100 * 1024 * 1024)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    if not args.env:
        args.env = ["WIRE_PLUGIN=independent"]
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
