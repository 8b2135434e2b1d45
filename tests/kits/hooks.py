"""Helpers shared by the hook unit tests.

- resources(), full_resources(), pod_request(), container_request(): sample hook messages; with_pod(): a
  container's request with a pod's part, as the core fills it (hooks.hook_messages.fill_pod_part).
- fill(): every field of a protobuf message set to a distinct non-default value, recursively,
  so that a round trip that loses or corrupts any field shows up as an inequality.
- mark_unknown(), unknown_marks(): an unknown field in a message and every message in it, and where such
  fields are found again (fields a newer peer sends, which a re-encoded message must keep).
- ScriptedPlugin (rplab.example_plugin): the example plugin answering each hook as the test chooses.
- PluginBench: a real PluginRegistry over a config dir plus a Dispatcher, driven from sync tests.
- StubRuntime: a frontend's runtime that knows nothing and counts its image reads; AttachedNri: one NRI plugin
  attached that changes nothing and keeps the edits CreateContainer showed it.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from runtimeproxy.hooks.edits import ContainerEdits, ImageFacts
from runtimeproxy.hooks.hook_messages import fill_pod_part, pod_record
from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.chain_value import ContainerValue
from runtimeproxy.hooks.dispatcher import Dispatcher, HookPoint
from runtimeproxy.hooks.nri_plugins import NriPluginStatus, Subject
from rplab.example_plugin import ScriptedPlugin, registration  # noqa: F401  (ScriptedPlugin: the tests use it from here)
from rplab.loop import LoopThread
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.hooks.registry import PluginRegistry
from runtimeproxy.hooks.runtime import Listing, NoRuntime
from runtimeproxy.hooks.model import Resources
from runtimeproxy.hooks.store import ContainerRecord, PodRecord

# --- filling messages -------------------------------------------------------------------

_MAX_DEPTH = 8


class Filler:
    """Distinct values from one counter: no two scalar fields of a filled message are equal."""

    def __init__(self, start: int = 1) -> None:
        self._next = itertools.count(start)

    def scalar(self, field: FieldDescriptor) -> Any:
        n = next(self._next)
        kind = field.cpp_type
        if kind == FieldDescriptor.CPPTYPE_STRING:
            return f"b{n}".encode() if field.type == FieldDescriptor.TYPE_BYTES else f"s{n}"
        if kind == FieldDescriptor.CPPTYPE_BOOL:
            return True
        if kind == FieldDescriptor.CPPTYPE_ENUM:
            values = [value.number for value in field.enum_type.values if value.number != 0]
            return values[n % len(values)] if values else 0
        if kind in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
            return float(n) + 0.5
        if kind in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64):
            return -n if n % 3 == 0 else n  # some negative values: 10-byte varints on the wire
        return n  # unsigned

    def fill(self, message: Message, depth: int = 0) -> Message:
        message.SetInParent()
        for field in message.DESCRIPTOR.fields:
            oneof = field.containing_oneof
            if oneof is not None and oneof.fields[0] is not field:
                continue  # one member per oneof
            self._fill_field(message, field, depth)
        return message

    def _fill_field(self, message: Message, field: FieldDescriptor, depth: int) -> None:
        value_type = field.message_type
        if value_type is not None and value_type.GetOptions().map_entry:
            entries = getattr(message, field.name)
            key_field = value_type.fields_by_name["key"]
            value_field = value_type.fields_by_name["value"]
            for _ in range(2):
                key = self.scalar(key_field)
                if value_field.message_type is not None:
                    if depth < _MAX_DEPTH:
                        self.fill(entries[key], depth + 1)
                else:
                    entries[key] = self.scalar(value_field)
        elif field.is_repeated:
            values = getattr(message, field.name)
            for _ in range(2):
                if value_type is not None:
                    if depth < _MAX_DEPTH:
                        self.fill(values.add(), depth + 1)
                else:
                    values.append(self.scalar(field))
        elif value_type is not None:
            if depth < _MAX_DEPTH:
                self.fill(getattr(message, field.name), depth + 1)
        else:
            setattr(message, field.name, self.scalar(field))


def fill(message: Message, start: int = 1) -> Message:
    return Filler(start).fill(message)


def unset_fields(message: Message, prefix: str = "") -> list[str]:
    """Paths of singular fields left at their default (for checking that fill() reached everything)."""
    missing: list[str] = []
    for field in message.DESCRIPTOR.fields:
        path = f"{prefix}{field.name}"
        oneof = field.containing_oneof
        if oneof is not None and message.WhichOneof(oneof.name) != field.name:
            continue
        if field.is_repeated:
            if not len(getattr(message, field.name)):
                missing.append(path)
        elif field.message_type is not None:
            if not message.HasField(field.name):
                missing.append(path)
            else:
                missing += unset_fields(getattr(message, field.name), path + ".")
        elif getattr(message, field.name) == field.default_value:
            missing.append(path)
    return missing


# --- sample hook requests (shared by the merge, CRI and Docker conversion tests) ---------

def resources(**fields: object) -> hooks.LinuxContainerResources:
    return hooks.LinuxContainerResources(**fields)  # type: ignore[arg-type]


def full_resources() -> hooks.LinuxContainerResources:
    return hooks.LinuxContainerResources(
        cpu_period=100_000, cpu_quota=50_000, cpu_shares=1024, memory_limit_in_bytes=256 << 20,
        oom_score_adj=500, cpuset_cpus="0-3", cpuset_mems="0",
        hugepage_limits=[hooks.HugepageLimit(page_size="2MB", limit=4 << 20)],
        unified={"memory.high": "200M", "cpu.weight": "100"}, memory_swap_limit_in_bytes=512 << 20,
    )


def pod_request() -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", uid="u-1", namespace="ns", attempt=2),
        runtime_handler="runc",
        labels={"app": "web", "tier": "front"},
        annotations={"a": "1", "b": "2"},
        cgroup_parent="/kubepods/pod-u-1",
        overhead=resources(cpu_shares=10),
        resources=full_resources(),
    )


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=pod_request().pod_meta,
        container_meta=hooks.ContainerMetadata(name="app", attempt=1, id="c-1"),
        container_annotations={"c": "1", "d": "2"},
        container_resources=full_resources(),
        pod_resources=resources(cpu_shares=2048),
        pod_annotations={"a": "1"},
        pod_labels={"app": "web"},
        pod_cgroup_parent="/kubepods/pod-u-1",
        container_envs={"PATH": "/bin", "HOME": "/root"},
    )


def with_pod(container: hooks.ContainerResourceHookRequest,
             pod: hooks.PodSandboxHookRequest | None) -> hooks.ContainerResourceHookRequest:
    """A copy of `container` with `pod`'s part filled as the core fills it (None: a plain copy)."""
    request = hooks.ContainerResourceHookRequest()
    request.CopyFrom(container)
    if pod is not None:
        fill_pod_part(request, pod_record(pod))
    return request


