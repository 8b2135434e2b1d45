"""An example hook plugin: what koordlet does, in miniature.

Like koordlet it echoes each request back with a few edits:
- PreRunPodSandbox: adds an annotation; sets the pod's cgroup parent if configured.
- PreCreateContainer: sets CPU shares and a memory limit, adds an env var and an annotation.
- PreUpdateContainerResources: adds the annotation (keeps the requested resources, or sets a memory limit).
- every other hook: no change.
With ``--echo`` it edits nothing: every hook answers with the whole request echoed back (each response
field from the request field of the same name), as koordlet does for a pod it leaves alone.
It records every request it receives, so tests and the lab can show what plugins see.
Written with the plugin kit (runtimeproxy.plugin) as a plugin author would: each hook returns only its edits.

    python -m runtimeproxy.lab.example_plugin --socket /run/example-plugin.sock
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.plugin import HookPlugin, serve_until_stopped
from runtimeproxy.plugin import echoed, registration  # noqa: F401  (re-exported: tests and the lab use them from here)
from runtimeproxy.plugin.service import Context, Hook

ANNOTATION = "example.runtimeproxy.koordinator.sh/hooked"
PROCESS_START_TIMEOUT_SECONDS = 30.0


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


class ExamplePlugin(HookPlugin):
    def __init__(self, settings: ExampleSettings | None = None, record_path: Path | None = None) -> None:
        self.settings = settings or ExampleSettings()
        self.seen: list[SeenRequest] = []
        self._record_path = record_path

    def seen_by(self, hook: str) -> list[Message]:
        return [entry.request for entry in self.seen if entry.hook == hook]

    async def handle(self, hook: Hook, request: Message, context: Context) -> Message:
        """Record the request and inject the configured fault before the kit answers."""
        self.seen.append(SeenRequest(hook.name, request))
        if self._record_path is not None:
            line = {"hook": hook.name, "request": json_format.MessageToDict(request, preserving_proto_field_name=True)}
            with open(self._record_path, "ab") as record:
                record.write(orjson.dumps(line) + b"\n")
        if self.settings.hang:
            await asyncio.sleep(3600)
        if self.settings.fail_with is not None:
            await context.abort(self.settings.fail_with, f"example plugin refuses {hook.name}")
        return await super().handle(hook, request, context)

    # -- the hooks: each returns only its edits; None answers the request echoed back (no change) ------

    def pre_run_pod_sandbox(self, request: hooks.PodSandboxHookRequest) -> hooks.PodSandboxHookResponse | None:
        if self.settings.echo:
            return None
        return hooks.PodSandboxHookResponse(annotations={ANNOTATION: "PreRunPodSandbox"},
                                            cgroup_parent=self.settings.pod_cgroup_parent)

    def pre_create_container(
        self, request: hooks.ContainerResourceHookRequest
    ) -> hooks.ContainerResourceHookResponse | None:
        if self.settings.echo:
            return None
        return hooks.ContainerResourceHookResponse(
            container_annotations={ANNOTATION: "PreCreateContainer"},
            container_resources=hooks.LinuxContainerResources(
                cpu_shares=self.settings.cpu_shares, memory_limit_in_bytes=self.settings.memory_limit_in_bytes),
            container_envs=self.settings.envs,
        )

    def pre_update_container_resources(
        self, request: hooks.ContainerResourceHookRequest
    ) -> hooks.ContainerResourceHookResponse | None:
        if self.settings.echo:
            return None
        return hooks.ContainerResourceHookResponse(
            container_annotations={ANNOTATION: "PreUpdateContainerResources"},
            container_resources=hooks.LinuxContainerResources(
                memory_limit_in_bytes=self.settings.update_memory_limit_in_bytes),
        )


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
    await serve_until_stopped(ExamplePlugin(settings, args.record), args.socket)


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
