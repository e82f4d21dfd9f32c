"""The tuning worker: one process on the GPU that verifies, then times, candidate after
candidate, with `kls bench`'s harness (kls.bench.worker: the driver calls, the entry-point
protocol, the poison, the float64 reference, the timing loop, the cuBLAS baseline).

What it adds: it sets up every shape's tensors once (seeded uniform[-1, 1] data, uploaded
once), then answers requests, one JSON line each way, so hundreds of (library, shape,
runtime-argument) timings cost no process start and no re-upload. A torch-2.11 library takes
the shape and swizzle at each call, so one library serves every request for its op.

Protocol (stdin/stdout, one JSON object a line): first the setup
`{"shapes": {key: {"tensors": {...}}}, "reference", "alpha", "beta", "seed", "samples"}`,
answered by `{"ready": true, "device": {...}}`; then requests
`{"kind": "candidate", "id", "shape", "library", "symbol", "params", "extra_args", "timing"}`
or `{"kind": "baseline", "id", "shape", "timing"}`, each answered by `{"id", "ok", ...}`.
After a failure that can leave the CUDA context broken (a faulting launch) the answer carries
`"fatal": true` and the worker exits; the parent starts a new one for the next request.
C code that prints to stdout cannot corrupt the protocol: fd 1 is moved to stderr.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from kls.bench import marshal
from kls.bench.job import BenchJob, TensorJob, Timing
from kls.bench.launch import StageError
from kls.bench.reference import HostTensor, verify_gemm
from kls.bench.stats import summarize
from kls.bench.worker import (
    FLUSH_MIN_BYTES,
    Cuda,
    check_rc,
    count_unwritten,
    cublas_baseline,
    describe_failure,
    load_entry,
    poison,
    time_kernel,
    upload_tensors,
)


@dataclasses.dataclass
class Shape:
    job: BenchJob
    host: dict[str, HostTensor]
    pointers: dict[str, int]


class Worker:
    def __init__(self, setup: dict[str, Any]) -> None:
        self.cuda = Cuda()
        self.info = self.cuda.device_info()
        self.rng = np.random.default_rng(int(setup.get("seed", 0)))
        self.samples = int(setup.get("samples", 256))
        self.shapes: dict[str, Shape] = {}
        for key, data in setup["shapes"].items():
            tensors = {
                n: TensorJob(**t) if t is not None else None for n, t in data["tensors"].items()
            }
            job = BenchJob(
                library="",
                symbol="",
                params=[],
                tensors=tensors,
                reference=setup.get("reference", "gemm"),
                alpha=float(setup.get("alpha", 1.0)),
                beta=float(setup.get("beta", 0.0)),
                seed=int(setup.get("seed", 0)),
                samples=self.samples,
            )
            host, pointers = upload_tensors(self.cuda, job, self.rng)
            self.shapes[key] = Shape(job, host, pointers)
        self.flush_bytes = max(2 * int(self.info["l2_bytes"]), FLUSH_MIN_BYTES)
        self.flush = self.cuda.alloc(self.flush_bytes)
        self.entries: dict[tuple[str, str], Callable[..., int]] = {}
        self.workspace = 0
        self.workspace_bytes = 0
        self.nan_count = _device_nan_counter()

    def candidate(self, req: dict[str, Any]) -> dict[str, Any]:
        shape = self.shapes[req["shape"]]
        params: list[str] = req["params"]
        types = [t for t, _ in req["extra_args"]]
        extra = tuple(int(v) for _, v in req["extra_args"])
        key = (req["library"], req["symbol"])
        if key not in self.entries:
            self.entries[key] = load_entry(req["library"], req["symbol"], len(params), types)
        fn = self.entries[key]
        cuda = self.cuda
        size = ctypes.c_size_t(0)
        query = marshal.workspace_query(params, ctypes.addressof(size), cuda.stream_handle, extra)
        check_rc(fn(*query.args()), "workspace query")
        if size.value > self.workspace_bytes:
            self.workspace = cuda.alloc(size.value)
            self.workspace_bytes = size.value
        workspace = self.workspace if size.value else None
        launch = marshal.launch(params, shape.pointers, workspace, cuda.stream_handle, extra)
        job = dataclasses.replace(shape.job, params=params, timing=Timing(**req["timing"]))
        out = job.output()
        poison(cuda, out, shape.pointers)
        check_rc(fn(*launch.args()), "first run")
        try:
            cuda.sync()
        except StageError as exc:
            raise StageError("run", f"the kernel failed on its first run ({exc})") from exc
        verification = self.verify(job, shape)
        result: dict[str, Any] = {
            "id": req["id"],
            "ok": verification.ok,
            "verification": verification.to_json(),
            "workspace_bytes": size.value,
        }
        if not verification.ok:
            result.update(stage="verify", error=describe_failure(verification))
            return result
        samples, clocks = time_kernel(
            cuda,
            lambda: check_rc(fn(*launch.args()), "timed run"),
            job,
            self.flush,
            self.flush_bytes,
        )
        result["timing"] = summarize(samples).to_json()
        result["clocks"] = clocks
        return result

    def verify(self, job: BenchJob, shape: Shape) -> Any:
        out = job.output()
        y = shape.host[out.name]
        ptr = shape.pointers[out.name]
        unwritten = None
        if self.nan_count is not None and out.dtype == "bfloat16":
            dense = int(np.prod(out.shape)) == out.storage_elements - out.offset
            if dense:
                unwritten = self.nan_count(ptr + 2 * out.offset, int(np.prod(out.shape)))
        self.cuda.download(ptr, y.storage)
        if unwritten is None:
            unwritten = count_unwritten(y)
        x, w, bias = shape.host.get("X"), shape.host.get("W"), shape.host.get("Bias")
        if x is None or w is None:
            raise StageError("verify", "a gemm reference needs tensors X and W")
        return verify_gemm(x, w, bias, y, job.alpha, job.beta, job.samples, self.rng, unwritten)

    def baseline(self, req: dict[str, Any]) -> dict[str, Any]:
        shape = self.shapes[req["shape"]]
        job = dataclasses.replace(shape.job, timing=Timing(**req["timing"]))
        found = cublas_baseline(job, shape.host, self.flush_bytes)
        if not found.get("available"):
            return {"id": req["id"], "ok": False, "stage": "baseline", "error": found["reason"]}
        return {"id": req["id"], "ok": True, **found}


def _device_nan_counter() -> Callable[[int, int], int] | None:
    """NaN count of a bf16 buffer on the device (torch, when present): poison or NaN left in
    the output, without copying ~100 MB to the host and scanning it there."""
    try:
        import torch
    except ImportError:
        return None

    class View:
        def __init__(self, ptr: int, n: int) -> None:
            self.__cuda_array_interface__ = {
                "shape": (n,),
                "typestr": "<i2",
                "data": (ptr, False),
                "version": 3,
            }

    def count(ptr: int, n: int) -> int:
        bits = torch.as_tensor(View(ptr, n), device="cuda")
        return int(((bits & 0x7FFF) > 0x7F80).sum().item())

    return count


def serve(stdin: IO[str], out: IO[str]) -> int:
    def emit(value: dict[str, Any]) -> None:
        out.write(json.dumps(value) + "\n")
        out.flush()

    try:
        worker = Worker(json.loads(stdin.readline()))
    except StageError as exc:
        emit({"ready": False, "stage": exc.stage, "error": str(exc)})
        return 0
    except Exception as exc:
        emit({"ready": False, "stage": "setup", "error": f"{type(exc).__name__}: {exc}"})
        return 0
    emit({"ready": True, "device": worker.info, "l2_flush_bytes": worker.flush_bytes})
    for line in stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            if req.get("kind") == "baseline":
                emit(worker.baseline(req))
            else:
                emit(worker.candidate(req))
        except StageError as exc:
            fatal = exc.stage in ("run", "driver")
            emit(
                {
                    "id": req.get("id"),
                    "ok": False,
                    "stage": exc.stage,
                    "error": str(exc),
                    "fatal": fatal,
                }
            )
            if fatal:
                return 0
        except Exception as exc:
            emit(
                {
                    "id": req.get("id"),
                    "ok": False,
                    "stage": "worker",
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                    "fatal": True,
                }
            )
            return 0
    return 0


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the libraries print goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    return serve(sys.stdin, protocol)


if __name__ == "__main__":
    sys.exit(main())
