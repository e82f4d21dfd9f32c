"""References computed on the CPU in float64 from the exact inputs the kernel read.

Tensors are flat storage arrays plus (shape, stride, offset), exactly as on the device, so a
reference follows the instance's layouts (a column-major output is read column-major).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, overload

import numpy as np

from kls.bench.job import TensorJob
from kls.bench.numerics import (
    STORAGE,
    TOLERANCE,
    Verification,
    compare,
    to_float64,
    uniform_storage,
)
from kls.suggest import did_you_mean


@dataclass
class HostTensor:
    spec: TensorJob
    storage: np.ndarray

    @classmethod
    def seeded(cls, spec: TensorJob, rng: np.random.Generator) -> HostTensor:
        """The host data of a tensor about to be uploaded: an input's seeded uniform data
        (never zeros), an output's storage left unset (the kernel writes it)."""
        n = spec.storage_elements
        if spec.is_output:
            return cls(spec, np.empty(n, dtype=STORAGE[spec.dtype]))
        return cls(spec, uniform_storage(n, spec.dtype, rng))

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


# -- the user's own reference: reference = "file.py:function" in kls.toml -----------------------
# Runs only in the benchmark worker (a separate process, started by an explicit `kls bench` or
# the Benchmark lens of a trusted workspace), never in kls itself: it is the project's code.


class UserReferenceError(Exception):
    """The user's reference could not be loaded, raised, or returned the wrong thing."""


def is_user_reference(reference: str) -> bool:
    return ":" in reference and reference.rpartition(":")[0].endswith(".py")


def load_reference(reference: str) -> Callable[..., Any]:
    """The function `name` of `/abs/file.py:name`, imported from that file (its folder first on
    sys.path, so it may import its neighbours)."""
    import importlib.util
    import sys

    file, _, name = reference.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"kls_reference_{abs(hash(file))}", file)
    if spec is None or spec.loader is None:
        raise UserReferenceError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(file).parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserReferenceError(f"importing {Path(file).name} raised {_describe(exc)}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        hint = did_you_mean(name, names)
        raise UserReferenceError(f"{Path(file).name} defines no function '{name}'{hint}")
    return function  # type: ignore[no-any-return]


def _describe(exc: BaseException) -> str:
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def as_numpy(t: HostTensor) -> np.ndarray:
    """A read-only view with the tensor's shape and strides: its own dtype, except bf16 (NumPy
    has none), given as float32 holding the exact bf16 values."""
    values = t.storage
    if t.spec.dtype == "bfloat16":
        values = to_float64(t.storage, "bfloat16").astype(np.float32)
    itemsize = values.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        values[t.spec.offset :],
        shape=tuple(t.spec.shape),
        strides=tuple(s * itemsize for s in t.spec.stride),
        writeable=False,
    )
    return view


def call_reference(
    function: Callable[..., Any], inputs: list[HostTensor], outputs: list[HostTensor]
) -> list[np.ndarray]:
    """Call `function(*inputs)` (the instance's input tensors, in kls.toml order) and return one
    float64 array per output: it may return an array (one output), a tuple/list in the outputs'
    order, or a dict by output name."""
    try:
        returned = function(*[as_numpy(t) for t in inputs])
    except Exception as exc:
        raise UserReferenceError(f"the reference raised {_describe(exc)}") from exc
    names = [t.spec.name for t in outputs]
    if isinstance(returned, dict):
        missing = [n for n in names if n not in returned]
        if missing:
            raise UserReferenceError(f"the reference's dict has no output {', '.join(missing)}")
        values = [returned[n] for n in names]
    elif isinstance(returned, (tuple, list)) and len(outputs) > 1:
        values = list(returned)
    else:
        values = [returned]
    if len(values) != len(outputs):
        raise UserReferenceError(
            f"the reference returned {len(values)} value(s) for {len(outputs)} output(s) "
            f"({', '.join(names)})"
        )
    out: list[np.ndarray] = []
    for t, value in zip(outputs, values):
        try:
            array = np.asarray(value, dtype=np.float64)
            out.append(np.broadcast_to(array, tuple(t.spec.shape)))
        except (TypeError, ValueError) as exc:
            shape = getattr(value, "shape", type(value).__name__)
            raise UserReferenceError(
                f"the reference's value for {t.spec.name} ({shape}) does not fit its shape "
                f"{tuple(t.spec.shape)}: {exc}"
            ) from exc
    return out


class _Indices(Sequence[list[int]]):
    """Logical indices of a shape, made on demand (a 64M-element output has no index list)."""

    def __init__(self, shape: list[int]) -> None:
        self.shape = tuple(shape)
        self.size = int(np.prod(shape)) if shape else 1

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> list[int]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[list[int]]: ...
    def __getitem__(self, i: int | slice) -> list[int] | Sequence[list[int]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        return [int(x) for x in np.unravel_index(i, self.shape)]


def verify_user(
    function: Callable[..., Any],
    inputs: list[HostTensor],
    outputs: list[HostTensor],
    tolerance: float | None,
    unwritten: int = 0,
) -> Verification:
    """Every element of every output against the user's reference; the worst output's result
    (the first that fails)."""
    expected = call_reference(function, inputs, outputs)
    results = [verify_expected(t, want, tolerance, unwritten) for t, want in zip(outputs, expected)]
    failing = [v for v in results if not v.ok]
    return failing[0] if failing else max(results, key=lambda v: v.max_error)


def verify_expected(
    t: HostTensor, want: np.ndarray, tolerance: float | None, unwritten: int = 0
) -> Verification:
    """Every element of output `t` against `want` (its values in logical order)."""
    got = np.asarray(as_numpy(t), dtype=np.float64).reshape(-1)  # logical order
    limit = tolerance if tolerance is not None else TOLERANCE[t.spec.dtype]
    indices = cast(list[list[int]], _Indices(t.spec.shape))
    return compare(got, want.reshape(-1), indices, limit, unwritten)


# -- references the worker computes on the GPU from the kernel's own tensors (torch there) ------
# "flex": torch's flex_attention with the instance's mods (kls.bench.flex), for the forward.
GPU_REFERENCES = frozenset({"flex"})
# Kernels whose profile names a reference kls does not have yet: a benchmark says what to do.
_NONE_FOR_NOW = 'reference = "none" times it without verifying'
PENDING_REFERENCES: dict[str, str] = {
    "flex_decoding": (
        "flex_decoding has no built-in reference in kls yet: its kernel writes each split's "
        "unnormalised partial output ([B, SPLIT_KV, H, Sq, D]) that Inductor reduces after it; "
        + _NONE_FOR_NOW
    ),
    "flex_attention_backward": (
        "flex_attention_backward has no built-in reference in kls yet (its kernel writes the "
        "gradients); " + _NONE_FOR_NOW
    ),
    "flex_per_head": (
        "this flex instance's mask_mod reads the batch or head index (or kls cannot tell): "
        "kls renders it with one block mask, batch 0 and head 0's, which the kernel applies "
        "to every head, so torch's flex_attention is no reference for it; " + _NONE_FOR_NOW
    ),
}
