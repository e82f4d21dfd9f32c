"""The job a worker runs and the result it returns: plain JSON-able data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TensorJob:
    name: str
    shape: list[int]
    stride: list[int]
    dtype: str  # canonical dtype name (kls.dtypes)
    offset: int = 0
    is_output: bool = False

    @property
    def storage_elements(self) -> int:
        if any(s == 0 for s in self.shape):
            return 0
        return self.offset + 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))


@dataclass
class Timing:
    warmup_s: float = 1.0
    min_samples: int = 20
    min_seconds: float = 1.0  # of timed work, so the clocks are at their loaded steady state
    max_samples: int = 2000
    target_spread: float = 0.01  # (p75 - p25) / median
    max_seconds: float = 10.0
    flush_l2: bool = True
    # "events": each launch between its own CUDA events, batches of 10; "graph": a CUDA graph
    # of launches replayed, a sample a replay (kls.bench.graph_timing: kernel against kernel).
    method: str = "events"


@dataclass
class BenchJob:
    library: str
    symbol: str
    params: list[str]  # buffer names in C-parameter order (what input_reorder produced)
    tensors: dict[str, TensorJob | None]
    reference: str  # "gemm", "softmax", "none" (time only) or "/abs/file.py:function"
    alpha: float = 1.0
    beta: float = 0.0
    seed: int = 0
    samples: int = 256  # output elements (gemm) or rows (softmax) to verify
    timing: Timing = field(default_factory=Timing)
    baseline: bool = True
    # torch-2.11: what the entry takes after the pointers, as Inductor's call_kernel passes it:
    # [C type, value] for M, N, K, B, lda..ldd, each buffer's offset, then runtime args.
    extra_args: list[list[Any]] = field(default_factory=list)
    tolerance: float | None = None  # max relative error; None: by the output's dtype
    # The gemm reference's and the cuBLAS baseline's tensors: X, W, then the optional Bias.
    operands: list[str] = field(default_factory=lambda: ["X", "W", "Bias"])
    # A rendered Python module the worker launches itself (the triton profile: its text,
    # kernel, tensors in argument order and Inductor's launch arguments; kls.bench.module),
    # in place of a built library's entry. None: library and symbol.
    module: dict[str, Any] | None = None
    measure: bool = True  # False: one verified launch, nothing timed (under compute-sanitizer)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> BenchJob:
        tensors = {k: TensorJob(**v) if v is not None else None for k, v in data["tensors"].items()}
        timing = Timing(**data.get("timing", {}))
        rest = {k: v for k, v in data.items() if k not in ("tensors", "timing")}
        return BenchJob(tensors=tensors, timing=timing, **rest)

    def output(self) -> TensorJob:
        outs = [t for n in self.params if (t := self.tensors.get(n)) is not None and t.is_output]
        if not outs:
            raise ValueError("the kernel has no output parameter")
        return outs[-1]
