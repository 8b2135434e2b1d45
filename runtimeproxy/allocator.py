"""glibc malloc tuning for relaying large messages.

A 16 MiB ListContainers answer is copied a few times on its way through gRPC. By
default glibc serves blocks that big with fresh mmap()s and unmaps them on free, so
every such message pays thousands of page faults (measured here: ~14,000 faults and
37 of 44 ms of CPU in the kernel per 16 MiB call). A higher mmap threshold keeps such
buffers in the heap, where they are reused; the trim threshold bounds how much freed
heap is kept instead of being handed back to the kernel at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
# The operator's own glibc settings win.
_ENVIRONMENT_KEYS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def tune_for_large_messages(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Apply the thresholds; False (and nothing changed) off glibc or when the environment sets them."""
    if any(key in os.environ for key in _ENVIRONMENT_KEYS):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    applied = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    log.debug("malloc thresholds: mmap %d, trim %d (%s)", mmap_threshold, trim_threshold,
              "applied" if applied else "refused")
    return applied
