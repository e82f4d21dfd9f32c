"""What the benchmark worker's two kinds of kernel share: a stage's failure, and a kernel
ready to launch (a built library's entry, or a rendered module's kernel: kls.bench.module)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kls.bench.reference import HostTensor


class StageError(Exception):
    """A stage of the run failed (setup, load, run, verify, ...); the result says which."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass
class Prepared:
    """A kernel ready to launch on the job's tensors: their host copies, device pointers (of
    each tensor's storage), the launch, and what the result says about the setup."""

    host: dict[str, HostTensor]
    pointers: dict[str, int]
    launch: Callable[[], None]
    details: dict[str, Any]
    # A reference computed on the GPU from the kernel's own inputs (flex): the output's
    # expected values in logical order, asked for after the first launch.
    expected: Callable[[], np.ndarray] | None = None
