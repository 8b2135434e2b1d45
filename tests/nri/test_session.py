"""The runtime side of an NRI plugin connection, driven by the project's own plugin (nrikit) over a real unix
socket, and once by a plugin made of struct.pack alone so that our encoder is checked by an independent decoder."""

from __future__ import annotations

import asyncio
import socket
import struct
import tempfile
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from runtimeproxy.listener import bind_unix_socket
from runtimeproxy.nri.session import (
    DEFAULT_REGISTRATION_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, KNOWN_EVENTS_MASK, PluginDetached, PluginSession,
    event_mask, listen, serve_connection,
)
from runtimeproxy.nri.ttrpc import Code, TtrpcError
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri
from runtimeproxy.pb.ttrpc import request_pb2

from tests.kits.nri import NriPlugin

RUNTIME = {"runtime_name": "koord-runtime-proxy", "runtime_version": "9.9.9"}


def run(coroutine: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 10))  # type: ignore[arg-type]


@pytest.fixture
def socket_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nri-") as directory:  # short: unix socket paths are limited
        yield Path(directory) / "nri.sock"


@asynccontextmanager
async def runtime(path: Path, **options: object) -> AsyncIterator[asyncio.Queue[PluginSession | PluginDetached]]:
    """A runtime accepting plugins on `path`; the queue gets each started session, or why it was detached."""
    outcomes: asyncio.Queue[PluginSession | PluginDetached] = asyncio.Queue()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = PluginSession(reader, writer, **{**RUNTIME, **options})  # type: ignore[arg-type]
        try:
            await session.start()
        except PluginDetached as detached:
            outcomes.put_nowait(detached)
        else:
            outcomes.put_nowait(session)

    server = await asyncio.start_unix_server(accepted, path=str(path))
    try:
        yield outcomes
    finally:
        server.close()


def pod(name: str) -> nri.PodSandbox:
    return nri.PodSandbox(id=f"pod-{name}", name=name, uid=f"uid-{name}", namespace="default")


def container(name: str, pod_name: str) -> nri.Container:
    return nri.Container(id=f"ctr-{name}", pod_sandbox_id=f"pod-{pod_name}", name=name,
                         state=nri.CONTAINER_RUNNING)


def cpu_update(container_id: str, shares: int) -> nri.ContainerUpdate:
    return nri.ContainerUpdate(container_id=container_id, linux=nri.LinuxContainerUpdate(
        resources=nri.LinuxResources(cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=shares)))))


def test_nris_defaults() -> None:
    assert (DEFAULT_REGISTRATION_TIMEOUT, DEFAULT_REQUEST_TIMEOUT) == (5.0, 2.0)
    assert event_mask(nri.RUN_POD_SANDBOX, nri.CREATE_CONTAINER) == 0b1001


