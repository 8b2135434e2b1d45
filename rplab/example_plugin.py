"""The example hook plugin: what koordlet does, in miniature; the one fake plugin server of tests, lab and bench.

Like koordlet it echoes each request back with a few edits:
- PreRunPodSandbox: adds an annotation; moves the pod into a cgroup sub-tree of its own hierarchy if configured
  (``--pod-cgroup-subtree NAME``, what the lab runs: ``subtree_parent``), or sets the parent it is given.
- PreCreateContainer: sets CPU shares and a memory limit, adds an env var and an annotation.
- PreUpdateContainerResources: adds the annotation (keeps the requested resources, or sets a memory limit).
- every other hook: no change.
Other modes (ExampleSettings):
- ``echo`` (``--echo``): edits nothing, every hook answers with the whole request echoed back (each response
  field from the request field of the same name), as koordlet does for a pod it leaves alone.
- ``empty`` (``--empty``): every hook answers with an EMPTY response, which changes nothing under the proxy's
  merge rules and costs the least: the benchmark's no-op plugin.
- ``answers``: scripted answers per hook, ``answers[hook](request, context)`` (sync or async), sent exactly
  as returned (ScriptedPlugin: the tests' plugin whose answers each test chooses; unscripted hooks answer empty).
- ``fail_with`` / ``hang``: fault injection, every hook fails with that status or never answers.
It records every request it receives (``seen``, ``seen_by``; ``--record FILE``: one JSON line each) and counts
the calls per hook (``calls``; ``--counts FILE``: written on SIGUSR1 and on exit), so tests, the lab and the
benchmark can show what plugins see. Written with the plugin kit (runtimeproxy.plugin) as a plugin author would:
each hook returns only its edits.

    python -m rplab.example_plugin --socket /run/example-plugin.sock [--echo | --empty] [--record FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from rplab import CHECKOUT
from runtimeproxy.hooks.validate import cgroup_hierarchy
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.plugin import HookPlugin, serve_until_stopped
from runtimeproxy.plugin import echoed, registration  # noqa: F401  (re-exported: tests and the lab use them from here)
from runtimeproxy.plugin.service import Context, Hook
from runtimeproxy.usage import OneLineParser

SLICE = ".slice"
ANNOTATION = "example.runtimeproxy.koordinator.sh/hooked"
# The lab's plugin: every pod moved into the cgroup sub-tree "rplab" of its own hierarchy (`kubepods` on a node).
LAB_ARGUMENTS = ("--pod-cgroup-subtree", "rplab")
PROCESS_START_TIMEOUT_SECONDS = 30.0

# A scripted answer: (request, context) -> the response to send as it is (or an awaitable of it).
Answer = Callable[[Message, grpc.aio.ServicerContext], Any]


@dataclass
class ExampleSettings:
    cpu_shares: int = 512
    memory_limit_in_bytes: int = 128 * 1024 * 1024
    envs: dict[str, str] = field(default_factory=lambda: {"EXAMPLE_PLUGIN": "hello"})
    pod_cgroup_parent: str = ""  # this parent for every pod, as it is
    pod_cgroup_subtree: str = ""  # else: every pod moved into the sub-tree of this name (subtree_parent)
    # PreUpdateContainerResources: 0 echoes the resources; else sets this memory limit, as koordlet does
    # (echoing swap: the proxy's merge makes swap follow).
    update_memory_limit_in_bytes: int = 0
    echo: bool = False  # answer with the request echoed back unchanged instead of the edits above
    empty: bool = False  # answer with an empty response (no change, no kit work): the benchmark's no-op plugin
    # Scripted answers per hook name, sent exactly as returned (before echo/empty/edits apply).
    answers: dict[str, Answer] = field(default_factory=dict)
    # Fault injection for tests: answer every hook with this status, or not at all.
    fail_with: grpc.StatusCode | None = None
    hang: bool = False


class SeenRequest(NamedTuple):
    hook: str
    request: Message


class ExamplePlugin(HookPlugin):
    def __init__(self, settings: ExampleSettings | None = None, record_path: Path | None = None,
                 keep_seen: bool = True) -> None:
        self.settings = settings or ExampleSettings()
        self.seen: list[SeenRequest] = []
        self.calls: Counter[str] = Counter()
        self._record_path = record_path
        self._keep_seen = keep_seen  # off in its own process: nobody reads it there, and a benchmark calls a lot

    def seen_by(self, hook: str) -> list[Message]:
        return [entry.request for entry in self.seen if entry.hook == hook]

    async def handle(self, hook: Hook, request: Message, context: Context) -> Message:
        """Record the request, inject the configured fault, send a scripted or empty answer, else let the kit
        answer with the hook's edits."""
        self._record(hook.name, request)
        if self.settings.hang:
            await asyncio.sleep(3600)
        if self.settings.fail_with is not None:
            await context.abort(self.settings.fail_with, f"example plugin refuses {hook.name}")
        scripted = self.settings.answers.get(hook.name)
        if scripted is not None:
            result = scripted(request, context)
            return await result if inspect.isawaitable(result) else result
        if self.settings.empty:
            return hook.response_type()
        return await super().handle(hook, request, context)

    def _record(self, hook: str, request: Message) -> None:
        self.calls[hook] += 1
        if self._keep_seen:
            copy = type(request)()
            copy.CopyFrom(request)  # a scripted answer may edit the request it is given
            self.seen.append(SeenRequest(hook, copy))
        if self._record_path is not None:
            line = {"hook": hook, "request": json_format.MessageToDict(request, preserving_proto_field_name=True)}
            with open(self._record_path, "ab") as record:
                record.write(orjson.dumps(line) + b"\n")

    def write_counts(self, path: Path) -> None:
        """The calls per hook so far as JSON at ``path`` (replaced at once: a reader never sees half of it)."""
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(dict(self.calls), sort_keys=True))
        temporary.replace(path)

    # -- the hooks: each returns only its edits; None answers the request echoed back (no change) ------

    def pre_run_pod_sandbox(self, request: hooks.PodSandboxHookRequest) -> hooks.PodSandboxHookResponse | None:
        if self.settings.echo:
            return None
        parent = self.settings.pod_cgroup_parent
        if not parent and self.settings.pod_cgroup_subtree:
            parent = subtree_parent(request.cgroup_parent, self.settings.pod_cgroup_subtree)
        return hooks.PodSandboxHookResponse(annotations={ANNOTATION: "PreRunPodSandbox"}, cgroup_parent=parent)

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


