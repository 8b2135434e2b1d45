"""An example hook plugin: what koordlet does, in miniature.

Like koordlet it echoes each request back with a few edits:
- PreRunPodSandbox: adds an annotation; sets the pod's cgroup parent if configured.
- PreCreateContainer: sets CPU shares and a memory limit, adds an env var and an annotation.
- PreUpdateContainerResources: adds the annotation (keeps the requested resources, or sets a memory limit).
- every other hook: answers with an empty response.
With ``--echo`` it edits nothing: every hook answers with the whole request echoed back (each response
field from the request field of the same name), as koordlet does for a pod it leaves alone.
It records every request it receives, so tests and the lab can show what plugins see.

    python -m runtimeproxy.lab.example_plugin --socket /run/example-plugin.sock
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc

ANNOTATION = "example.runtimeproxy.koordinator.sh/hooked"
PROCESS_START_TIMEOUT_SECONDS = 30.0
Context = grpc.aio.ServicerContext


@dataclass
class ExampleSettings:
    cpu_shares: int = 512
    memory_limit_in_bytes: int = 128 * 1024 * 1024
    envs: dict[str, str] = field(default_factory=lambda: {"EXAMPLE_PLUGIN": "hello"})
    pod_cgroup_parent: str = ""
    # PreUpdateContainerResources: 0 echoes the resources; else sets this memory limit, as koordlet does
    # (echoing swap: the proxy's merge makes swap follow).
    update_memory_limit_in_bytes: int = 0
    echo: bool = False  # answer with the request echoed back unchanged instead of the edits above
    # Fault injection for tests: answer every hook with this status, or not at all.
    fail_with: grpc.StatusCode | None = None
    hang: bool = False


@dataclass
class SeenRequest:
    hook: str
    request: Message


class ExamplePlugin(hooks_grpc.RuntimeHookServiceServicer):
    def __init__(self, settings: ExampleSettings | None = None, record_path: Path | None = None) -> None:
        self.settings = settings or ExampleSettings()
        self.seen: list[SeenRequest] = []
        self._record_path = record_path
        self._server: grpc.aio.Server | None = None

    # -- serving --------------------------------------------------------------------------

    async def start(self, socket_path: Path) -> None:
        socket_path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        hooks_grpc.add_RuntimeHookServiceServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    def seen_by(self, hook: str) -> list[Message]:
        return [entry.request for entry in self.seen if entry.hook == hook]

    async def _handle(self, hook: str, request: Message, context: Context, answer: Callable[[], Message]) -> Message:
        self.seen.append(SeenRequest(hook, request))
        if self._record_path is not None:
            line = {"hook": hook, "request": json_format.MessageToDict(request, preserving_proto_field_name=True)}
            with open(self._record_path, "ab") as record:
                record.write(orjson.dumps(line) + b"\n")
        if self.settings.hang:
            await asyncio.sleep(3600)
        if self.settings.fail_with is not None:
            await context.abort(self.settings.fail_with, f"example plugin refuses {hook}")
        response = answer()
        return echoed(request, type(response)) if self.settings.echo else response

    # -- the hooks --------------------------------------------------------------------------

    async def PreRunPodSandboxHook(self, request: hooks.PodSandboxHookRequest, context: Context) -> hooks.PodSandboxHookResponse:
        def answer() -> hooks.PodSandboxHookResponse:
            response = hooks.PodSandboxHookResponse(
                labels=request.labels,
                annotations={**request.annotations, ANNOTATION: "PreRunPodSandbox"},
                cgroup_parent=self.settings.pod_cgroup_parent or request.cgroup_parent,
            )
            if request.HasField("resources"):
                response.resources.CopyFrom(request.resources)
            return response

        return await self._handle("PreRunPodSandbox", request, context, answer)

    async def PreCreateContainerHook(self, request: hooks.ContainerResourceHookRequest, context: Context) -> hooks.ContainerResourceHookResponse:
        def answer() -> hooks.ContainerResourceHookResponse:
            resources = hooks.LinuxContainerResources()
            resources.CopyFrom(request.container_resources)
            resources.cpu_shares = self.settings.cpu_shares
            resources.memory_limit_in_bytes = self.settings.memory_limit_in_bytes
            return hooks.ContainerResourceHookResponse(
                container_annotations={**request.container_annotations, ANNOTATION: "PreCreateContainer"},
                container_resources=resources,
                container_envs={**request.container_envs, **self.settings.envs},
            )

        return await self._handle("PreCreateContainer", request, context, answer)

    async def PreUpdateContainerResourcesHook(self, request: hooks.ContainerResourceHookRequest, context: Context) -> hooks.ContainerResourceHookResponse:
        def answer() -> hooks.ContainerResourceHookResponse:
            response = hooks.ContainerResourceHookResponse(
                container_annotations={**request.container_annotations, ANNOTATION: "PreUpdateContainerResources"},
                container_resources=request.container_resources,
            )
            if self.settings.update_memory_limit_in_bytes:
                response.container_resources.memory_limit_in_bytes = self.settings.update_memory_limit_in_bytes
            return response

        return await self._handle("PreUpdateContainerResources", request, context, answer)

    async def PreStartContainerHook(self, request: hooks.ContainerResourceHookRequest, context: Context) -> hooks.ContainerResourceHookResponse:
        return await self._handle("PreStartContainer", request, context, hooks.ContainerResourceHookResponse)

    async def PostStartContainerHook(self, request: hooks.ContainerResourceHookRequest, context: Context) -> hooks.ContainerResourceHookResponse:
        return await self._handle("PostStartContainer", request, context, hooks.ContainerResourceHookResponse)

    async def PostStopContainerHook(self, request: hooks.ContainerResourceHookRequest, context: Context) -> hooks.ContainerResourceHookResponse:
        return await self._handle("PostStopContainer", request, context, hooks.ContainerResourceHookResponse)

    async def PostStopPodSandboxHook(self, request: hooks.PodSandboxHookRequest, context: Context) -> hooks.PodSandboxHookResponse:
        return await self._handle("PostStopPodSandbox", request, context, hooks.PodSandboxHookResponse)


def echoed(request: Message, response_type: type[Message]) -> Message:
    """A ``response_type`` carrying every field of ``request`` that it has under the same name."""
    response = response_type()
    for field in response.DESCRIPTOR.fields:
        source = request.DESCRIPTOR.fields_by_name.get(field.name)
        if source is None:
            continue
        value = getattr(request, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(response, field.name).update(value)
        elif field.message_type is not None:
            if request.HasField(field.name):
                getattr(response, field.name).CopyFrom(value)
        else:
            setattr(response, field.name, value)
    return response


def registration(socket_path: Path, hooks_: list[str], policy: str = "Ignore", timeout: float | None = None) -> bytes:
    """The JSON a plugin drops into the proxy's config dir to register."""
    document: dict[str, object] = {"remote-endpoint": str(socket_path), "failure-policy": policy, "runtime-hooks": hooks_}
    if timeout is not None:
        document["timeout-seconds"] = timeout
    return orjson.dumps(document, option=orjson.OPT_INDENT_2)