# --- plugins --------------------------------------------------------------------------

def register(
    config_dir: Path, name: str, socket: Path, hooks: Iterable[str] = HOOK_NAMES,
    policy: str = "Ignore", timeout: float | None = None, shadow: bool = False,
) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / name).write_bytes(registration(socket, list(hooks), policy, timeout, shadow))


def refresh_on_loop(loop: LoopThread, registry: PluginRegistry) -> None:
    """PluginRegistry.refresh() opens aio channels, so it must run on the loop thread."""

    async def refresh() -> None:
        registry.refresh()

    loop.run(refresh())


class PluginBench:
    """A Dispatcher over a real PluginRegistry in a temp dir, plus in-process plugins."""

    def __init__(self, loop: LoopThread, base: Path) -> None:
        self.loop = loop
        self.base = base
        self.config_dir = base / "hookserver.d"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.registry = PluginRegistry(self.config_dir)
        self.dispatcher = Dispatcher(self.registry)
        self._servers: list[Any] = []
        self._serial = itertools.count()

    def socket(self, stem: str = "plugin") -> Path:
        return self.base / f"{stem}{next(self._serial)}.sock"

    def serve(self, plugin: Any, socket: Path | None = None) -> Path:
        """Start an in-process plugin (ExamplePlugin or ScriptedPlugin) on a socket (default: a new one)."""
        socket = socket or self.socket()
        self.loop.run(plugin.start(socket))
        self._servers.append(plugin)
        return socket

    def register(self, name: str, socket: Path, hooks: Iterable[str] = HOOK_NAMES,
                 policy: str = "Ignore", timeout: float | None = None, shadow: bool = False) -> None:
        register(self.config_dir, name, socket, hooks, policy, timeout, shadow)
        refresh_on_loop(self.loop, self.registry)
        assert name in [plugin.name for plugin in self.registry.plugins], f"{name} not registered"

    def run(self, point: HookPoint, request: Message, time_remaining: float | None = None) -> Message:
        return self.loop.run(self.dispatcher.run(point, request, time_remaining))

    def close(self) -> None:
        self.loop.run(self.registry.close())
        for plugin in self._servers:
            self.loop.run(plugin.stop())


