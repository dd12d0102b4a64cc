"""``app.allocator``: the server fixes glibc's mmap and trim thresholds in each worker unless the
operator set them (glibc reads ``MALLOC_*_`` at start-up and those win)."""

from __future__ import annotations

import subprocess
import sys

from app.platform import allocator

PROBE = """
import ctypes, ctypes.util, json, sys
from app.platform import allocator
set_here = allocator.fix_thresholds()
# glibc's mallinfo2 cannot report the thresholds; malloc_info's XML does not either. What can be
# seen: a 16 MiB block (under 32 MiB) now comes from the heap, not from mmap: its address lies
# within the heap's range, between sbrk(0) before and after.
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.sbrk.restype = ctypes.c_void_p
libc.malloc.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_ssize_t]
block = libc.malloc(16 << 20)
top = libc.sbrk(0)
print(json.dumps({"set": set_here, "from_heap": block < top}))
"""


def _probe(env: dict) -> dict:
    import json
    import os

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env={**{k: v for k, v in os.environ.items() if k not in allocator.OWN}, **env})
    return json.loads(out.stdout)


def test_thresholds_are_fixed_unless_the_operator_set_them():
    assert _probe({}) == {"set": True, "from_heap": True}  # 16 MiB < the 32 MiB mmap threshold
    assert _probe({"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}) == {"set": False, "from_heap": False}
    assert allocator.fix_thresholds({"MALLOC_TRIM_THRESHOLD_": "1"}) is False