@contextmanager
def plugin_process(socket_path: Path, record: Path | None = None, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """The example plugin as its own process (``args``: more command-line options), until the block ends."""
    command = [sys.executable, "-m", "runtimeproxy.lab.example_plugin", "--socket", str(socket_path), *args]
    if record is not None:
        command += ["--record", str(record)]
    plugin = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + PROCESS_START_TIMEOUT_SECONDS
        while not socket_path.exists():
            if plugin.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the example plugin did not start ({' '.join(command)})")
            time.sleep(0.05)
        yield plugin
    finally:
        plugin.terminate()
        plugin.wait(10)


async def _serve(args: argparse.Namespace) -> None:
    settings = ExampleSettings(cpu_shares=args.cpu_shares, memory_limit_in_bytes=args.memory_limit,
                               envs=dict(item.split("=", 1) for item in args.env) or ExampleSettings().envs,
                               pod_cgroup_parent=args.pod_cgroup_parent, echo=args.echo)
    plugin = ExamplePlugin(settings, args.record)
    await plugin.start(args.socket)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await plugin.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtimeproxy.lab.example_plugin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--cpu-shares", type=int, default=512)
    parser.add_argument("--memory-limit", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--pod-cgroup-parent", default="")
    parser.add_argument("--echo", action="store_true", help="echo every request back unchanged (no edits)")
    parser.add_argument("--record", type=Path, help="append each request as a JSON line here")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
