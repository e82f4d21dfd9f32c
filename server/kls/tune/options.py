"""What one `kls tune` is told (its options, the timing of each stage) and what its stages
share while it runs (`TuneRun`: the instance, the cancel, the progress, the last run)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kls.bench.job import Timing
from kls.compile import CompileOptions
from kls.instances import InstanceSpec
from kls.tune.resume import Prior

RENDER_SECONDS = 120.0  # a fresh render process first generates the CUTLASS op list
STAGE2_PER_SHAPE = 1
STAGE2_OPS = 6
STAGE2_MAX_OPS = 8  # shapes' own winners may take stage 2 past STAGE2_OPS, up to this
STAGE1_TIMING = Timing(
    warmup_s=0.05, min_samples=20, min_seconds=0.05, max_samples=400, target_spread=0.02,
    max_seconds=0.15,
)  # fmt: skip
STAGE2_TIMING = Timing(
    warmup_s=0.2, min_samples=40, min_seconds=0.2, max_samples=2000, target_spread=0.01,
    max_seconds=0.6,
)  # fmt: skip


class TuneError(Exception):
    """The tune cannot run at all (bad space, no GPU, no Ray); the message says why."""


class NoGpu(TuneError):
    """No GPU worker could start here: nothing can be timed (a `--build-only` run can)."""


@dataclass
class TuneOptions:
    limit: int | None = None
    build_only: bool = False
    executor: str = "local"  # local | ray
    ray_address: str | None = None
    slots: int | None = None  # local pool size (default: from cores and free memory)
    compile: CompileOptions = field(default_factory=lambda: CompileOptions(mode="build"))
    stage1: Timing = field(default_factory=lambda: dataclasses.replace(STAGE1_TIMING))
    stage2: Timing = field(default_factory=lambda: dataclasses.replace(STAGE2_TIMING))
    stage2_per_shape: int = STAGE2_PER_SHAPE
    stage2_ops: int = STAGE2_OPS
    worker: list[str] | None = None  # another GPU worker command (tests use stand-ins)
    resume: bool = False  # reuse the last run's measurements (kls.tune.resume)
    seed: int = 0
    timeout_s: float = 120.0  # per GPU request


@dataclass
class Progress:
    phase: str
    builds_done: int = 0
    builds_failed: int = 0
    builds_total: int = 0
    timed: int = 0
    timed_failed: int = 0
    timed_total: int = 0
    best: str = ""

    def line(self) -> str:
        parts = [
            f"builds {self.builds_done}/{self.builds_total}"
            + (f" ({self.builds_failed} failed)" if self.builds_failed else "")
        ]
        if self.timed_total:
            parts.append(
                f"timed {self.timed}/{self.timed_total}"
                + (f" ({self.timed_failed} failed)" if self.timed_failed else "")
            )
        if self.best:
            parts.append(f"best {self.best}")
        return f"{self.phase}: " + " · ".join(parts)


class TuneRun(Protocol):
    """What the stages of one tune share (kls.tune.runner.Tuner is one)."""

    spec: InstanceSpec
    options: TuneOptions
    cancel: threading.Event
    lock: threading.Lock  # guards the result's lists while stage 1 runs on its thread
    progress: Progress
    say: Callable[[Progress], None]
    prior: Prior | None  # the last run's measurements (--resume)

    def tick(self, ok: bool) -> None:
        """One more GPU request answered."""


def results_folder(spec: InstanceSpec) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in spec.name)
    return spec.config_path.parent / ".kls" / "tune" / safe
