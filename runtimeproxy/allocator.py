"""glibc malloc tuning for relaying large messages.

A 16 MiB ListContainers answer is copied a few times on its way through gRPC. By
default glibc serves blocks that big with fresh mmap()s and unmaps them on free, so
every such message pays thousands of page faults (measured here: ~14,000 faults and
37 of 44 ms of CPU in the kernel per 16 MiB call). A higher mmap threshold keeps such
buffers in the heap, where they are reused; the trim threshold bounds how much freed
heap is kept instead of being handed back to the kernel at once.

The price is memory that stays after large messages (gRPC assembles them from many
small slices in several malloc arenas, which the trim threshold never returns): so once
the proxy has been idle for a moment after serving calls, free heap is handed back with
malloc_trim (IdleTrimmer).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
# One arena: a thread arena's heap is at most 64 MiB, so its free top never exceeds the
# trim threshold and not even malloc_trim hands it back (measured: ~150 MB kept after
# 250 MB messages); the main arena's is.
ARENA_COUNT = 1
# The operator's own glibc settings win.
_ENVIRONMENT_KEYS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


# How often the trimmer looks; a look with no new call since the last one counts as idle.
IDLE_CHECK_INTERVAL_SECONDS = 1.0
# Free heap below this is not worth a trim.
TRIM_WORTHWHILE_BYTES = 8 * 1024 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def free_heap_bytes() -> int | None:
    """Bytes malloc holds free in all arenas (glibc >= 2.33); None where unknown."""
    libc = _libc()
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.fordblks)


def release_free_memory() -> bool:
    """Hand free heap pages of every arena back to the kernel; False off glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


class IdleTrimmer:
    """Trims the heap once calls have been served and then none started for an interval."""

    def __init__(self, calls_started: Callable[[], int]) -> None:
        self._calls_started = calls_started
        self._seen = self._trimmed_at = calls_started()

    def look(self) -> bool:
        """One look: trims (True) if calls were served since the last trim and none started since the last look."""
        now = self._calls_started()
        busy, self._seen = now != self._seen, now
        if busy or now == self._trimmed_at:
            return False
        self._trimmed_at = now
        free = free_heap_bytes()
        if free is not None and free < TRIM_WORTHWHILE_BYTES:
            return False
        release_free_memory()
        log.debug("idle: handed free heap back to the kernel (%s bytes free before)", free)
        return True

    async def run(self) -> None:
        """Look every interval until cancelled (a counter read while nothing happens)."""
        while True:
            await asyncio.sleep(IDLE_CHECK_INTERVAL_SECONDS)
            self.look()


def tune_for_large_messages(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Apply the thresholds and the arena count; False (and nothing changed) off glibc or when the environment sets them."""
    if any(key in os.environ for key in _ENVIRONMENT_KEYS):
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # not glibc (e.g. musl)
        return False
    applied = all([
        mallopt(_M_MMAP_THRESHOLD, mmap_threshold), mallopt(_M_TRIM_THRESHOLD, trim_threshold),
        mallopt(_M_ARENA_MAX, ARENA_COUNT),
    ])
    log.debug("malloc: mmap threshold %d, trim threshold %d, %d arena (%s)", mmap_threshold, trim_threshold,
              ARENA_COUNT, "applied" if applied else "refused")
    return applied