def test_a_plugin_registers_is_configured_synchronized_called_and_shut_down(socket_path: Path) -> None:
    async def scenario() -> None:
        unsolicited: list[nri.UpdateContainersRequest] = []

        async def on_update(session: PluginSession, request: nri.UpdateContainersRequest
                            ) -> nri.UpdateContainersResponse:
            unsolicited.append(request)
            return nri.UpdateContainersResponse(failed=[u for u in request.update if u.container_id == "gone"])

        async def create_container(plugin: NriPlugin, request: nri.CreateContainerRequest
                                   ) -> nri.CreateContainerResponse:
            # An unsolicited update while the runtime waits for this very answer: must not deadlock.
            await plugin.update_containers(cpu_update("ctr-b", 512))
            return nri.CreateContainerResponse(adjust=nri.ContainerAdjustment(annotations={"seen": request.container.name}))

        plugin = NriPlugin(name="tester", index="07", events=event_mask(nri.CREATE_CONTAINER, nri.STOP_CONTAINER),
                           sync_updates=[cpu_update("ctr-a", 256)],
                           methods={"CreateContainer": (nri.CreateContainerRequest, create_container)})  # type: ignore[dict-item]
        sessions: asyncio.Queue[PluginSession] = asyncio.Queue()

        async def on_plugin(session: PluginSession) -> None:
            sessions.put_nowait(session)

        sock, _ = bind_unix_socket(socket_path)
        server = await listen(sock, lambda reader, writer: serve_connection(
            reader, writer, on_plugin, on_update=on_update, **RUNTIME))
        await plugin.connect(socket_path)
        session = await sessions.get()
        assert (session.plugin_id, session.nri_version) == ("07-tester", "v0.8.0")
        assert session.subscribed(nri.CREATE_CONTAINER) and session.subscribed(nri.STOP_CONTAINER)
        assert not session.subscribed(nri.RUN_POD_SANDBOX)
        configure, = plugin.requests("Configure")
        assert (configure.runtime_name, configure.runtime_version, configure.registration_timeout,
                configure.request_timeout) == ("koord-runtime-proxy", "9.9.9", 5000, 2000)

        updates = await session.synchronize([pod("p")], [container("a", "p"), container("b", "p")])
        assert [u.container_id for u in updates] == ["ctr-a"]
        sync, = plugin.requests("Synchronize")
        assert ([p.name for p in sync.pods], [c.name for c in sync.containers], sync.more) == (["p"], ["a", "b"], False)

        answer = await session.call("CreateContainer", nri.CreateContainerRequest(
            pod=pod("p"), container=container("c", "p")), nri.CreateContainerResponse)
        assert dict(answer.adjust.annotations) == {"seen": "c"}
        assert [u.container_id for r in unsolicited for u in r.update] == ["ctr-b"]

        with pytest.raises(TtrpcError) as unimplemented:  # an error answer leaves the plugin attached
            await session.call("StopContainer", nri.StopContainerRequest(), nri.StopContainerResponse)
        assert unimplemented.value.code == Code.UNIMPLEMENTED and not session.detached

        failed = await plugin.update_containers(cpu_update("gone", 2))
        assert [u.container_id for u in failed.failed] == ["gone"]

        await session.shutdown()
        await plugin.shut_down.wait()
        await session.wait_closed()
        assert session.detached
        server.close()
    run(scenario())


def test_a_plugin_that_does_not_register_in_time_is_detached(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path, registration_timeout=0.2) as outcomes:
            plugin = NriPlugin(register=False)
            await plugin.connect(socket_path)
            outcome = await outcomes.get()
            assert isinstance(outcome, PluginDetached) and "registration timed out" in outcome.message
            assert plugin.mux is not None
            await plugin.mux.wait_closed()  # the runtime hung up on it
    run(scenario())


def test_a_plugin_that_misses_the_request_timeout_is_detached(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path, request_timeout=0.2) as outcomes:
            plugin = NriPlugin(configure_delay=5)
            await plugin.connect(socket_path)
            outcome = await outcomes.get()
            assert isinstance(outcome, PluginDetached) and outcome.code == Code.DEADLINE_EXCEEDED
            assert "Configure timed out" in outcome.message
            configure, = plugin.requests("Configure")
            assert configure.request_timeout == 200
    run(scenario())


def test_a_call_that_times_out_detaches_and_later_calls_are_refused(socket_path: Path) -> None:
    async def stall(plugin: NriPlugin, request: nri.StateChangeEvent) -> nri.Empty:
        await asyncio.Event().wait()
        raise AssertionError

    async def scenario() -> None:
        async with runtime(socket_path, request_timeout=0.2) as outcomes:
            plugin = NriPlugin(methods={"StateChange": (nri.StateChangeEvent, stall)})  # type: ignore[dict-item]
            await plugin.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession)
            with pytest.raises(PluginDetached):
                await session.call("StateChange", nri.StateChangeEvent(event=nri.START_CONTAINER), nri.Empty)
            with pytest.raises(PluginDetached):
                await session.call("StateChange", nri.StateChangeEvent(), nri.Empty)
            assert session.detached_reason == "StateChange timed out"
    run(scenario())


