"""After a `101` upgrade: raw bytes both ways between the client and dockerd, half-close respected.

Each direction is one pump. When a pump's read side ends (EOF) it shuts the write side of its peer
(`write_eof`), so e.g. stdin EOF reaches the container while its output still flows back; the tunnel
ends when both pumps are done. A connection error on either side ends both.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

READ_CHUNK_BYTES = 64 * 1024


@dataclass
class TunnelEnd:
    """One side of the tunnel: its streams, plus bytes already read from it (and whether it hit EOF)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    early_bytes: bytes = b""
    early_eof: bool = False


async def _pump(source: TunnelEnd, sink: TunnelEnd) -> None:
    if source.early_bytes:
        sink.writer.write(source.early_bytes)
        await sink.writer.drain()
    if not source.early_eof:
        while chunk := await source.reader.read(READ_CHUNK_BYTES):
            sink.writer.write(chunk)
            await sink.writer.drain()
    if sink.writer.can_write_eof() and not sink.writer.is_closing():
        sink.writer.write_eof()


async def run_tunnel(client: TunnelEnd, upstream: TunnelEnd) -> None:
    """Pump both ways until both directions ended, or either side failed."""
    pumps = [asyncio.create_task(_pump(client, upstream)), asyncio.create_task(_pump(upstream, client))]
    try:
        pending: set[asyncio.Task[None]] = set(pumps)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(not task.cancelled() and task.exception() is not None for task in done):
                break  # a side is gone: nothing more can be delivered
    finally:
        for task in pumps:
            task.cancel()
        for task in pumps:
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
