"""What a benchmark run means to a person: throughput, % of cuBLAS and of peak, one line."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kls.bench.graph_timing import GRAPH_LAUNCHES
from kls.bench.job import BenchJob, Timing
from kls.dtypes import lookup_dtype

# Dense tensor-core peaks (TFLOP/s) by device-name fragment and dtype: datasheet numbers.
PEAK_TFLOPS = {
    "H200": {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0},
    "H100": {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0},
    "A100": {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5},
}


UNVERIFIED = '⚠ UNVERIFIED (reference = "none": the result was not checked)'


@dataclass
class BenchReport:
    instance: str
    ok: bool
    message: str = ""
    median_ms: float | None = None
    spread: float | None = None
    samples: int = 0
    tflops: float | None = None
    gbps: float | None = None
    baseline_ms: float | None = None
    pct_of_baseline: float | None = None
    pct_of_peak: float | None = None
    device: dict[str, Any] = field(default_factory=dict)
    clocks: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    source_hash: str = ""
    timestamp: float = 0.0
    previous_ms: float | None = None
    verified: bool = True  # False: reference = "none", timed without checking the result
    method: str = (
        "warm-up >= 1 s; back-to-back launches in batches of 10, each between its own CUDA "
        "events; L2 flushed (2x L2 memset) before each launch, outside the timed region; stop "
        "after >= 1 s and >= 20 samples once (p75-p25)/median <= 1%, or at 2000 samples or "
        "10 s; median reported"
    )

    def __post_init__(self) -> None:
        # A run that failed or never happened verified nothing.
        if not self.ok:
            self.verified = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> BenchReport:
        known = set(BenchReport.__dataclass_fields__)
        return BenchReport(**{k: v for k, v in data.items() if k in known})

    def headline(self) -> str:
        """`⏱ 1.62 ms ±0.4% · 679 TFLOP/s · 99% of cuBLAS · 69% of peak`."""
        if not self.ok or self.median_ms is None:
            return f"✗ {self.message}"
        parts = [f"⏱ {self.median_ms:.3g} ms ±{(self.spread or 0) * 100:.1f}%"]
        if not self.verified:
            parts.insert(0, UNVERIFIED)
        if self.tflops is not None and self.tflops >= 1:
            parts.append(f"{self.tflops:.0f} TFLOP/s")
        elif self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        if self.pct_of_baseline is not None:
            parts.append(f"{self.pct_of_baseline:.0f}% of cuBLAS")
        if self.pct_of_peak is not None:
            parts.append(f"{self.pct_of_peak:.0f}% of peak")
        if self.previous_ms is not None and self.previous_ms > 0:
            change = (self.median_ms - self.previous_ms) / self.previous_ms * 100
            parts.append(f"{change:+.1f}% vs last")
        return " · ".join(parts)


def work(job: BenchJob) -> tuple[float, float]:
    """(floating-point operations, bytes moved at least once) of one launch."""
    out = job.output()
    moved = float(
        sum(t.storage_elements * _element_size(t.dtype) for t in job.tensors.values() if t)
    )
    x = job.tensors.get(job.operands[0]) if job.operands else None
    if job.reference == "gemm" and x is not None:
        m_n = 1
        for s in out.shape:
            m_n *= s
        return 2.0 * m_n * x.shape[-1], moved
    return 0.0, moved


def _element_size(dtype: str) -> int:
    found = lookup_dtype(dtype)
    if found is None:
        raise ValueError(f"unknown dtype {dtype}")
    return found.size


def method_of(timing: Timing) -> str:
    """The timing method in words, with the job's own bounds."""
    stop = (
        f"stop after >= {timing.min_seconds:g} s and >= {timing.min_samples} samples once "
        f"(p75-p25)/median <= {timing.target_spread:.0%}, or at {timing.max_samples} samples or "
        f"{timing.max_seconds:g} s; median reported"
    )
    if timing.method == "graph":
        flushed = (
            "L2 flushed: a write of 2x L2 (at least 256 MiB) before each launch inside the "
            "graph, its own time (a graph of flushes alone) subtracted"
            if timing.flush_l2
            else "L2 warm"
        )
        return (
            f"kernel against kernel: a CUDA graph of {GRAPH_LAUNCHES} launches replayed, a "
            f"sample a replay (its time over the launches); {flushed}; warm-up >= "
            f"{timing.warmup_s:g} s; {stop}"
        )
    flush = (
        "L2 flushed (2x L2 memset) before each launch, outside the timed region"
        if timing.flush_l2
        else "L2 not flushed"
    )
    return (
        f"warm-up >= {timing.warmup_s:g} s; back-to-back launches in batches of 10, each "
        f"between its own CUDA events; {flush}; {stop}"
    )


def build_report(instance: str, job: BenchJob, result: dict[str, Any]) -> BenchReport:
    timing = result["timing"]
    median_ms = float(timing["median"])
    flops, moved = work(job)
    report = BenchReport(
        instance=instance,
        ok=True,
        median_ms=median_ms,
        spread=float(timing["spread"]),
        samples=int(timing["n"]),
        tflops=flops / (median_ms * 1e-3) / 1e12 if flops else None,
        gbps=moved / (median_ms * 1e-3) / 1e9,
        device=result.get("device", {}),
        clocks=result.get("clocks", {}),
        verification=result.get("verification", {}),
        verified=bool(result.get("verified", True)),
        method=method_of(job.timing),
    )
    if not report.verified:
        report.message = UNVERIFIED
    baseline = result.get("baseline") or {}
    if baseline.get("available"):
        report.baseline_ms = float(baseline["timing"]["median"])
        report.pct_of_baseline = report.baseline_ms / median_ms * 100
    peak = _peak(str(report.device.get("name", "")), job.output().dtype)
    if peak and report.tflops:
        report.pct_of_peak = report.tflops / peak * 100
    return report


def _peak(device: str, dtype: str) -> float | None:
    for fragment, table in PEAK_TFLOPS.items():
        if fragment in device:
            return table.get(dtype)
    return None
