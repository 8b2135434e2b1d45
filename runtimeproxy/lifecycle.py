"""Running a proxy (either mode) until SIGTERM/SIGINT, then stopping it gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Protocol

log = logging.getLogger("runtimeproxy")


class Stoppable(Protocol):
    async def start(self) -> None: ...

    async def stop(self, grace: float | None = None) -> None: ...


async def run_until_signalled(proxy: Stoppable, grace_seconds: float) -> None:
    """Start `proxy`, wait for SIGTERM or SIGINT, then stop it with the grace period."""
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    try:
        await proxy.start()
    except BaseException:
        await proxy.stop(0)  # a failed start gives back what it took (sockets, their lock files)
        raise
    try:
        await stop_requested.wait()
        log.info("stopping: finishing in-flight calls for up to %.1fs", grace_seconds)
    finally:
        await proxy.stop()
    log.info("stopped")
