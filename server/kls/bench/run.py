"""`kls bench` / the Benchmark lens: build the instance, run the worker, report, remember."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kls.bench.history import History
from kls.bench.job import BenchJob, TensorJob, Timing
from kls.bench.reference import PENDING_REFERENCES
from kls.bench.report import BenchReport, build_report
from kls.bench.runner import WorkerOutcome, run_worker
from kls.compile import CompileOptions, compile_instance
from kls.instances import InstanceSpec
from kls.instances.schema import UNSET_REFERENCE
from kls.profiles import profile
from kls.render import RenderResult

Progress = Callable[[str], None]
NO_REFERENCE = (
    'no reference to verify against: in kls.toml set reference = "refs.py:add" (your own '
    'function: it takes the inputs as NumPy arrays and returns the outputs), "gemm" or '
    '"softmax", or "none" to time without verifying'
)


@dataclass
class BenchOptions:
    compile: CompileOptions = field(default_factory=lambda: CompileOptions(mode="build"))
    timing: Timing = field(default_factory=Timing)
    baseline: bool = True
    timeout_s: float = 300.0
    seed: int = 0
    worker: list[str] | None = None  # another worker command (tests use stand-ins)
    # A long-lived worker to run the job in (kls tune's config search: one process for all
    # its candidates) in place of a fresh one a job.
    runner: Callable[[BenchJob], WorkerOutcome] | None = None


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tensor_jobs(
    instance: InstanceSpec, outputs: Collection[str], strides: dict[str, list[int]] | None = None
) -> dict[str, TensorJob | None]:
    """The instance's tensors as the worker allocates them: `outputs` the ones the kernel
    writes; `strides` a tensor's layout where it is not the declared one."""
    strides = strides or {}
    return {
        name: None
        if spec is None
        else TensorJob(
            name,
            list(spec.shape),
            strides.get(name) or list(spec.stride),
            spec.dtype.name,
            spec.offset,
            is_output=name in outputs,
        )
        for name, spec in instance.tensors.items()
    }


def _bench_job(
    instance: InstanceSpec,
    rendered: RenderResult,
    options: BenchOptions,
    *,
    library: str,
    symbol: str,
    params: list[str],
    tensors: dict[str, TensorJob | None],
    extra_args: list[list[Any]] | None = None,
    module: dict[str, Any] | None = None,
) -> BenchJob:
    """A job launching the kernel as the keywords say (a library's entry or a module's
    kernel), verified and timed as the instance and `options` say."""
    prof = profile(instance.profile)
    return BenchJob(
        library=library,
        symbol=symbol,
        params=params,
        extra_args=extra_args or [],
        tensors=tensors,
        reference=prof.bench_reference(instance, rendered),
        alpha=instance.alpha,
        beta=instance.beta,
        seed=options.seed,
        timing=options.timing,
        baseline=options.baseline,
        tolerance=instance.tolerance,
        operands=list(prof.bench_operands(instance)),
        module=module,
    )


def make_job(
    instance: InstanceSpec, rendered: RenderResult, library: Path, options: BenchOptions
) -> BenchJob:
    """The worker's job: C parameters in the order def_kernel produced them."""
    outputs = {p.buffer for p in rendered.params if p.is_output}
    extra = profile(instance.profile).call_arguments(rendered.kernel)
    return _bench_job(
        instance,
        rendered,
        options,
        library=str(library),
        symbol=instance.kernel_name,
        params=[p.buffer for p in rendered.params],
        tensors=_tensor_jobs(instance, outputs),
        extra_args=[[ctype, value] for ctype, value in extra],
    )


def make_module_job(
    instance: InstanceSpec, rendered: RenderResult, launch: dict[str, Any], options: BenchOptions
) -> BenchJob:
    """The worker's job for a rendered module it launches itself (the triton profile): the
    tensors in the kernel's argument order, the last one the output."""
    order = [str(n) for n in launch.get("tensors", [])]
    outputs = order[-1:]
    written = launch.get("output_stride")  # the layout the module writes (Inductor's)
    strides = {name: list(written) for name in outputs} if isinstance(written, list) else {}
    tensors = _tensor_jobs(instance, outputs, strides)
    tensors.update(_made_tensor_jobs(launch.get("made") or {}, outputs))
    return _bench_job(
        instance,
        rendered,
        options,
        library="",
        symbol=str(launch.get("kernel", "")),
        params=order,
        tensors=tensors,
        module=launch,
    )


