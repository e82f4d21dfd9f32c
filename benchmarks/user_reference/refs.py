"""References for `kls bench` (kls.toml: reference = "refs.py:NAME"): each gets the inputs as
read-only NumPy arrays in kls.toml order and returns the output."""

import numpy as np


def add(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) + B.astype(np.float64)


def rowsum(X: np.ndarray) -> np.ndarray:
    return X.astype(np.float64).sum(axis=1)


def wrong_rowsum(X: np.ndarray) -> np.ndarray:
    """Deliberately wrong (a mean, not a sum): verification must fail."""
    return X.astype(np.float64).mean(axis=1)