def test_unknown_event_bits_are_masked_not_refused_and_no_bits_means_every_event(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path) as outcomes:
            newer = NriPlugin(name="newer", events=event_mask(nri.START_CONTAINER) | (1 << 20))
            await newer.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession)
            assert (session.events, session.ignored_events) == (event_mask(nri.START_CONTAINER), 1 << 20)

            everything = NriPlugin(name="all", events=0)
            await everything.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession) and session.events == KNOWN_EVENTS_MASK
            assert all(session.subscribed(event) for event in range(1, 14))
    run(scenario())


def test_a_bad_plugin_index_is_refused(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path) as outcomes:
            plugin = NriPlugin(index="7")
            with pytest.raises(TtrpcError) as refused:
                await plugin.connect(socket_path)
            assert refused.value.code == Code.INVALID_ARGUMENT and "two digits" in refused.value.message
            outcome = await outcomes.get()
            assert isinstance(outcome, PluginDetached) and "registration refused" in outcome.message
    run(scenario())


def test_synchronize_splits_a_state_too_big_for_one_message(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path) as outcomes:
            plugin = NriPlugin(sync_updates=[cpu_update("ctr-0", 2)])
            await plugin.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession)
            big = "x" * (1 << 20)
            containers = [nri.Container(id=f"ctr-{n}", annotations={"big": big}) for n in range(6)]
            updates = await session.synchronize([pod("p")], containers)
            parts = plugin.requests("Synchronize")
            assert [part.more for part in parts] == [True] * (len(parts) - 1) + [False] and len(parts) >= 2
            assert sum(len(part.containers) for part in parts) == 6 and [u.container_id for u in updates] == ["ctr-0"]
    run(scenario())


# -- an independent check: a plugin made of struct.pack, reading what our encoder wrote ------------------------


