"""Whether this machine can run a benchmark at all, asked before anything is built: a build
takes 30 s, and without a GPU its result could never be timed."""

from __future__ import annotations

NO_GPU = "no usable NVIDIA GPU/driver"


def gpu_problem() -> str | None:
    """None when cuda-python finds at least one device, else why not (cuInit raises without
    a driver: guarded)."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return f"{NO_GPU}: cuda-python is not importable ({exc})"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:
        return f"{NO_GPU}: {exc}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"{NO_GPU}: cuInit returned {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return f"{NO_GPU}: no device found"
    return None
