"""Test helpers for the Docker relay: a scripted fake dockerd, a raw HTTP client, a proxy runner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import h11

from runtimeproxy.activation import InheritedSockets
from runtimeproxy.docker.interception import Interceptor, PassThrough
from runtimeproxy.app import Proxy
from runtimeproxy.docker.server import DockerFrontend
from runtimeproxy.options import ProxyOptions

WAIT_SECONDS = 10.0  # bound for every wait in these tests (never an assertion on time)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class FakeDockerd:
    """A unix-socket server whose per-connection behaviour is a test's coroutine."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self.handler = handler
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        finally:
            writer.close()

    async def __aenter__(self) -> FakeDockerd:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """The raw request or response head, up to and including the blank line."""
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_SECONDS)


def header_lines(head: bytes) -> list[bytes]:
    return head.split(b"\r\n")[1:-2]


def docker_mode_proxy(options: ProxyOptions, interceptor: Interceptor | None = None,
                      inherited: InheritedSockets | None = None) -> Proxy:
    """The proxy process around a Docker frontend, whatever options.backend_mode says (interceptor None: the
    real hooks); `inherited`: the sockets systemd would pass."""
    return Proxy(options, lambda options, hooks: DockerFrontend(options, hooks, interceptor), inherited)


@contextlib.asynccontextmanager
async def docker_proxy(tmp_path: Path, interceptor: Interceptor | None = None) -> AsyncIterator[Path]:
    """A Docker-mode proxy on tmp_path/proxy.sock relaying to tmp_path/dockerd.sock; yields its socket.
    Without hooks by default (the fake counts connections; the hooks' own store rebuild would add one)."""
    options = ProxyOptions(listen_path=tmp_path / "proxy.sock", runtime_path=tmp_path / "dockerd.sock",
                           backend_mode="Docker", hook_config_dir=tmp_path / "hooks")
    proxy = docker_mode_proxy(options, interceptor or PassThrough())
    await proxy.start()
    try:
        yield options.listen_path
    finally:
        await proxy.stop(0)


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   raw_request: bytes) -> tuple[h11.Response, bytes]:
    """Send a raw request; parse the whole answer with h11 (as a client)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))  # mirror framing state
    conn.send(h11.EndOfMessage())
    writer.write(raw_request)
    await writer.drain()
    response: h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await asyncio.wait_for(reader.read(65536), WAIT_SECONDS))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            assert response is not None
            return response, body
