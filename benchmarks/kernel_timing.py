"""The one kernel-against-kernel timing method, defined once (every side of a comparison is
timed with it, in one run):

- **L2 warm**: a CUDA graph of N launches, replayed; the per-launch time is the replay's time
  over N. A compiled torch function's Python launch overhead is not in it (the graph replays
  kernels only), so a wrapper pays nothing a bare kernel does not.
- **L2 flushed**: a graph of N (flush, launch) pairs, where the flush writes a buffer larger
  than L2; a graph of N flushes alone is timed in the same way, and its time is subtracted.

Each figure is the median of R replays, with the min and max.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLUSH_BYTES = 256 * 1024 * 1024  # an H200's L2 is 50 MiB


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    max_us: float

    def as_list(self) -> list[float]:
        return [round(self.median_us, 3), round(self.min_us, 3), round(self.max_us, 3)]


def _graph(torch: Any, body: Callable[[], None], launches: int) -> Any:
    body()  # warm: compiles, autotunes, allocates outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            body()
    return graph


def _replays(torch: Any, graph: Any, launches: int, repeats: int) -> list[float]:
    graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1000.0 / launches)
    return out


def _summary(times: list[float]) -> Timing:
    return Timing(statistics.median(times), min(times), max(times))


def l2_warm(fn: Callable[[], None], launches: int = 100, repeats: int = 15) -> Timing:
    import torch

    return _summary(_replays(torch, _graph(torch, fn, launches), launches, repeats))


def l2_flushed(fn: Callable[[], None], launches: int = 50, repeats: int = 15) -> Timing:
    import torch

    scratch = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

    def flush() -> None:
        scratch.fill_(1.0)

    def both() -> None:
        flush()
        fn()

    with_flush = _replays(torch, _graph(torch, both, launches), launches, repeats)
    alone = _replays(torch, _graph(torch, flush, launches), launches, repeats)
    flush_us = statistics.median(alone)
    return _summary([t - flush_us for t in with_flush])
