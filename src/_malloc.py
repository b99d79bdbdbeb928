"""Keep freed heap memory for reuse instead of handing it back to the OS (glibc only).

Why: a training step allocates and frees activations of a few MB over and over. With glibc's
defaults freed memory above the trim threshold goes back to the OS and the next allocation
page-faults it in again: about 41k minor page faults per step of the CPU default's race work,
about 1k with these settings. Measured side by side (`python benchmarks/bench_vs_trl.py
--engines project,project@MALLOC_MMAP_THRESHOLD_=33554432@MALLOC_TRIM_THRESHOLD_=1073741824`,
quiet machine, 2 rounds): 1.10x the tokens per second (rounds 1.06, 1.14). Allocation does
not touch arithmetic, so every number is unchanged. The price: the process keeps its peak
heap. Where the user set MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES,
those win and nothing is done here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit on 64-bit
TRIM_THRESHOLD = 1 << 30
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory(environ=os.environ) -> bool:
    """Set glibc's mmap and trim thresholds; True if they were set."""
    if any(key in environ for key in USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt): leave it
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
