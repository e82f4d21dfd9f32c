"""The benchmark worker: a separate process that loads the library, verifies, then times.

Protocol: a BenchJob as JSON on stdin; one JSON object on the last line of stdout, either
{"ok": true, ...} or {"ok": false, "stage": ..., "error": ...}. A kernel that faults or hangs
takes only this process down; the parent reports it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from kls.bench import marshal
from kls.bench.flex import block_filled
from kls.bench.graph_timing import FLUSH_BYTES
from kls.bench.job import BenchJob, TensorJob, Timing
from kls.bench.launch import Prepared, StageError
from kls.bench.numerics import STORAGE, Verification, supported, to_float64
from kls.bench.reference import (
    GPU_REFERENCES,
    PENDING_REFERENCES,
    HostTensor,
    UserReferenceError,
    is_user_reference,
    load_reference,
    verify_expected,
    verify_gemm,
    verify_softmax,
    verify_user,
)
from kls.bench.stats import should_stop, summarize

FLUSH_MIN_BYTES = FLUSH_BYTES  # the kernel-against-kernel method's own flush


def answer(job: BenchJob) -> dict[str, Any]:
    """The job's result, a failure as its stage and words (never a bare traceback)."""
    try:
        return run(job)
    except StageError as exc:
        return {"ok": False, "stage": exc.stage, "error": str(exc)}
    except Exception as exc:
        return {
            "ok": False,
            "stage": "worker",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }


# Stages after which the process goes on serving: the CUDA context is as good as before.
# After any other (a kernel fault is sticky; a failed capture, an unknown error) it exits and
# the session starts a fresh one for the next job.
RECOVERABLE = frozenset({"setup", "load", "compile", "reference", "verify"})


def serve(stdin: IO[str], out: IO[str]) -> int:
    """Many jobs, one process (`--serve`; kls tune's config search): a setup line answered
    {"ready": ...}, then a job a line, a result a line, each with the job's "id"."""

    def emit(value: dict[str, Any]) -> None:
        out.write(json.dumps(value) + "\n")
        out.flush()

    stdin.readline()  # the setup: nothing to set up beyond the device
    try:
        device = Cuda().device_info()
    except StageError as exc:
        emit({"ready": False, "stage": exc.stage, "error": str(exc)})
        return 0
    emit({"ready": True, "device": device})
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        ident = request.pop("id", None)
        try:
            job = BenchJob.from_json(request)
        except (TypeError, ValueError, KeyError) as exc:
            emit({"id": ident, "ok": False, "stage": "setup", "error": f"bad job: {exc}"})
            continue
        result = answer(job)
        fatal = not result.get("ok") and result.get("stage") not in RECOVERABLE
        emit({**result, "id": ident, "fatal": fatal})
        if fatal:
            return 0
    return 0


def main() -> int:
    if "--serve" in sys.argv[1:]:
        protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # anything a library or a reference prints goes to stderr
        sys.stdout = sys.stderr
        return serve(sys.stdin, protocol)
    try:
        result = answer(BenchJob.from_json(json.loads(sys.stdin.read())))
    except (TypeError, ValueError, KeyError) as exc:
        result = {"ok": False, "stage": "setup", "error": f"bad job: {exc}"}
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


