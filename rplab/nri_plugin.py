"""The project's own NRI plugin, written from the protocol: the one NRI plugin of tests, lab and bench.

`NriPlugin` is what an NRI stub does on the plugin side: connect to the runtime's socket (or, launched by the
runtime, use the connection it passed as fd NRI_PLUGIN_SOCKET; or a socketpair's end, as unit tests do),
multiplex it, serve the Plugin service on connection 1, call RegisterPlugin on connection 2, answer Configure
with its event mask, record Synchronize and events, and stop on Shutdown. Knobs make it misbehave for fault
tests; `adjusting` and friends build answers.

    python -m rplab.nri_plugin [--socket PATH]   # a no-op plugin on every event (the benchmark's); without
                                                 # --socket it expects to be launched by the runtime
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import Message

from runtimeproxy.hooks.nri_events import EVENTS
from runtimeproxy.nri.events import WIRE
from runtimeproxy.nri.launch import PLUGIN_IDX_ENV, PLUGIN_NAME_ENV, PLUGIN_SOCKET_ENV
from runtimeproxy.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from runtimeproxy.nri.session import PLUGIN_SERVICE, RUNTIME_SERVICE
from runtimeproxy.nri.ttrpc import Endpoint
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri
from runtimeproxy.usage import OneLineParser


@dataclass
class NriPlugin:
    name: str = "nrikit"
    index: str = "10"
    events: int = 0
    register: bool = True
    configure_delay: float = 0.0  # seconds to stall before answering Configure (to miss the request timeout)
    sync_updates: list[nri.ContainerUpdate] = field(default_factory=list)
    failure_policy: nri.FailurePolicy | None = None  # answered in Configure (v0.12.5); None: not sent
    # Extra Plugin methods: name -> (request type, async handler(plugin, request) -> response).
    methods: dict[str, tuple[type[Message], Callable[[NriPlugin, Message], Awaitable[Message]]]] = \
        field(default_factory=dict)
    received: list[tuple[str, Message]] = field(default_factory=list)
    every_event: bool = False  # answer (and record) every lifecycle event `methods` does not handle
    keep_requests: bool = True  # keep the requests in `received` (off for a long-running benchmark plugin)
    shut_down: asyncio.Event = field(default_factory=asyncio.Event)
    mux: Mux | None = None
    runtime: Endpoint | None = None

    async def connect(self, path: Path) -> None:
        await self.serve(*await asyncio.open_unix_connection(str(path)))

    async def connect_socket(self, connection: socket.socket) -> None:
        """Over a connected unix socket: the end of a socketpair the runtime holds the other end of."""
        await self.serve(*await asyncio.open_unix_connection(sock=connection))

    async def connect_launched(self) -> None:
        """As a plugin the runtime launched: the connection is fd NRI_PLUGIN_SOCKET, name and index from the
        environment (it still registers, as NRI's stub does)."""
        connection = socket.socket(fileno=int(os.environ[PLUGIN_SOCKET_ENV]))
        self.name, self.index = os.environ[PLUGIN_NAME_ENV], os.environ[PLUGIN_IDX_ENV]
        await self.connect_socket(connection)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.mux = Mux(reader, writer, name=f"plugin {self.index}-{self.name}")
        serving = Endpoint(self.mux.open(PLUGIN_SERVICE_CONN), name="plugin side")
        self.runtime = Endpoint(self.mux.open(RUNTIME_SERVICE_CONN), name="plugin's runtime client")
        serving.register(PLUGIN_SERVICE, "Configure", nri.ConfigureRequest, self._configure)
        serving.register(PLUGIN_SERVICE, "Synchronize", nri.SynchronizeRequest, self._synchronize)
        serving.register(PLUGIN_SERVICE, "Shutdown", nri.Empty, self._shutdown)
        methods = {**(_EVERY_EVENT if self.every_event else {}), **self.methods}
        for method, (request_type, handler) in methods.items():
            serving.register(PLUGIN_SERVICE, method, request_type, self._recording(method, handler))
        serving.start()
        self.runtime.start()
        self.mux.start()
        if self.register:
            await self.runtime.call(RUNTIME_SERVICE, "RegisterPlugin", nri.RegisterPluginRequest(
                plugin_name=self.name, plugin_idx=self.index, NRI_version="v0.8.0"), nri.Empty, timeout=5)

    async def update_containers(self, *updates: nri.ContainerUpdate,
                                evict: tuple[nri.ContainerEviction, ...] = ()) -> nri.UpdateContainersResponse:
        """UpdateContainers on its own: `updates` of containers, and containers to `evict`."""
        assert self.runtime is not None
        return await self.runtime.call(RUNTIME_SERVICE, "UpdateContainers",
                                       nri.UpdateContainersRequest(update=updates, evict=evict),
                                       nri.UpdateContainersResponse, timeout=5)

    def requests(self, method: str) -> list[Message]:
        return [request for name, request in self.received if name == method]

    def close(self) -> None:
        if self.mux is not None:
            self.mux.close()

    async def _configure(self, request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        self.received.append(("Configure", request))
        if self.configure_delay:
            await asyncio.sleep(self.configure_delay)
        return nri.ConfigureResponse(events=self.events, failure_policy=self.failure_policy)

    async def _synchronize(self, request: nri.SynchronizeRequest) -> nri.SynchronizeResponse:
        self.received.append(("Synchronize", request))
        return nri.SynchronizeResponse(update=[] if request.more else self.sync_updates, more=request.more)

    async def _shutdown(self, request: nri.Empty) -> nri.Empty:
        self.received.append(("Shutdown", request))
        self.shut_down.set()
        return nri.Empty()

    def _recording(self, method: str, handler: Callable[[NriPlugin, Message], Awaitable[Message]]
                   ) -> Callable[[Message], Awaitable[Message]]:
        async def handle(request: Message) -> Message:
            if self.keep_requests:
                self.received.append((method, request))
            return await handler(self, request)
        return handle


def _answer(response_type: type[Message]) -> Callable[[NriPlugin, Message], Awaitable[Message]]:
    async def handle(plugin: NriPlugin, request: Message) -> Message:
        return response_type()
    return handle


# Every lifecycle event of the proxy's table (its method, request and response), answered with an empty response
# (no adjustment, no update).
_EVERY_EVENT: dict[str, tuple[type[Message], Callable[[NriPlugin, Message], Awaitable[Message]]]] = {
    event.method: (WIRE[event.name].request, _answer(WIRE[event.name].response)) for event in EVENTS
}


Handler = tuple[type[Message], Callable[[NriPlugin, Message], Awaitable[Message]]]


def adjusting(adjust: nri.ContainerAdjustment, updates: list[nri.ContainerUpdate] | None = None) -> Handler:
    """A CreateContainer handler (for `methods`) answering `adjust` and `updates` of other containers."""
    async def handle(plugin: NriPlugin, request: Message) -> Message:
        return nri.CreateContainerResponse(adjust=adjust, update=updates or [])
    return (nri.CreateContainerRequest, handle)


def shares(value: int) -> nri.LinuxResources:
    return nri.LinuxResources(cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=value)))


