"""`kls check --compile`: nvcc's check mode on every instance, in parallel, for CI.

A type error that only one instance's dtypes make (bf16 arithmetic with a double, say) passes
every check that reads the template and its render; only the compiler sees it. The compiles
run in threads (each waits on its own nvcc process group), at most `default_limit()` at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from kls.compile import CompileOptions, CompileResult, compile_instance
from kls.instances import InstanceSpec

# One SM90 CUTLASS build peaks at ~2 GB of memory (nvcc 13.0, measured).
NVCC_PEAK_BYTES = 2 * 1024**3


def default_limit() -> int:
    """Parallel nvcc runs: bounded by cores and by memory (the language server's job limit,
    kls.lsp.jobs.default_limit, uses the same bound)."""
    cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        by_memory = max(1, int(memory / NVCC_PEAK_BYTES))
    except (ValueError, OSError, AttributeError):
        by_memory = cores
    return max(1, min(cores, by_memory))


def compile_all(
    instances: Iterable[InstanceSpec],
    options: CompileOptions | None = None,
    limit: int | None = None,
    on_done: Callable[[CompileResult], None] | None = None,
) -> list[CompileResult]:
    """Compile every instance (check mode by default); results in the instances' order."""
    specs = list(instances)
    options = options or CompileOptions(mode="check")
    if not specs:
        return []

    def one(spec: InstanceSpec) -> CompileResult:
        result = compile_instance(spec, options)
        if on_done is not None:
            on_done(result)
        return result

    with ThreadPoolExecutor(max_workers=min(limit or default_limit(), len(specs))) as pool:
        return list(pool.map(one, specs))
