"""The reference `kls bench` verifies the kernel against (kls.toml: reference = "refs.py:add").

It runs only on `kls bench`, in kls's benchmark worker process: it gets the instance's input
tensors as read-only NumPy arrays, in kls.toml order, with their shapes and strides (bf16 as
float32 holding the exact bf16 values), and returns the output (or a tuple/dict for several).
"""

import numpy as np


def add(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) + B.astype(np.float64)
