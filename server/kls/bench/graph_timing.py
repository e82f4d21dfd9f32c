"""The kernel-against-kernel timing method, defined once: every side of a comparison (a kls
kernel, Inductor's choice, cuBLAS) is timed with it, in one run.

- **L2 warm**: a CUDA graph of N launches, replayed; the per-launch time is the replay's time
  over N. A compiled function's Python launch overhead is not in it (the graph replays kernels
  only), so a wrapper pays nothing a bare kernel does not.
- **L2 flushed**: a graph of N (flush, launch) pairs, where the flush writes a buffer larger
  than L2; a graph of N flushes alone is timed the same way, and its per-launch time is
  subtracted.

`kls bench --method graph` and `kls tune --method graph` time the kernel and its cuBLAS
baseline this way (`graph_batch`, one replay a sample, inside the benchmark's own sampling
loop); the comparison scripts in benchmarks/ use `l2_warm` and `l2_flushed`. Runs in the
benchmark worker or a benchmark script (torch on a GPU), never in kls itself.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLUSH_BYTES = 256 * 1024 * 1024  # an H200's L2 is 50 MiB
GRAPH_LAUNCHES = 20  # launches a replay of the benchmark's graph holds


@dataclass(frozen=True)
class GraphTiming:
    """Per-launch microseconds over the replays: median, min, max."""

    median_us: float
    min_us: float
    max_us: float

    def as_list(self) -> list[float]:
        return [round(self.median_us, 3), round(self.min_us, 3), round(self.max_us, 3)]


def capture(torch: Any, body: Callable[[], None], launches: int, stream: Any = None) -> Any:
    """A graph of `launches` calls of `body`, captured on `stream` (torch's own side stream
    when None): a launch that goes to a stream of its own (a library entry given the
    benchmark worker's stream) is captured only when `stream` is that one."""
    body()  # warm: compiles, autotunes, allocates outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(launches):
            body()
    return graph


def replay_ms(torch: Any, graph: Any, launches: int, stream: Any = None) -> float:
    """One replay's time over its launches, in milliseconds."""
    where = stream if stream is not None else torch.cuda.current_stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(where):
        start.record()
        graph.replay()
        end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / launches


def flusher(torch: Any, nbytes: int) -> Callable[[], None]:
    """A kernel that writes `nbytes` (more than L2 holds)."""
    scratch = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    return lambda: scratch.fill_(1.0)


def graph_batch(
    launch: Callable[[], None], flush_l2: bool, flush_bytes: int, stream_handle: int | None = None
) -> Callable[[bool], list[float]]:
    """A `batch(timed)` for the benchmark's sampling loop (kls.bench.worker.sample_batches):
    each call replays a graph of GRAPH_LAUNCHES launches and, timed, returns its per-launch
    milliseconds (L2 flushed: with the flush's own per-launch time, measured alone, taken
    off). `stream_handle` is the stream the launch itself uses, if it picks one."""
    import torch

    stream = torch.cuda.ExternalStream(stream_handle) if stream_handle else None
    flush_cost = 0.0
    body = launch
    if flush_l2:
        flush = flusher(torch, flush_bytes)

        def body() -> None:
            flush()
            launch()

        alone = capture(torch, flush, GRAPH_LAUNCHES, stream)
        flush_cost = statistics.median(
            replay_ms(torch, alone, GRAPH_LAUNCHES, stream) for _ in range(5)
        )
    graph = capture(torch, body, GRAPH_LAUNCHES, stream)

    def batch(timed: bool) -> list[float]:
        ms = replay_ms(torch, graph, GRAPH_LAUNCHES, stream)
        return [ms - flush_cost] if timed else []

    return batch


def _replays(torch: Any, graph: Any, launches: int, repeats: int) -> list[float]:
    graph.replay()
    torch.cuda.synchronize()
    return [replay_ms(torch, graph, launches) * 1000.0 for _ in range(repeats)]


def _summary(times: list[float]) -> GraphTiming:
    return GraphTiming(statistics.median(times), min(times), max(times))


def l2_warm(fn: Callable[[], None], launches: int = 100, repeats: int = 15) -> GraphTiming:
    import torch

    return _summary(_replays(torch, capture(torch, fn, launches), launches, repeats))


def l2_flushed(fn: Callable[[], None], launches: int = 50, repeats: int = 15) -> GraphTiming:
    import torch

    flush = flusher(torch, FLUSH_BYTES)

    def both() -> None:
        flush()
        fn()

    with_flush = _replays(torch, capture(torch, both, launches), launches, repeats)
    alone = _replays(torch, capture(torch, flush, launches), launches, repeats)
    flush_us = statistics.median(alone)
    return _summary([t - flush_us for t in with_flush])
