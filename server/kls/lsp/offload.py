"""Work that must not run on the event loop: checks, renders, parses, config loads.

A dedicated thread pool, larger than asyncio's default (`cores + 4`): its threads mostly wait on
render worker processes, so a handful of pathological documents waiting out their deadline
cannot leave other documents' checks or a hover queued behind them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
THREADS = 32

_EXECUTOR = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="kls-offload")


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `fn` in the offload pool and await its result."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_EXECUTOR, functools.partial(fn, *args, **kwargs))


def submit(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
    """Start `fn` in the offload pool (from any thread) without waiting for it."""
    return _EXECUTOR.submit(fn, *args, **kwargs)
