"""Keep freed memory in the process, so that evaluating chunk after chunk does not make the
kernel zero fresh pages for every result column.

An evaluator of numpy arrays allocates and frees its columns (0.5-1 MB each for a chunk of
65,536-131,072 candidates) again and again. glibc's ``malloc`` serves blocks above its mmap
threshold (128 KiB until it adapts) with fresh ``mmap`` calls and gives them back on
``free``, and hands the top of the heap back to the kernel above its trim threshold; each
time, the next chunk pays a page fault per 4 KiB. A dask nanny makes this much worse: it
starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (dask's
``distributed.nanny.pre-spawn-environ``), which also freezes glibc's adaptive mmap
threshold at 128 KiB, so that a worker spent two thirds of its time in the kernel (measured
on the analytic evaluator, 131,072-candidate chunks: 6.7 us per candidate of which 4.7 us
system time, against 1.8 us with the settings below; ``benchmarks/bench_pipeline.py``).

:func:`keep_freed_memory` sets, once per process, through ``mallopt(3)``: blocks up to
32 MiB come from the heap (the largest column of a 131,072-row chunk is 1 MiB, a chunk's
2-D block is tens of MiB), the heap keeps up to 256 MiB of free memory at its top, and grows
by 64 MiB at a time. The cost is resident memory that stays with the process after a peak,
at most a few hundred MB per worker. Arrow's buffers then come from the same heap
(``pyarrow.system_memory_pool``) rather than from Arrow's bundled mimalloc, which returns
freed pages to the kernel as eagerly (reading back a 10^6-row log to write evaluations.nc:
2.3 s with mimalloc, 1.3 s so). Elsewhere than glibc (macOS, musl) it does nothing.

``pyarrow.set_memory_pool`` reaches what pyarrow allocates itself, not what libarrow takes
from its own C++ default pool: the IPC writer's compressed buffers of a log file (12 MB
per 125,000-row chunk) and compute kernels' scratch kept coming from mimalloc and its
fresh, zeroed pages. That pool is chosen once, from ``ARROW_DEFAULT_MEMORY_POOL``, when
libarrow first allocates; :func:`arrow_on_system_heap` sets the variable where the user
has not, which the ``dse`` program does before it imports anything (so do it yourself,
before importing pyarrow, in a program that calls dse as a library). Every worker started
from the process, forked or spawned, inherits it. 10^6 candidates on 2 workers: 3.7-4.2 s
of kernel time in the whole process tree against 2.4-2.8 s with the variable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3

MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 256 << 20
TOP_PAD_BYTES = 64 << 20

_done: bool | None = None

#: the variable libarrow reads to choose its C++ default memory pool
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def arrow_on_system_heap() -> None:
    """Ask libarrow for the C library's allocator as its default pool (Linux, unless the
    user set :data:`ARROW_POOL_VARIABLE`): effective in this process only if libarrow has
    not allocated yet, and in every process started from it."""
    if sys.platform.startswith("linux"):
        os.environ.setdefault(ARROW_POOL_VARIABLE, "system")


def keep_freed_memory() -> bool:
    """Set glibc's allocator to keep freed memory (see the module's text); True where it
    was set (in this call or an earlier one), False where the C library has no
    ``mallopt`` or refused a value."""
    global _done
    if _done is None:
        _done = _set()
    return _done


def _set() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not all(
        mallopt(param, value) == 1
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
            (M_TOP_PAD, TOP_PAD_BYTES),
        )
    ):
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())  # Arrow's buffers from the same, kept, heap
    return True