def bind_mount(destination: str, source: str, *options: str) -> nri.Mount:
    """A bind mount as NRI plugins write it ("-/dest" as destination removes one)."""
    return nri.Mount(destination=destination, type="bind", source=source, options=["rbind", *options])


def host_device(path: str) -> nri.LinuxDevice:
    """The host's device node at `path`, as an NRI plugin adds it (type and numbers read from the node)."""
    found = os.stat(path)
    kind = "b" if stat.S_ISBLK(found.st_mode) else "c"
    return nri.LinuxDevice(path=path, type=kind, major=os.major(found.st_rdev), minor=os.minor(found.st_rdev))


def rdt_class(name: str) -> nri.LinuxResources:
    return nri.LinuxResources(rdt_class=nri.OptionalString(value=name))


def update_shares(container_id: str, value: int) -> nri.ContainerUpdate:
    return nri.ContainerUpdate(container_id=container_id, linux=nri.LinuxContainerUpdate(resources=shares(value)))


def install_noop(plugin_dir: Path, plugin_id: str = "10-noop") -> Path:
    """The no-op plugin as an executable `plugin_id` in `plugin_dir` (for `--nri-plugin-path`: the proxy launches
    it as NRI runtimes do); directory and file made as the proxy trusts them (0755)."""
    from rplab import CHECKOUT

    plugin_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    plugin_dir.chmod(0o755)
    plugin = plugin_dir / plugin_id
    plugin.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(CHECKOUT)!r})\n"
                      "from rplab.nri_plugin import main\nmain()\n")
    plugin.chmod(0o755)
    return plugin


async def _serve_noop(socket_path: Path | None, name: str, index: str) -> None:
    plugin = NriPlugin(name=name, index=index, every_event=True, keep_requests=False)
    if socket_path is None:
        await plugin.connect_launched()
    else:
        await plugin.connect(socket_path)
    assert plugin.mux is not None
    closed = asyncio.ensure_future(plugin.mux.wait_closed())
    shut = asyncio.ensure_future(plugin.shut_down.wait())
    await asyncio.wait({closed, shut}, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.05)  # let the Shutdown answer go out
    plugin.close()


def main() -> None:
    parser = OneLineParser(prog="python -m rplab.nri_plugin", description="a no-op NRI plugin on every event")
    parser.add_argument("--socket", type=Path, help="the runtime's NRI socket (default: launched, fd from the env)")
    parser.add_argument("--name", default="noop")
    parser.add_argument("--index", default="10")
    args = parser.parse_args()
    asyncio.run(_serve_noop(args.socket, args.name, args.index))


if __name__ == "__main__":
    main()