class RawPlugin:
    """Speaks the mux and ttrpc framing re-implemented here from the documented layout, nothing shared."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.trunk = b""
        self.streams: dict[int, bytes] = {1: b"", 2: b""}
        self.frames_written: list[tuple[int, int]] = []  # (connection id, payload length) of our peer's frames

    async def send(self, conn_id: int, stream_id: int, message_type: int, data: bytes) -> None:
        ttrpc_frame = struct.pack(">IIBB", len(data), stream_id, message_type, 0) + data
        await asyncio.get_running_loop().sock_sendall(
            self.sock, struct.pack(">II", conn_id, len(ttrpc_frame)) + ttrpc_frame)

    async def receive(self, conn_id: int) -> tuple[int, int, int, bytes]:
        """The next whole ttrpc frame on logical connection `conn_id`: (stream id, type, flags, data)."""
        while True:
            buffered = self.streams[conn_id]
            if len(buffered) >= 10:
                length, stream_id, message_type, flags = struct.unpack(">IIBB", buffered[:10])
                if len(buffered) >= 10 + length:
                    self.streams[conn_id] = buffered[10 + length:]
                    return stream_id, message_type, flags, buffered[10:10 + length]
            while len(self.trunk) >= 8 and len(self.trunk) >= 8 + struct.unpack(">I", self.trunk[4:8])[0]:
                frame_conn, length = struct.unpack(">II", self.trunk[:8])
                self.frames_written.append((frame_conn, length))
                self.streams[frame_conn] += self.trunk[8:8 + length]
                self.trunk = self.trunk[8 + length:]
                break
            else:
                chunk = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
                assert chunk, "runtime closed the connection"
                self.trunk += chunk


def test_the_bytes_our_runtime_side_writes_decode_with_an_independent_decoder(socket_path: Path) -> None:
    async def scenario() -> None:
        async with runtime(socket_path) as outcomes:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, str(socket_path))
            raw = RawPlugin(sock)
            register = request_pb2.Request(
                service="nri.pkg.api.v1alpha1.Runtime", method="RegisterPlugin",
                payload=nri.RegisterPluginRequest(plugin_name="raw", plugin_idx="05").SerializeToString())
            await raw.send(2, 1, 1, register.SerializeToString())

            stream_id, message_type, flags, data = await raw.receive(2)
            assert (stream_id, message_type, flags) == (1, 2, 0)  # the response, on the request's stream
            registered = request_pb2.Response.FromString(data)
            assert registered.status.code == 0 and nri.Empty.FromString(registered.payload) == nri.Empty()

            stream_id, message_type, flags, data = await raw.receive(1)
            assert (stream_id, message_type, flags) == (1, 1, 0)  # the runtime's first call: odd stream 1
            call = request_pb2.Request.FromString(data)
            assert (call.service, call.method, call.timeout_nano) == (
                "nri.pkg.api.v1alpha1.Plugin", "Configure", 2_000_000_000)
            configure = nri.ConfigureRequest.FromString(call.payload)
            assert (configure.runtime_name, configure.runtime_version, configure.registration_timeout,
                    configure.request_timeout) == ("koord-runtime-proxy", "9.9.9", 5000, 2000)

            answer = request_pb2.Response(payload=nri.ConfigureResponse(
                events=event_mask(nri.RUN_POD_SANDBOX, nri.REMOVE_CONTAINER)).SerializeToString())
            await raw.send(1, 1, 2, answer.SerializeToString())
            session = await outcomes.get()
            assert isinstance(session, PluginSession) and session.plugin_id == "05-raw"
            assert session.subscribed(nri.REMOVE_CONTAINER) and not session.subscribed(nri.CREATE_CONTAINER)

            # The next call takes stream 3; a big one arrives as Go writes it: 4096 bytes, then the rest.
            synchronize = asyncio.create_task(session.synchronize(
                [pod("p")], [nri.Container(id="c", annotations={"big": "y" * 10000})]))
            stream_id, message_type, _, data = await raw.receive(1)
            assert (stream_id, message_type) == (3, 1)
            assert [length for conn, length in raw.frames_written if conn == 1][-2:] == [4096, 10 + len(data) - 4096]
            request = nri.SynchronizeRequest.FromString(request_pb2.Request.FromString(data).payload)
            assert [c.annotations["big"] for c in request.containers] == ["y" * 10000]
            await raw.send(1, 3, 2, request_pb2.Response(
                status={"code": Code.INTERNAL, "message": "plugin failed"}).SerializeToString())
            with pytest.raises(TtrpcError) as failed:
                await synchronize
            assert (failed.value.code, failed.value.message) == (Code.INTERNAL, "plugin failed")
            sock.close()
    run(scenario())


def test_notifications_use_their_own_method_or_state_change_for_plugins_older_than_those_methods(
        socket_path: Path) -> None:
    async def started(plugin: NriPlugin, request: nri.StartContainerRequest) -> nri.StartContainerResponse:
        return nri.StartContainerResponse()

    async def state_change(plugin: NriPlugin, request: nri.StateChangeEvent) -> nri.Empty:
        return nri.Empty()

    async def scenario() -> None:
        events = event_mask(nri.RUN_POD_SANDBOX, nri.START_CONTAINER, nri.REMOVE_CONTAINER)
        async with runtime(socket_path) as outcomes:
            newer = NriPlugin(name="newer", events=events,
                              methods={"StartContainer": (nri.StartContainerRequest, started)})  # type: ignore[dict-item]
            await newer.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession)
            await session.notify(nri.START_CONTAINER, pod("p"), container("c", "p"))
            await session.notify(nri.STOP_POD_SANDBOX, pod("p"))  # not subscribed: not sent
            start, = newer.requests("StartContainer")
            assert (start.pod.name, start.container.name) == ("p", "c")

            older = NriPlugin(name="older", events=events,
                              methods={"StateChange": (nri.StateChangeEvent, state_change)})  # type: ignore[dict-item]
            await older.connect(socket_path)
            session = await outcomes.get()
            assert isinstance(session, PluginSession)
            await session.notify(nri.RUN_POD_SANDBOX, pod("p"), container("ignored", "p"))
            await session.notify(nri.REMOVE_CONTAINER, pod("p"), container("c", "p"))
            changes = older.requests("StateChange")
            assert [(c.event, c.pod.name, c.container.name) for c in changes] == [
                (nri.RUN_POD_SANDBOX, "p", ""), (nri.REMOVE_CONTAINER, "p", "c")]
            assert not session.detached
    run(scenario())