class Cuda:
    """The few driver calls the harness needs, each checked."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise StageError("driver", f"cuda-python is not installed: {exc}") from exc
        self.cu = driver
        try:
            self.call("cuInit", 0)
        except StageError as exc:
            raise StageError(
                "driver",
                f"no usable NVIDIA GPU/driver ({exc}); benchmarks need a machine with an NVIDIA "
                "GPU and its driver",
            ) from exc
        self.device = self.call("cuDeviceGet", 0)
        self.context = self.call("cuDevicePrimaryCtxRetain", self.device)
        self.call("cuCtxSetCurrent", self.context)
        self.stream = self.call("cuStreamCreate", 0)
        self.allocations: list[Any] = []

    def call(self, name: str, *args: Any) -> Any:
        try:
            out = getattr(self.cu, name)(*args)
        except Exception as exc:
            raise StageError("driver", f"{name} raised {type(exc).__name__}: {exc}") from exc
        err, rest = out[0], out[1:]
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, text = self.cu.cuGetErrorString(err)
            detail = text.decode() if isinstance(text, bytes) else str(err)
            raise StageError("driver", f"{name} failed: {detail}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def device_info(self) -> dict[str, Any]:
        attr = self.cu.CUdevice_attribute
        name = self.call("cuDeviceGetName", 256, self.device)
        return {
            "name": name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name),
            "driver": self.call("cuDriverGetVersion"),
            "sm_count": self.call(
                "cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.device
            ),
            "l2_bytes": self.call(
                "cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, self.device
            ),
        }

    def alloc(self, nbytes: int) -> int:
        ptr = self.call("cuMemAlloc", max(nbytes, 1))
        self.allocations.append(ptr)
        return int(ptr)

    def upload(self, ptr: int, host: np.ndarray) -> None:
        self.call("cuMemcpyHtoD", ptr, host.ctypes.data, host.nbytes)

    def download(self, ptr: int, host: np.ndarray) -> None:
        self.call("cuMemcpyDtoH", host.ctypes.data, ptr, host.nbytes)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.call("cuMemsetD8Async", ptr, value, nbytes, self.stream)

    def sync(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    def event(self) -> Any:
        return self.call("cuEventCreate", self.cu.CUevent_flags.CU_EVENT_DEFAULT)

    def record(self, event: Any) -> None:
        self.call("cuEventRecord", event, self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        self.call("cuEventSynchronize", end)
        return float(self.call("cuEventElapsedTime", start, end))

    @property
    def stream_handle(self) -> int:
        return int(self.stream)

    def release(self) -> None:
        """Free what this job allocated and its stream (a serving worker runs many jobs); after
        a fault the driver refuses, and the process is about to end anyway."""
        for ptr in self.allocations:
            with contextlib.suppress(StageError):
                self.call("cuMemFree", ptr)
        self.allocations = []
        with contextlib.suppress(StageError):
            self.call("cuStreamDestroy", self.stream)


def load_entry(
    library: str, symbol: str, n_params: int, extra_types: list[str] | None = None
) -> Callable[..., int]:
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        raise StageError("load", f"cannot load {library}: {exc}") from exc
    try:
        fn = getattr(lib, symbol)
    except AttributeError as exc:
        raise StageError(
            "load",
            f"{library} does not export '{symbol}': is the entry declared PT_EXPORT inside "
            'extern "C"?',
        ) from exc
    fn.restype = ctypes.c_int
    # Data pointers, then (torch-2.11) sizes, offsets and runtime args by their C types, then
    # size_t*, workspace, stream (addresses or null).
    extra = [getattr(ctypes, marshal.EXTRA_CTYPES[t]) for t in extra_types or []]
    fn.argtypes = [ctypes.c_void_p] * n_params + extra + [ctypes.c_void_p] * 3
    return fn  # type: ignore[no-any-return]


def run(job: BenchJob) -> dict[str, Any]:
    filled = block_filled((job.module or {}).get("made") or {})
    for tensor in job.tensors.values():
        if tensor is not None and not supported(tensor.dtype) and tensor.name not in filled:
            raise StageError("setup", f"dtype {tensor.dtype} is not supported by the harness")
    # The user's reference is the project's code: imported here, in this worker, never in kls.
    user_reference = _load_user_reference(job.reference)
    cuda = Cuda()
    try:
        info = cuda.device_info()
        rng = np.random.default_rng(job.seed)
        if job.module is not None:  # a rendered Python module (Triton): torch, triton here
            from kls.bench.module import prepare_module

            prepared = prepare_module(cuda, job, rng)
        else:
            prepared = prepare_library(cuda, job, rng)
        return measure(cuda, job, info, prepared, rng, user_reference)
    finally:
        cuda.release()


def prepare_library(cuda: Cuda, job: BenchJob, rng: np.random.Generator) -> Prepared:
    """The built library's entry, its workspace queried and allocated."""
    fn = load_entry(job.library, job.symbol, len(job.params), [t for t, _ in job.extra_args])
    extra = tuple(int(v) for _, v in job.extra_args)
    host, pointers = upload_tensors(cuda, job, rng)
    size = ctypes.c_size_t(0)
    call = marshal.workspace_query(job.params, ctypes.addressof(size), cuda.stream_handle, extra)
    check_rc(fn(*call.args()), "workspace query")
    workspace = cuda.alloc(size.value) if size.value else None
    launch = marshal.launch(job.params, pointers, workspace, cuda.stream_handle, extra)
    return Prepared(
        host,
        pointers,
        lambda: check_rc(fn(*launch.args()), "run"),
        {"workspace_bytes": size.value},
    )


