"""Sample statistics and the adaptive stopping rule of the timing loop."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from kls.bench.job import Timing


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p25: float
    p75: float
    minimum: float
    mean: float

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.p75 - self.p25) / self.median if self.median > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "spread": self.spread}


def summarize(samples: list[float]) -> Summary:
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25, p75 = ordered[0], ordered[-1]
    return Summary(
        len(ordered), statistics.median(ordered), p25, p75, ordered[0], statistics.fmean(ordered)
    )


def should_stop(samples: list[float], elapsed_s: float, timing: Timing) -> bool:
    """Stop once the spread is under target with enough samples, or at the caps."""
    if len(samples) >= timing.max_samples or elapsed_s >= timing.max_seconds:
        return True
    if len(samples) < timing.min_samples or elapsed_s < timing.min_seconds:
        return False
    return summarize(samples).spread <= timing.target_spread
