"""glibc malloc's mmap and trim thresholds, fixed instead of adjusted as it goes.

By default glibc serves an allocation from the heap unless it is over the mmap threshold, which
starts at 128 KiB and rises to the size of each mmapped block freed (up to 32 MiB); memory freed
in the heap stays in the process until the heap's top holds twice that much free. A service that
allocates arrays of every size from kilobytes to hundreds of megabytes then keeps freed memory it
cannot reuse, and the hot path's speed swings between runs (figures in docs/benchmarks.md,
"Fixed allocator thresholds"). With them, a block of 32 MiB or more is mmapped and returned
when freed, and the heap is trimmed once its top holds 64 MiB free. An operator's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (glibc reads them at start-up) win; on
another C library nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def fix_thresholds(environ=os.environ) -> bool:
    """Set the thresholds in this process; whether they were set (not where the environment sets
    its own, or the C library has no ``mallopt``)."""
    if any(name in environ for name in OWN):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
