"""How many nvcc runs may go at once on this machine."""

from __future__ import annotations

import os

# One SM90 CUTLASS translation unit peaks at ~2 GB in nvcc 13.0 (measured).
NVCC_PEAK_BYTES = 2 * 1024**3


def default_limit() -> int:
    """Parallel nvcc runs, bounded by cores and by memory (kls check --compile, the language
    server's compile jobs)."""
    cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        by_memory = max(1, int(memory / NVCC_PEAK_BYTES))
    except (ValueError, OSError, AttributeError):
        by_memory = cores
    return max(1, min(cores, by_memory))
