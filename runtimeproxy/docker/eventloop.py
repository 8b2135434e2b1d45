"""Docker mode's event loop: uvloop's (libuv, C) where it is installed, asyncio's own otherwise.

The relay is socket-bound: per exchange a few reads and writes, and per exec or attach a fresh client
connection, a fresh connection to dockerd and a tunnel. uvloop does that machinery (transports, the
selector, callbacks) in C; in the benchmark (`python3 -m bench --cases docker`) it took ~17 % off the hop's
CPU per exec round trip. CRI mode keeps asyncio's loop: grpc's aio stack is measured and tested on it.
Docker mode's plugin calls (grpc aio clients) run on uvloop too: grpc aio polls its completion queue from
its own thread and only needs `call_soon_threadsafe` from the loop, which uvloop has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType

_uvloop: ModuleType | None
try:
    import uvloop as _uvloop
except ImportError:  # not installed: asyncio's loop serves, only slower
    _uvloop = None


def docker_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop Docker mode runs on (None: asyncio's default)."""
    return None if _uvloop is None else _uvloop.new_event_loop


def running_loop_name() -> str:
    """For the start-up log line: which loop this is (tests may run the relay on asyncio's)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if _uvloop is not None and isinstance(loop, _uvloop.Loop) else "asyncio"