def measure(
    cuda: Cuda,
    job: BenchJob,
    info: dict[str, Any],
    prepared: Prepared,
    rng: np.random.Generator,
    user_reference: Callable[..., Any] | None,
) -> dict[str, Any]:
    """One launch on poisoned output, verified; then (job.measure) timed, with the baseline."""
    host, pointers = prepared.host, prepared.pointers
    poison(cuda, job.output(), pointers)
    prepared.launch()
    try:
        cuda.sync()
    except StageError as exc:  # a fault surfaces at the first synchronize after the launch
        raise StageError(
            "run",
            f"the kernel failed on its first run ({exc}); check its pointers, strides and "
            "bounds, e.g. with kls bench --sanitize",
        ) from exc
    verification = verify(cuda, job, host, pointers, rng, user_reference, prepared.expected)
    result: dict[str, Any] = {
        "ok": verification.ok,
        "device": info,
        **prepared.details,
        "verification": verification.to_json(),
        "verified": job.reference != "none",
    }
    if not verification.ok:
        result["stage"] = "verify"
        result["error"] = describe_failure(verification)
        return result
    if not job.measure:
        return result
    # Twice the L2, and at least 256 MiB: the flush also keeps the GPU busy while the host runs
    # the entry's own launch work, so that work is not timed as kernel time.
    flush_bytes = max(2 * int(info["l2_bytes"]), FLUSH_MIN_BYTES)
    events = job.timing.method != "graph"  # a graph flushes with its own kernel
    flush = cuda.alloc(flush_bytes) if job.timing.flush_l2 and events else None
    samples, clocks = time_kernel(cuda, prepared.launch, job, flush, flush_bytes)
    result["timing"] = summarize(samples).to_json()
    result["clocks"] = clocks
    result["l2_flush_bytes"] = flush_bytes if flush else 0
    if job.baseline and job.reference == "gemm":
        result["baseline"] = cublas_baseline(job, host, flush_bytes)
    return result


def check_rc(rc: int, what: str) -> None:
    if rc != 0:
        raise StageError("run", f"the entry point returned {rc} on the {what} (0 means success)")


def upload_tensors(
    cuda: Cuda, job: BenchJob, rng: np.random.Generator
) -> tuple[dict[str, HostTensor], dict[str, int]]:
    host: dict[str, HostTensor] = {}
    pointers: dict[str, int] = {}
    for name, spec in job.tensors.items():
        if spec is None:
            continue
        host[name] = HostTensor.seeded(spec, rng)
        ptr = cuda.alloc(host[name].storage.nbytes)
        if not spec.is_output:
            cuda.upload(ptr, host[name].storage)
        pointers[name] = ptr
    return host, pointers


def poison(cuda: Cuda, out: TensorJob, pointers: dict[str, int]) -> None:
    """All-ones bytes are NaN in every float format: an unwritten element cannot pass."""
    nbytes = out.storage_elements * np.dtype(STORAGE[out.dtype]).itemsize
    cuda.memset(pointers[out.name], 0xFF, nbytes)
    cuda.sync()


def _load_user_reference(reference: str) -> Callable[..., Any] | None:
    """The user's function (None for a built-in reference); a reference kls lacks yet
    (kls.bench.reference.PENDING_REFERENCES) stops the run with what to do."""
    if reference in PENDING_REFERENCES:
        raise StageError("reference", PENDING_REFERENCES[reference])
    if not is_user_reference(reference):
        return None
    try:
        return load_reference(reference)
    except UserReferenceError as exc:
        raise StageError("reference", f'reference = "{reference}": {exc}') from exc


