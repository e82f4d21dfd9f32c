"""Host-side data: seeded inputs, element encodings (bf16 has no numpy type), comparisons."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

STORAGE = {  # canonical dtype -> numpy storage type of one element
    "bfloat16": np.uint16,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,  # index tensors (a flex kernel's block mask), filled by the worker
}
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-4, "float64": 1e-10}


def supported(dtype: str) -> bool:
    """A dtype the harness seeds, verifies and times (int32 only as a tensor the worker fills
    itself: a flex kernel's block mask)."""
    return dtype in TOLERANCE


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values -> the element bits the kernel reads (bf16: round to nearest even)."""
    if dtype == "bfloat16":
        bits = values.astype(np.float32).view(np.uint32)
        rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    return values.astype(STORAGE[dtype])


def to_float64(storage: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (storage.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return storage.astype(np.float64)


def uniform_storage(n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Seeded uniform[-1, 1] data (never zeros: zero data runs faster than real data)."""
    return to_storage(rng.uniform(-1.0, 1.0, size=n).astype(np.float32), dtype)


@dataclass(frozen=True)
class Verification:
    ok: bool
    checked: int
    max_error: float  # |out - ref| / max(|ref|, rms(ref)), the worst one
    worst: list[int]  # index of the worst element (per dimension)
    worst_value: float
    worst_expected: float
    tolerance: float
    nan_count: int  # NaNs among checked elements (unwritten outputs are poisoned to NaN)
    unwritten: int = 0  # NaNs anywhere in the output

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare(
    got: np.ndarray,
    expected: np.ndarray,
    indices: list[list[int]],
    tolerance: float,
    unwritten: int = 0,
) -> Verification:
    """Relative error against the reference's scale; any NaN fails."""
    got = got.astype(np.float64)
    scale = max(float(np.sqrt(np.mean(expected**2))) if expected.size else 0.0, 1e-30)
    denom = np.maximum(np.abs(expected), scale)
    err = np.abs(got - expected) / denom
    nans = int(np.count_nonzero(~np.isfinite(got)))
    err = np.where(np.isfinite(got), err, np.inf)
    worst = int(np.argmax(err)) if err.size else 0
    max_error = float(err[worst]) if err.size else 0.0
    ok = nans == 0 and unwritten == 0 and max_error <= tolerance
    return Verification(
        ok=ok,
        checked=int(got.size),
        max_error=max_error,
        worst=indices[worst] if indices else [],
        worst_value=float(got[worst]) if got.size else 0.0,
        worst_expected=float(expected[worst]) if expected.size else 0.0,
        tolerance=tolerance,
        nan_count=nans,
        unwritten=unwritten,
    )
