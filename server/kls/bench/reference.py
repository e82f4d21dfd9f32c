"""References computed on the CPU in float64 from the exact inputs the kernel read.

Tensors are flat storage arrays plus (shape, stride, offset), exactly as on the device, so a
reference follows the instance's layouts (a column-major output is read column-major).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kls.bench.job import TensorJob
from kls.bench.numerics import TOLERANCE, Verification, compare, to_float64


@dataclass
class HostTensor:
    spec: TensorJob
    storage: np.ndarray

    def gather(self, index: np.ndarray) -> np.ndarray:
        """float64 values at an (n, rank) array of logical indices."""
        flat = self.spec.offset + index @ np.asarray(self.spec.stride, dtype=np.int64)
        return to_float64(self.storage[flat], self.spec.dtype)


def sample_indices(shape: list[int], count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` random logical indices, or every index when the tensor is that small."""
    total = int(np.prod(shape))
    if total <= count:
        return np.array(np.unravel_index(np.arange(total), shape)).T.astype(np.int64)
    flat = rng.choice(total, size=count, replace=False)
    return np.array(np.unravel_index(flat, shape)).T.astype(np.int64)


def verify_gemm(
    x: HostTensor,
    w: HostTensor,
    bias: HostTensor | None,
    y: HostTensor,
    alpha: float,
    beta: float,
    count: int,
    rng: np.random.Generator,
    unwritten: int = 0,
) -> Verification:
    """Y[..., i, j] = alpha * sum_k X[..., i, k] W[..., k, j] + beta * Bias[..., i, j]."""
    idx = sample_indices(y.spec.shape, count, rng)
    k_dim = x.spec.shape[-1]
    ks = np.arange(k_dim, dtype=np.int64)
    expected = np.empty(len(idx))
    for n, index in enumerate(idx):
        batch, i, j = list(index[:-2]), index[-2], index[-1]
        xb = _batch(batch, x.spec.shape)
        wb = _batch(batch, w.spec.shape)
        xi = _line([*xb, i, 0], -1, ks)
        wj = _line([*wb, 0, j], -2, ks)
        value = alpha * float(np.dot(x.gather(xi), w.gather(wj)))
        if bias is not None and beta != 0.0:
            bb = _batch(batch, bias.spec.shape)
            value += beta * float(bias.gather(np.array([[*bb, i, j]], dtype=np.int64))[0])
        expected[n] = value
    got = y.gather(idx)
    return compare(got, expected, idx.tolist(), TOLERANCE[y.spec.dtype], unwritten)


def _line(base: list[int], axis: int, values: np.ndarray) -> np.ndarray:
    """Indices `base` with dimension `axis` running over `values`."""
    out = np.tile(np.asarray(base, dtype=np.int64), (len(values), 1))
    out[:, axis] = values
    return out


def _batch(batch: list[int], shape: list[int]) -> list[int]:
    """Batch indices for a tensor of this rank (missing leading dims broadcast)."""
    extra = len(shape) - 2
    return batch[len(batch) - extra :] if extra > 0 else []


def verify_softmax(
    x: HostTensor, y: HostTensor, rows: int, rng: np.random.Generator, unwritten: int = 0
) -> Verification:
    """Softmax over the last dimension, checked on whole sampled rows."""
    outer = list(y.spec.shape[:-1])
    cols = y.spec.shape[-1]
    row_idx = sample_indices(outer, rows, rng)
    got_all, exp_all, where = [], [], []
    cs = np.arange(cols, dtype=np.int64)
    for row in row_idx:
        full = _line([*row, 0], -1, cs)
        values = x.gather(full)
        e = np.exp(values - values.max())
        exp_all.append(e / e.sum())
        got_all.append(y.gather(full))
        where.extend(full.tolist())
    return compare(
        np.concatenate(got_all), np.concatenate(exp_all), where, TOLERANCE[y.spec.dtype], unwritten
    )