# --- fields unknown to our protos -------------------------------------------------------------------

UNKNOWN_FIELD = 9999  # no CRI message numbers a field this high: unknown to every version of the protos


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _submessages(message: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every message set in `message`, by path; map entries aside (no protobuf runtime keeps their unknowns)."""
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            yield from ((f"{path}.{field.name}[{index}]", item) for index, item in enumerate(value))
        else:
            yield f"{path}.{field.name}", value


def mark_unknown(message: Any, path: str = "") -> list[str]:
    """Adds to `message` and every message in it an unknown field whose bytes name its path; the paths."""
    marked = [mark for sub_path, sub in _submessages(message, path) for mark in mark_unknown(sub, sub_path)]
    payload = (path or "request").encode()
    message.MergeFromString(_varint(UNKNOWN_FIELD << 3 | 2) + _varint(len(payload)) + payload)
    return sorted([payload.decode(), *marked])


def unknown_marks(message: Any, path: str = "") -> list[str]:
    """The paths named by the unknown fields found anywhere in `message` (where they were put, if kept)."""
    found = [field.data.decode() for field in UnknownFieldSet(message) if field.field_number == UNKNOWN_FIELD]
    found += [mark for sub_path, sub in _submessages(message, path) for mark in unknown_marks(sub, sub_path)]
    return sorted(found)


Updater = Callable[[str, Resources], Awaitable[None]]
Evictor = Callable[[str], Awaitable[None]]


class StubRuntime:
    """A frontend's runtime (hooks.runtime.Runtime) that knows nothing and carries out updates and evictions with
    the given callables (none: it cannot, as a frontend without them); every image is `image`."""

    name = "stub"

    def __init__(self, update: Updater | None = None, evict: Evictor | None = None, cdi: bool = False,
                 image: ImageFacts = ImageFacts()) -> None:
        self._update, self._evict = update, evict
        self.cdi = cdi  # what cdi_enabled answers
        self.image = image
        self.images_read: list[str] = []  # each image_facts call's image (a runtime call in a real frontend)

    async def list_objects(self) -> Listing:
        return Listing()

    async def load_pod(self, pod_id: str) -> PodRecord | None:
        return None

    async def load_container(self, container_id: str, pod_id: str = "") -> ContainerRecord | None:
        return None

    async def remove_sandbox(self, pod_id: str) -> None:
        return None

    async def remove_container(self, container_id: str) -> None:
        return None

    async def update_container_resources(self, container_id: str, resources: Resources) -> None:
        if self._update is None:
            raise NoRuntime("this frontend takes no updates")
        await self._update(container_id, resources)

    async def evict_container(self, container_id: str) -> None:
        if self._evict is None:
            raise NoRuntime("this frontend cannot stop containers")
        await self._evict(container_id)

    async def image_facts(self, image: str) -> ImageFacts:
        self.images_read.append(image)
        return self.image

    async def cdi_enabled(self) -> bool:
        return self.cdi


class AttachedNri:
    """NRI plugins (hooks.nri_plugins.NriPlugins) as one attached plugin subscribed to `events` that changes
    nothing; `shown`: the edits each CreateContainer showed it."""

    def __init__(self, events: Iterable[str] = ()) -> None:
        self.events = frozenset(events)
        self.shown: list[ContainerEdits | None] = []

    def statuses(self) -> list[NriPluginStatus]:
        return []

    def wants(self, event: str) -> bool:
        return event in self.events

    def attached(self) -> bool:
        return True

    async def adjust(self, event: str, subject: Subject, time_remaining: float | None,
                     chain: ChainRecord | None = None, value: ContainerValue | None = None) -> ContainerValue:
        value = value if value is not None else subject.value()
        self.shown.append(value.container.edits)
        return value

    async def notify(self, event: str, subject: Subject) -> None:
        return None