def subtree_parent(current: str, name: str) -> str:
    """The pod's cgroup parent moved into the sub-tree ``name`` (no '-': systemd nests slices by it) of its own
    top-level hierarchy, keeping the pod's own cgroup, as a resource manager moves the pods it manages into a tree
    of its own. The proxy refuses a parent outside the pod's hierarchy or its cgroup driver (hooks.validate):
    cgroupfs "/kubepods/burstable/pod<uid>" -> "/kubepods/<name>/pod<uid>"; the systemd driver's
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice" ->
    "/kubepods.slice/kubepods-<name>.slice/kubepods-<name>-pod<uid>.slice"; a pod without a parent (the
    runtime's default: the lab's own pods) -> "/<name>"."""
    if not current:
        return f"/{name}"
    top = cgroup_hierarchy(current)
    last = current.rsplit("/", 1)[-1]
    if last.endswith(SLICE):
        pod = last[: -len(SLICE)].rsplit("-", 1)[-1]
        tree = f"{top}-{name}"
        return f"/{top}{SLICE}/{tree}{SLICE}" + (f"/{tree}-{pod}{SLICE}" if pod.startswith("pod") else "")
    return f"/{top}/{name}" + (f"/{last}" if last.startswith("pod") else "")


class ScriptedPlugin(ExamplePlugin):
    """Answers each hook with ``answers[hook](request, context)`` (sync or async), sent as it is; records requests.

    A hook without an answer gets an empty response of its type.
    """

    def __init__(self, answers: dict[str, Answer] | None = None) -> None:
        super().__init__(ExampleSettings(answers=answers if answers is not None else {}, empty=True))


@contextmanager
def plugin_process(socket_path: Path, record: Path | None = None, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """The example plugin as its own process (``args``: more command-line options), until the block ends."""
    command = [sys.executable, "-m", "rplab.example_plugin", "--socket", str(socket_path), *args]
    if record is not None:
        command += ["--record", str(record)]
    plugin = subprocess.Popen(command, cwd=CHECKOUT)
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
                               pod_cgroup_parent=args.pod_cgroup_parent, pod_cgroup_subtree=args.pod_cgroup_subtree,
                               echo=args.echo, empty=args.empty)
    plugin = ExamplePlugin(settings, args.record, keep_seen=False)
    if args.counts is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, plugin.write_counts, args.counts)
    try:
        await serve_until_stopped(plugin, args.socket)
    finally:
        if args.counts is not None:
            plugin.write_counts(args.counts)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.example_plugin", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--cpu-shares", type=int, default=512)
    parser.add_argument("--memory-limit", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--pod-cgroup-parent", default="", help="every pod's new cgroup parent, as it is")
    parser.add_argument("--pod-cgroup-subtree", default="", metavar="NAME",
                        help="move every pod into the cgroup sub-tree NAME of its own hierarchy (the lab's: rplab)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--echo", action="store_true", help="echo every request back unchanged (no edits)")
    mode.add_argument("--empty", action="store_true", help="answer every hook with an empty response (no-op)")
    parser.add_argument("--record", type=Path, help="append each request as a JSON line here")
    parser.add_argument("--counts", type=Path, help="write the calls per hook as JSON here on SIGUSR1 and on exit")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