def _made_tensor_jobs(made: dict[str, Any], outputs: Collection[str]) -> dict[str, TensorJob]:
    """The buffers Inductor's lowering made for the kernel (flex: its statistics, block mask
    and output), as the worker allocates them."""
    return {
        name: TensorJob(
            name,
            [int(n) for n in spec["shape"]],
            [int(n) for n in spec["stride"]],
            str(spec["dtype"]),
            is_output=name in outputs,
        )
        for name, spec in made.items()
    }


def worker_command(instance: InstanceSpec) -> tuple[list[str], dict[str, str]]:
    """The benchmark worker's command in the Python the instance's profile names (the
    triton profile: one with torch), and its environment (kls importable there too)."""
    python = profile(instance.profile).bench_python() or sys.executable
    server = str(Path(__file__).resolve().parents[2])  # the folder holding kls
    path = os.pathsep.join(p for p in (server, os.environ.get("PYTHONPATH", "")) if p)
    return [python, "-m", "kls.bench.worker"], {**os.environ, "PYTHONPATH": path}


def prepare_job(
    instance: InstanceSpec,
    options: BenchOptions,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
    verify: bool = True,
) -> tuple[BenchJob | None, RenderResult | None, str]:
    """Build (or, for a module kernel, render and compile) the instance, then its job: (job,
    the render, "") or (None, the render, why not). `verify=False` (a run under the
    sanitizer): an instance without a reference runs unverified rather than not at all."""
    built = compile_instance(instance, options.compile, overrides, cancel)
    rendered = built.rendered
    if not built.ok or rendered is None or rendered.text is None:
        first = built.errors[0].format_line() if built.errors else "build failed"
        return None, rendered, f"build failed: {first}"
    launch = profile(instance.profile).bench_launch(instance, rendered)
    if launch is None and built.artifact is None:
        return None, rendered, "build failed: no library was built"
    job = (
        make_module_job(instance, rendered, launch, options)
        if launch is not None
        else make_job(instance, rendered, built.artifact or Path(), options)
    )
    if not verify and (job.reference == UNSET_REFERENCE or job.reference in PENDING_REFERENCES):
        job.reference = "none"
    if job.reference == UNSET_REFERENCE:
        return None, rendered, NO_REFERENCE
    return job, rendered, ""


def benchmark_instance(
    instance: InstanceSpec,
    options: BenchOptions | None = None,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    history: History | None = None,
) -> BenchReport:
    options = options or BenchOptions()
    say = progress or (lambda _message: None)
    history = history or History(instance.config_path.parent)
    previous = history.last(instance.name)
    say(f"building {instance.name}")
    job, rendered, problem = prepare_job(instance, options, overrides, cancel)
    if job is None or rendered is None or rendered.text is None:
        return _failed(instance, problem, history)
    say(f"verifying and timing {instance.name} on the GPU")
    if options.runner is not None:
        outcome = options.runner(job)
    else:
        command, env = worker_command(instance)
        outcome = run_worker(job, options.timeout_s, options.worker or command, cancel, env)
    if not outcome.ok:
        report = _failed(instance, outcome.message, history, record=False)
        report.verification = outcome.result.get("verification", {})
        report.device = outcome.result.get("device", {})
    else:
        report = build_report(instance.name, job, outcome.result)
    report.source_hash = source_hash(rendered.text)
    report.timestamp = time.time()
    report.previous_ms = previous.median_ms if previous else None
    if outcome.ok or "device" in outcome.result:  # a run that reached a GPU is history
        history.append(report)
    return report


def _failed(
    instance: InstanceSpec, message: str, history: History, record: bool = True
) -> BenchReport:
    report = BenchReport(instance.name, ok=False, message=message, timestamp=time.time())
    if record:
        history.append(report)
    return report
