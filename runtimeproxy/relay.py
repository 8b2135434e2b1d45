"""A gRPC server on a socket it did not bind: the inherited socket's connections relayed to a private one.

grpcio binds the addresses it is given and has no way to serve an fd already listening (grpc-core's systemd
support is compiled only with libsystemd, which the published wheels leave out; its passive listener and
external-connection hooks are C++ only). So under socket activation a gRPC server binds a private socket beside
the public one (`.<name>.relay`, mode 0600, in the same trusted directory; any stale one is removed, the public
socket's lock serialises its users) and `SocketRelay` accepts on the inherited socket and copies bytes both ways.
Asyncio protocols with flow control both ways: a slow side pauses reading from the other, nothing is buffered
without bound. Stopping closes only the proxy's copy of the inherited socket: systemd's keeps it listening, so
connections made while the proxy restarts wait in its backlog for the next process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runtimeproxy.endpoints import grpc_target
from runtimeproxy.listener import KEEP_SOCKET_FILE, bind_unix_socket, listen_backlog, restrictive_umask

if TYPE_CHECKING:
    import grpc.aio

log = logging.getLogger(__name__)

RELAY_SOCKET_MODE = 0o600  # the proxy's own user only: it is the public socket's back door
# After the gRPC server closed its connections: how long the relay may take to pass on what it still holds (the
# last answers, gRPC's GOAWAY) before the process exits and the kernel drops it.
RELAY_DRAIN_SECONDS = 2.0


def relay_path_for(public_path: Path) -> Path:
    return public_path.with_name(f".{public_path.name}.relay")


class _Side(asyncio.Protocol):
    """One side of a relayed connection: what it receives goes to its peer; a full peer pauses it."""

    def __init__(self, on_lost: Callable[[_Side], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self._on_lost = on_lost  # told once this side's connection is closed, its writes flushed
        self._early: list[bytes] = []  # the client's first bytes, before the private socket answered
        self._early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def join(self, peer: _Side) -> None:
        """Link both ways and hand over what either side received before the other existed."""
        self.peer, peer.peer = peer, self
        self._flush_early()
        peer._flush_early()

    def _flush_early(self) -> None:
        assert self.peer is not None and self.peer.transport is not None
        target = self.peer.transport
        for data in self._early:
            target.write(data)
        self._early.clear()
        if self._early_eof and target.can_write_eof():
            target.write_eof()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool:
        if self.peer is None:
            self._early_eof = True
            return True
        peer_transport = self.peer.transport
        if peer_transport is not None and peer_transport.can_write_eof() and not peer_transport.is_closing():
            peer_transport.write_eof()
            return True  # the other direction may still carry an answer
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_lost is not None:
            self._on_lost(self)
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()  # after what it still buffers is written

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class SocketRelay:
    """Accepts on `inherited` and joins each connection to a new one to `private_path`."""

    def __init__(self, inherited: socket.socket, private_path: Path) -> None:
        self._inherited = inherited
        self.private_path = private_path
        self._server: asyncio.Server | None = None
        self._joining: set[asyncio.Task[None]] = set()
        self._clients: set[_Side] = set()  # accepted connections not closed yet

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._accepted, sock=self._inherited, backlog=listen_backlog(),
                                                     **KEEP_SOCKET_FILE)

    def _accepted(self) -> _Side:
        client = _Side(on_lost=self._client_lost)
        self._clients.add(client)
        task = asyncio.get_running_loop().create_task(self._join(client))
        self._joining.add(task)
        task.add_done_callback(self._joining.discard)
        return client

    async def _join(self, client: _Side) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_unix_connection(_Side, str(self.private_path))
        except OSError as error:
            log.warning("cannot relay a connection to %s: %s", self.private_path, error)
            if client.transport is not None:
                client.transport.close()
            return
        if client.transport is None or client.transport.is_closing():
            assert upstream.transport is not None
            upstream.transport.close()
            return
        client.join(upstream)

    def _client_lost(self, client: _Side) -> None:
        self._clients.discard(client)

    async def drain(self, seconds: float) -> None:
        """Wait (up to `seconds`) for the relayed connections the gRPC server has closed to be closed towards the
        client too, with their last bytes (final answers, GOAWAY) written: the process must not exit on them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline and any(client.transport is not None and client.transport.is_closing()
                                             for client in self._clients):
            await asyncio.sleep(0.01)

    async def stop_accepting(self) -> None:
        """Close the proxy's copy of the inherited socket; connections already accepted are joined first (the
        private socket still listens), then go on until their server closes them."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._joining:
            await asyncio.gather(*self._joining, return_exceptions=True)


class SocketFront(Protocol):
    """What accepts on the public socket and feeds the gRPC server's private one (SocketRelay, or the CRI
    frontend's frame relay, runtimeproxy.cri.framerelay)."""

    async def start(self) -> None: ...

    async def stop_accepting(self) -> None: ...

    async def drain(self, seconds: float) -> None: ...


FrontFactory = Callable[[socket.socket, Path], SocketFront]  # (listening public socket, private path)


class GrpcListenSocket:
    """Where a gRPC server listens: its public path, bound by gRPC with `mode` from birth; or, given the
    socket systemd passed for that path, a private socket fed by a SocketRelay from it; or, given a `front`,
    a private socket fed by that front, which accepts on the inherited socket or on the public path it binds."""

    def __init__(self, public_path: Path, mode: int, inherited: socket.socket | None = None,
                 front: FrontFactory | None = None) -> None:
        self.public_path = public_path
        self._mode = mode
        self._inherited = inherited is not None
        private = relay_path_for(public_path)
        self._relay: SocketFront | None = None
        self._private_path: Path | None = None
        if front is not None:
            listening = inherited if inherited is not None else bind_unix_socket(public_path, mode)[0]
            self._relay, self._private_path = front(listening, private), private
        elif inherited is not None:
            self._relay, self._private_path = SocketRelay(inherited, private), private

    @property
    def inherited(self) -> bool:
        return self._inherited

    def bind(self, server: grpc.aio.Server) -> None:
        """add_insecure_port on the path gRPC serves (the caller holds the public socket's lock)."""
        path, mode = self.public_path, self._mode
        if self._private_path is not None:
            path, mode = self._private_path, RELAY_SOCKET_MODE
            path.unlink(missing_ok=True)  # a predecessor's, killed before it could remove it
        with restrictive_umask(mode):  # the window between bind and chmod
            if not server.add_insecure_port(grpc_target(path)):
                raise RuntimeError(f"cannot listen on {path}")
        os.chmod(path, mode)

    async def start(self) -> None:
        """After the gRPC server started: accept on the inherited socket."""
        if self._relay is not None:
            await self._relay.start()

    async def stop_accepting(self) -> None:
        """Before the gRPC server stops: new connections wait in systemd's backlog for the next process."""
        if self._relay is not None:
            await self._relay.stop_accepting()

    async def drain(self) -> None:
        """After the gRPC server stopped: let the relay pass on what it still holds."""
        if self._relay is not None:
            await self._relay.drain(RELAY_DRAIN_SECONDS)

    def release(self) -> None:
        """After the gRPC server stopped: remove the private socket (the public one is released by its owner)."""
        if self._private_path is not None:
            self._private_path.unlink(missing_ok=True)
