"""Helpers of the NRI host's unit tests: a host, the project's NRI plugins attached to it, and the hook values of
one pod and container.

The host binds no socket unless asked (`host_on(..., on_socket=True)`, for the tests about the NRI socket itself:
tests/nri/test_host_socket.py): each plugin reaches it over an anonymous socketpair, one end served by the host as
an accepted connection is (NriHost.serve_stream), the other the plugin's (NriPlugin.connect_socket); no path, no
listener, no lock file."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from google.protobuf.message import Message

from runtimeproxy.hooks.context import HookContext, subject_of
from runtimeproxy.hooks.hook_messages import container_record, pod_record
from runtimeproxy.hooks.model import ContainerRecord, PodRecord
from runtimeproxy.hooks.nri_plugins import Subject
from runtimeproxy.hooks.runtime import PluginAsks, Runtime
from runtimeproxy.hooks.skip import SkipRule
from runtimeproxy.hooks.store import Store
from runtimeproxy.nri.host import NriHost
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

from tests.kits.hooks import StubRuntime
from tests.kits.nri import NriPlugin

__all__ = ["StubRuntime"]  # hookkit's, for the NRI tests

Handler = Callable[[NriPlugin, Message], Awaitable[Message]]


def run(coroutine: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 20))  # type: ignore[arg-type]


def pod_info(name: str = "web") -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(pod_meta=hooks.PodSandboxMetadata(name=name, uid=f"uid-{name}",
                                                                       namespace="default"),
                                       labels={"app": name}, cgroup_parent="/kubepods/burstable/poduid-web")


def pod_model(name: str = "web") -> PodRecord:
    """pod_info's pod as the store records it."""
    return pod_record(pod_info(name))


def container_info(name: str = "app") -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        container_meta=hooks.ContainerMetadata(name=name), container_envs={"PATH": "/bin"},
        container_annotations={"a": "1"},
        container_resources=hooks.LinuxContainerResources(cpu_shares=512, memory_limit_in_bytes=64 << 20))


def container_model(name: str = "app", container_id: str = "") -> ContainerRecord:
    """container_info's container as the core's model has it (of pod-1)."""
    record = container_record("pod-1", container_info(name))
    record.id = container_id
    return record


def creation() -> Subject:
    return Subject("pod-1", pod_model(), "", container_model())


def created(container_id: str = "ctr-1") -> Subject:
    """A container of pod-1 the store records (a start's, a stop's, an update's subject)."""
    return Subject("pod-1", pod_model(), container_id, container_model(container_id=container_id))


def adjusting(adjust: nri.ContainerAdjustment, *updates: nri.ContainerUpdate) -> Handler:
    async def handle(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(adjust=adjust, update=updates)
    return handle


def plugin(name: str, index: str, events: int, **methods: tuple[type[Message], Handler]) -> NriPlugin:
    return NriPlugin(name=name, index=index, events=events, methods=dict(methods))


def cpu_update(container_id: str, shares: int) -> nri.ContainerUpdate:
    return nri.ContainerUpdate(container_id=container_id, linux=nri.LinuxContainerUpdate(
        resources=nri.LinuxResources(cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=shares)))))


@asynccontextmanager
async def host_on(path: Path, store: Store | None = None, runtime: Runtime | None = None, *, on_socket: bool = False,
                  **options: object) -> AsyncIterator[NriHost]:
    """A host named by `path` (serving it only `on_socket`: else plugins reach it through `attached`/`connected`);
    the core's door to `store` and `runtime`, with the core saying what the stops its evictions cause are about
    (as hooks.service wires it)."""
    store = store if store is not None else Store()
    context = HookContext(store, runtime or StubRuntime(), SkipRule("", ""))
    asks = PluginAsks(store, runtime, lambda container_id: subject_of(context, container_id=container_id))
    host = NriHost(path, asks, **options)  # type: ignore[arg-type]
    if on_socket:
        await host.start()
    else:
        host.launch()  # what start() does besides the socket
    try:
        yield host
    finally:
        await host.stop()
        for serving in _SERVING:
            serving.cancel()
        await asyncio.gather(*_SERVING, return_exceptions=True)
        _SERVING.clear()
        _ATTACHED.clear()


# The kits attached in the running scenario, held for the host's life: a test often passes a kit straight to
# `attached` and keeps no reference, and the garbage collector finalizing its StreamWriter closes the connection
# (asyncio does since Python 3.11.5): the plugin then dropped off mid-scenario whenever a collection ran.
_ATTACHED: list[NriPlugin] = []
# The host's side of each socketpair: its serve_stream task (registration, Configure, attach), as a listening
# server runs one per accepted connection; held (the loop keeps only a weak reference) and cancelled with the host.
_SERVING: list[asyncio.Task[None]] = []


async def connected(host: NriHost, *plugins: NriPlugin) -> None:
    """Each of plugins connected to the host at once, over a socketpair of its own, its registration answered; the
    host configures and synchronizes it in the background (`registered` waits for that)."""
    _ATTACHED.extend(plugins)

    async def connect(plugin: NriPlugin) -> None:
        host_end, plugin_end = socket.socketpair()
        _SERVING.append(asyncio.ensure_future(host.serve_stream(*await asyncio.open_unix_connection(sock=host_end))))
        await plugin.connect_socket(plugin_end)
    await asyncio.gather(*(connect(each) for each in plugins))


async def attached(host: NriHost, *plugins: NriPlugin) -> None:
    await connected(host, *plugins)
    await registered(host, *plugins)


async def registered(host: NriHost, *plugins: NriPlugin) -> None:
    """Until the host lists every one of plugins (already connected) as attached."""
    wanted = {f"{each.index}-{each.name}" for each in plugins}
    while not wanted <= {session.plugin_id for session in host.plugins}:
        await asyncio.sleep(0.01)
