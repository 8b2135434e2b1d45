"""A burst of concurrent raw-bytes calls (asyncio, one or many channels), outcomes tallied."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import grpc

from runtimeproxy.endpoints import grpc_target
from rplab.kinds import Outcome

VERSION_PATH = "/runtime.v1.RuntimeService/Version"


async def _burst(socket: Path, calls: int, channels: int, path: str, timeout: float) -> Counter[Outcome]:
    opened = [grpc.aio.insecure_channel(grpc_target(socket)) for _ in range(channels)]
    tally: Counter[Outcome] = Counter()

    async def one(n: int) -> None:
        try:
            await opened[n % channels].unary_unary(path)(b"", timeout=timeout)
        except grpc.aio.AioRpcError as error:
            tally[(error.code().name, error.details() or "")] += 1
        else:
            tally[("OK", "")] += 1

    try:
        await asyncio.gather(*(one(n) for n in range(calls)))
    finally:
        for channel in opened:
            await channel.close()
    return tally


def burst(socket: Path, calls: int, channels: int = 1, path: str = VERSION_PATH, timeout: float = 60.0) -> Counter[Outcome]:
    """Start `calls` calls at once over `channels` channels (on a fresh event loop) and tally how they ended."""
    return asyncio.run(_burst(socket, calls, channels, path, timeout))
