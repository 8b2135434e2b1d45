"""A tiny asyncio HTTP/1.1 server for /metrics, /healthz and /readyz.

Runs on the proxy's event loop (no threads: the series are read from structures the loop
owns), answers GET and HEAD only, one request per connection, and stops with the proxy.
/healthz: the process is up. /readyz: the backend runtime is reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from runtimeproxy.endpoints import parse_bind_address

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 5.0
MAX_REQUEST_HEAD_BYTES = 8192
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}

Page = Callable[[], tuple[int, str, bytes]]  # -> (status, content type, body)


class HttpEndpoint:
    def __init__(self, address: str, pages: dict[str, Page]) -> None:
        self.host, self.port = parse_bind_address(address)
        self._pages = pages
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        log.debug("metrics and health on http://%s:%d (/metrics, /healthz, /readyz)", self.host, self.bound_port)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_SECONDS)
            status, content_type, body, head_only = self._answer(head)
            writer.write(_response(status, content_type, b"" if head_only else body, len(body)))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass  # a client that went away or sent garbage gets nothing more
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[int, str, bytes, bool]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or len(head) > MAX_REQUEST_HEAD_BYTES:
            return 400, "text/plain", b"bad request\n", False
        method, target = parts[0], parts[1].decode("latin-1").split("?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"only GET and HEAD\n", False
        page = self._pages.get(target)
        if page is None:
            return 404, "text/plain", f"not found; try {', '.join(self._pages)}\n".encode(), method == b"HEAD"
        try:
            status, content_type, body = page()
        except Exception as error:  # noqa: BLE001 - a bad page must not end the endpoint
            log.exception("serving %s failed", target)
            return 503, "text/plain", f"error: {error}\n".encode(), method == b"HEAD"
        return status, content_type, body, method == b"HEAD"


def _response(status: int, content_type: str, body: bytes, length: int) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
