"""NRI test helpers: the project's NRI plugin (rplab.nri_plugin, re-exported) and in-memory byte streams for unit
tests."""

from __future__ import annotations

import asyncio

from rplab.nri_plugin import NriPlugin, adjusting, bind_mount, host_device, rdt_class, shares, update_shares

__all__ = ["MemoryStream", "NriPlugin", "adjusting", "bind_mount", "host_device", "memory_pipe", "rdt_class", "shares",
           "update_shares"]


class MemoryStream:
    """One end of an in-memory byte stream pair (a ttrpc.ByteStream); `written` keeps every write whole."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.peer: MemoryStream | None = None
        self.written: list[bytes] = []
        self.ended = False

    async def read(self) -> bytes:
        if self.ended and self.inbox.empty():
            return b""
        return await self.inbox.get()

    async def write(self, data: bytes) -> None:
        if self.ended:
            raise ConnectionResetError("stream closed")
        self.written.append(data)
        assert self.peer is not None
        self.peer.inbox.put_nowait(data)

    def feed(self, data: bytes) -> None:
        """Bytes as if the peer had sent them (a hand-built frame)."""
        self.inbox.put_nowait(data)

    def close(self) -> None:
        for end in (self, self.peer):
            if end is not None and not end.ended:
                end.ended = True
                end.inbox.put_nowait(b"")


def memory_pipe() -> tuple[MemoryStream, MemoryStream]:
    left, right = MemoryStream(), MemoryStream()
    left.peer, right.peer = right, left
    return left, right
