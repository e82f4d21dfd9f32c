"""`kls check --compile`: nvcc's check mode on every instance, in parallel, for CI.

A type error that only one instance's dtypes make (bf16 arithmetic with a double, say) passes
every check that reads the template and its render; only the compiler sees it. The compiles
run in threads (each waits on its own nvcc process group), at most `default_limit()` at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from kls.compile import CompileOptions, CompileResult, compile_instance
from kls.compile.parallel import default_limit
from kls.instances import InstanceSpec


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
