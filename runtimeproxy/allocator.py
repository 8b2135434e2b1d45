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

Above the largest mmap threshold glibc allows (32 MiB) every buffer is a fresh mmap again
(~25,000 page faults per 48 MB message). With transparent huge pages in the kernel's
"madvise" mode, glibc >= 2.35 madvises its heap and mmaps for huge pages when the tunable
glibc.malloc.hugetlb=1 is set, which cuts those faults ~25-fold. Tunables are read only at
process start, so the command re-executes itself once with them (reexec_with_huge_pages).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

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
THP_MODE_PATH = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGETLB_MIN_GLIBC = (2, 35)


# How often the trimmer looks while calls come; a look with no new call since the last one counts as idle.
IDLE_CHECK_INTERVAL_SECONDS = 1.0
# With nothing to do (no call since the last trim) the looks space out, doubling up to this: each wake-up of an
# idle process costs CPU (grpc's event engine threads wake with the loop), and a trim after a short burst
# that follows a long quiet time may come this much later.
IDLE_CHECK_MAX_INTERVAL_SECONDS = 16.0
# Free heap below this is not worth a trim.
TRIM_WORTHWHILE_BYTES = 8 * 1024 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        import ctypes.util  # off the command line's path to the re-exec

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
    """Trims the heap once calls have been served and then none started for an interval.

    Reference cycles are collected first: asyncio keeps a failed write's error in a cycle with that
    write's frames (and their callers' buffers), and an idle process allocates too little to trigger
    the full collection that would free them.
    """

    def __init__(self, calls_started: Callable[[], int]) -> None:
        self._calls_started = calls_started
        self._seen = self._trimmed_at = calls_started()
        self.interval = IDLE_CHECK_INTERVAL_SECONDS  # until the next look

    def look(self) -> bool:
        """One look: trims (True) if calls were served since the last trim and none started since the last look."""
        now = self._calls_started()
        busy, self._seen = now != self._seen, now
        self.interval = IDLE_CHECK_INTERVAL_SECONDS if busy or now != self._trimmed_at else \
            min(self.interval * 2, IDLE_CHECK_MAX_INTERVAL_SECONDS)
        if busy or now == self._trimmed_at:
            return False
        self._trimmed_at = now
        gc.collect()
        free = free_heap_bytes()
        if free is not None and free < TRIM_WORTHWHILE_BYTES:
            return False
        release_free_memory()
        log.debug("idle: handed free heap back to the kernel (%s bytes free before)", free)
        return True

    async def run(self) -> None:
        """Look every interval until cancelled (a counter read while nothing happens)."""
        import asyncio  # the command line imports this module before its re-exec: asyncio waits for the new image

        while True:
            await asyncio.sleep(self.interval)
            self.look()


def tune_for_large_messages(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Apply the thresholds and the arena count; False (and nothing changed) off glibc or when the environment sets them."""
    if operator_set_malloc():
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


def operator_set_malloc() -> bool:
    """The environment sets some glibc malloc setting: then the proxy changes none."""
    return any(key in os.environ for key in _ENVIRONMENT_KEYS)


def huge_page_tunables() -> str:
    """GLIBC_TUNABLES for huge pages plus the same thresholds and arena count tune_for_large_messages sets."""
    settings = {"hugetlb": 1, "mmap_threshold": MMAP_THRESHOLD_BYTES, "trim_threshold": TRIM_THRESHOLD_BYTES,
                "arena_max": ARENA_COUNT}
    return ":".join(f"glibc.malloc.{name}={value}" for name, value in settings.items())


def transparent_huge_page_mode(path: Path = THP_MODE_PATH) -> str | None:
    """The kernel's THP mode ("always", "madvise" or "never"; the bracketed word), None where unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def _glibc_version() -> tuple[int, int] | None:
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (ValueError, OSError):
        return None


def wants_huge_pages_reexec() -> bool:
    """True where a re-exec with huge_page_tunables() would change anything.

    Not when the operator set any malloc setting, not off glibc or below 2.35, and only in
    THP's "madvise" mode ("always" gives the heap huge pages anyway, "never" refuses them).
    """
    if operator_set_malloc():
        return False
    version = _glibc_version()
    return version is not None and version >= HUGETLB_MIN_GLIBC and transparent_huge_page_mode() == "madvise"


def reexec_with_huge_pages() -> None:
    """Re-execute this process's own command line with huge_page_tunables(), where that helps.

    Call it first thing in the command's entry point, before any thread, socket or file is
    open. The new image keeps the pid (systemd and pid files see no change); GLIBC_TUNABLES
    set means the second run goes straight on.

    In the release bundle (PyInstaller onedir, sys.frozen) sys.executable is the bundle's executable, which
    runs in place: the re-exec starts it again in the same process, as for a virtualenv's python.
    """
    if not wants_huge_pages_reexec() or not sys.executable or not getattr(sys, "orig_argv", None):
        return
    environment = {**os.environ, "GLIBC_TUNABLES": huge_page_tunables()}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