def verify(
    cuda: Cuda,
    job: BenchJob,
    host: dict[str, HostTensor],
    pointers: dict[str, int],
    rng: np.random.Generator,
    user_reference: Callable[..., Any] | None = None,
    expected: Callable[[], np.ndarray] | None = None,
) -> Any:
    out = job.output()
    y = host[out.name]
    cuda.download(pointers[out.name], y.storage)
    unwritten = count_unwritten(y)
    if job.reference == "none":  # timed without verification; every result says so
        return Verification(True, 0, 0.0, [], 0.0, 0.0, 0.0, 0, unwritten)
    if job.reference in GPU_REFERENCES:
        if expected is None:
            raise StageError("verify", f"the {job.reference} reference needs its kernel's launch")
        return verify_expected(y, expected(), job.tolerance, unwritten)
    if user_reference is not None:
        outputs = [host[n] for n in job.params if n in host and host[n].spec.is_output]
        for t in outputs:
            cuda.download(pointers[t.spec.name], t.storage)
        inputs = [t for t in host.values() if not t.spec.is_output]
        try:
            return verify_user(user_reference, inputs, outputs, job.tolerance, unwritten)
        except UserReferenceError as exc:
            raise StageError("reference", f'reference = "{job.reference}": {exc}') from exc
    if job.reference == "gemm":
        x, w, bias = operand_tensors(job, host)
        if x is None or w is None:
            names = " and ".join(job.operands[:2])
            raise StageError("verify", f"a gemm reference needs tensors {names}")
        v = verify_gemm(x, w, bias, y, job.alpha, job.beta, job.samples, rng, unwritten)
        return _with_tolerance(v, job.tolerance)
    if job.reference == "softmax":
        v = verify_softmax(host["X"], y, max(job.samples // 16, 8), rng, unwritten)
        return _with_tolerance(v, job.tolerance)
    raise StageError("verify", "no reference for this instance: set reference in kls.toml")


def operand_tensors(
    job: BenchJob, host: dict[str, HostTensor]
) -> tuple[HostTensor | None, HostTensor | None, HostTensor | None]:
    """The gemm's X, W and Bias, by the job's operand names (a missing one is None)."""
    names = [*job.operands, "", "", ""][:3]
    x, w, bias = (host.get(n) if n else None for n in names)
    return x, w, bias


def _with_tolerance(v: Verification, tolerance: float | None) -> Verification:
    """The instance's own tolerance (kls.toml `tolerance`) in place of the dtype's."""
    if tolerance is None:
        return v
    ok = v.nan_count == 0 and v.unwritten == 0 and v.max_error <= tolerance
    return dataclasses.replace(v, ok=ok, tolerance=tolerance)


def count_unwritten(y: HostTensor) -> int:
    """NaNs (still poison) at the logical elements of the output."""
    numel = int(np.prod(y.spec.shape))
    if numel == y.spec.storage_elements - y.spec.offset:
        # Dense (any order): every storage slot after the offset is one element.
        dense = y.storage[y.spec.offset :]
        return int(np.count_nonzero(np.isnan(to_float64(dense, y.spec.dtype))))
    # Gaps or broadcast dimensions: look at the logical elements only.
    index = np.indices(y.spec.shape).reshape(len(y.spec.shape), -1).T
    return int(np.count_nonzero(np.isnan(y.gather(index))))


def describe_failure(v: Any) -> str:
    if v.unwritten:
        return f"{v.unwritten} output element(s) were never written (still NaN poison)"
    if v.nan_count:
        return f"{v.nan_count} checked output element(s) are NaN/Inf"
    return (
        f"wrong result: max relative error {v.max_error:.3g} > {v.tolerance:g} at Y{v.worst} "
        f"(got {v.worst_value:.6g}, expected {v.worst_expected:.6g})"
    )


BATCH = 10


def time_kernel(
    cuda: Cuda, launch: Callable[[], None], job: BenchJob, flush: int | None, flush_bytes: int
) -> tuple[list[float], dict[str, Any]]:
    """Warm up >= warmup_s, then batches of back-to-back launches, each between its own pair
    of CUDA events, with an L2 flush before each launch outside the timed region. The host
    waits once per batch, not per launch: a GPU that idles between launches runs cooler and
    clocks higher than under a real, back-to-back load (measured on an H200: 20 per-launch-
    synced samples read 1.46 ms at 1875 MHz for a GEMM that takes 1.69 ms back to back)."""
    if job.timing.method == "graph":
        graphed = graph_batch_or_error(launch, job.timing, flush_bytes, cuda.stream_handle)
        return sample_batches(graphed, job.timing)
    starts = [cuda.event() for _ in range(BATCH)]
    ends = [cuda.event() for _ in range(BATCH)]

    def batch(timed: bool) -> list[float]:
        for i in range(BATCH):
            if flush:
                cuda.memset(flush, 0, flush_bytes)
            if timed:
                cuda.record(starts[i])
            launch()
            if timed:
                cuda.record(ends[i])
        cuda.sync()
        return [cuda.elapsed_ms(starts[i], ends[i]) for i in range(BATCH)] if timed else []

    return sample_batches(batch, job.timing)


def graph_batch_or_error(
    launch: Callable[[], None], timing: Timing, flush_bytes: int, stream_handle: int | None
) -> Callable[[bool], list[float]]:
    """kls.bench.graph_timing's batch; a launch a CUDA graph cannot capture is a stage error
    that names the other method."""
    from kls.bench.graph_timing import graph_batch

    try:
        return graph_batch(launch, timing.flush_l2, flush_bytes, stream_handle)
    except ImportError as exc:
        raise StageError("time", f"--method graph times with torch's CUDA graphs: {exc}") from exc
    except Exception as exc:  # the capture: a launch that syncs, allocates or copies
        raise StageError(
            "time",
            f"the launch could not be captured in a CUDA graph ({type(exc).__name__}: {exc}); "
            "--method events times it with CUDA events instead",
        ) from exc


def sample_batches(
    batch: Callable[[bool], list[float]], timing: Timing
) -> tuple[list[float], dict[str, Any]]:
    """Warm up with untimed batches for `timing.warmup_s`, then timed batches until
    `should_stop`, reading the SM clock and board power after each (NVML, where present):
    under a long GEMM load an H200 is power-limited well below its top clock."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timing.warmup_s:
        batch(False)
    samples: list[float] = []
    clocks: list[tuple[float, float]] = []
    nvml = _nvml()
    t1 = time.monotonic()
    while not should_stop(samples, time.monotonic() - t1, timing):
        samples.extend(batch(True))
        if nvml is not None:
            clocks.append(nvml())
    return samples, _clock_summary(clocks)


def _nvml() -> Callable[[], tuple[float, float]] | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None

    def read() -> tuple[float, float]:
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        return float(sm), float(power)

    return read


def _clock_summary(clocks: list[tuple[float, float]]) -> dict[str, Any]:
    if not clocks:
        return {}
    sm = sorted(c[0] for c in clocks)
    power = sorted(c[1] for c in clocks)
    return {
        "sm_clock_mhz": sm[len(sm) // 2],
        "power_w": power[len(power) // 2],
        "readings": len(clocks),
    }


def cublas_baseline(job: BenchJob, host: dict[str, HostTensor], flush_bytes: int) -> dict[str, Any]:
    """The same GEMM through torch (cuBLAS), same data, same timing method; optional."""
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "torch is not installed"}
    try:
        return _torch_baseline(torch, job, host, flush_bytes)
    except Exception as exc:  # the baseline is optional: report why it is missing
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}


def _as_torch(torch: Any, t: HostTensor) -> Any:
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
        t.spec.dtype
    ]
    raw = torch.from_numpy(t.storage.view(np.int16) if t.spec.dtype == "bfloat16" else t.storage)
    flat = raw.view(dtype) if t.spec.dtype == "bfloat16" else raw
    return torch.as_strided(flat.cuda(), t.spec.shape, t.spec.stride, t.spec.offset)


def _torch_baseline(
    torch: Any, job: BenchJob, host: dict[str, HostTensor], flush_bytes: int
) -> dict[str, Any]:
    xh, wh, bias = operand_tensors(job, host)
    if xh is None or wh is None:
        return {"available": False, "reason": "the job names no gemm operands"}
    x, w = _as_torch(torch, xh), _as_torch(torch, wh)
    b = _as_torch(torch, bias) if bias is not None and job.beta != 0 else None

    def launch() -> None:
        if b is not None:
            torch.addmm(b, x, w, beta=job.beta, alpha=job.alpha)
        else:
            torch.matmul(x, w)

    if job.timing.method == "graph":  # the kernel's own method: kernel against kernel
        graphed = graph_batch_or_error(launch, job.timing, flush_bytes, None)
        samples, clocks = sample_batches(graphed, job.timing)
        return _baseline_result(torch, samples, clocks)
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(BATCH)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(BATCH)]

    def batch(timed: bool) -> list[float]:
        for i in range(BATCH):
            flush.zero_()
            if timed:
                starts[i].record()
            launch()
            if timed:
                ends[i].record()
        torch.cuda.synchronize()
        return [starts[i].elapsed_time(ends[i]) for i in range(BATCH)] if timed else []

    samples, clocks = sample_batches(batch, job.timing)
    return _baseline_result(torch, samples, clocks)


def _baseline_result(torch: Any, samples: list[float], clocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "available": True,
        "library": f"torch {torch.__version__} (cuBLAS)",
        "timing": summarize(samples).to_json(),
        "clocks": clocks,
    }


if __name__ == "__main__":
    sys.exit(main())
