"""What both timing stages share: the GPU worker, started with every shape's tensors; each
shape's call (C parameters, size arguments) learnt from a render; a cuBLAS bar's run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kls.bench.job import TensorJob, Timing
from kls.bench.run import BenchOptions, make_job
from kls.instances import InstanceSpec
from kls.render import Limits
from kls.sandbox.workers import render_isolated
from kls.tune.candidates import BuildUnit, at_shape
from kls.tune.gpu import GpuSession, GpuUnavailable
from kls.tune.options import RENDER_SECONDS, NoGpu, TuneError, TuneRun
from kls.tune.results import Baseline, TuneResult, shape_key
from kls.tune.space import runtime_variables


@dataclass
class ShapePlan:
    """How a build is called at one shape (and swap setting)."""

    swap: bool
    params: list[str]
    extra_args: list[list[Any]]
    tensors: dict[str, TensorJob | None]
    problem: str
    runtime_names: tuple[str, ...]

    def args_for(self, combo: dict[str, Any]) -> list[list[Any]]:
        """The size/offset arguments with the runtime arguments (last) set to `combo`."""
        args = [list(a) for a in self.extra_args]
        n = len(self.runtime_names)
        if n:
            for i, name in enumerate(self.runtime_names):
                if name in combo:
                    args[len(args) - n + i][1] = int(combo[name])
        return args


ShapePlans = dict[tuple[str, bool], ShapePlan]  # (shape key, swap) -> plan


def start_gpu(
    run: TuneRun,
    units: list[BuildUnit],
    shapes: list[tuple[int, int, int]],
    result: TuneResult,
    on_session: Callable[[GpuSession], None] | None = None,
) -> tuple[GpuSession, ShapePlans]:
    """Start the worker first (no GPU: stop before building anything), with every shape's
    tensors; and the C parameters and size arguments of each (shape, swap) from a render.
    `on_session` gets the session before it starts (a cancel must reach its setup)."""
    spec = run.spec
    plans: ShapePlans = {}
    tensors: dict[str, dict[str, Any]] = {}
    for shape in shapes:
        key = shape_key(shape)
        for unit in representatives(spec, units):
            plan = shape_plan(spec, unit, shape)
            plans[(key, plan.swap)] = plan
            tensors[key] = {
                "tensors": {
                    n: dataclasses.asdict(t) if t is not None else None
                    for n, t in plan.tensors.items()
                }
            }
            if plan.problem:
                result.notes.append(plan.problem)
    setup = {
        "shapes": tensors,
        "reference": spec.reference if spec.reference != "none" else "gemm",
        "alpha": spec.alpha,
        "beta": spec.beta,
        "seed": run.options.seed,
        "samples": 256,
    }
    gpu = GpuSession(setup, run.options.worker, run.options.timeout_s)
    if on_session is not None:
        on_session(gpu)
    if run.cancel.is_set():
        gpu.cancel()
    try:
        gpu.start()
    except GpuUnavailable as exc:
        if gpu.cancelled:
            raise TuneError("cancelled") from None
        raise NoGpu(f"{exc}; to only build the candidates, use --build-only") from None
    return gpu, plans


def shape_plan(spec: InstanceSpec, unit: BuildUnit, shape: tuple[int, int, int]) -> ShapePlan:
    base = unit.spec(spec)
    shaped = at_shape(base, shape)
    limits = Limits(seconds=RENDER_SECONDS)
    built_text = render_isolated(base, None, limits).text
    rendered = render_isolated(shaped, None, limits)
    if rendered.text is None or rendered.op is None:
        first = rendered.findings[0].message if rendered.findings else "render failed"
        raise TuneError(f"'{spec.name}' does not render at {shape_key(shape)}: {first}")
    job = make_job(shaped, rendered, Path("unused"), BenchOptions())
    problem = ""
    if rendered.text != built_text:
        problem = (
            f"{shape_key(shape)}: the rendered source differs from the instance's own "
            "shape (sizes are not runtime arguments for this template/profile), so one "
            "build cannot serve it; it is not timed"
        )
    return ShapePlan(
        rendered.op.should_swap_xw,
        job.params,
        [list(a) for a in job.extra_args],
        job.tensors,
        problem,
        runtime_variables(spec),
    )


def swap_of(spec: InstanceSpec, unit: BuildUnit) -> bool:
    """Whether Inductor swaps X and W for this op (a bias with a TMA epilogue): the call's
    size arguments follow the swap."""
    from kls.cutlass.ops import OpLookupError
    from kls.profiles.common import gemm_layouts
    from kls.profiles.torch211.ops import emit_instance_torch211

    x, w, b, y = gemm_layouts(spec)
    if x is None or w is None or y is None:
        return False
    try:
        emitted = emit_instance_torch211(
            unit.choice.op, x, w, b, y, spec.sm, unit.choice.level, spec.torch_package
        )
        return emitted.should_swap_xw
    except OpLookupError:
        return False


def representatives(spec: InstanceSpec, units: list[BuildUnit]) -> list[BuildUnit]:
    """One unit per swap setting is enough to learn the call arguments of a shape."""
    seen: dict[bool, BuildUnit] = {}
    for u in units:
        seen.setdefault(swap_of(spec, u), u)
    return list(seen.values())


def time_bar(run: TuneRun, gpu: GpuSession, base: Baseline, timing: Timing) -> None:
    """One cuBLAS run for `base`'s shape with `timing`; the bar is the faster run (the
    harder bar), with the clocks it ran at."""
    tag = "cublas" if base.stage == 2 else f"cublas-stage{base.stage}"
    answer = gpu.request(
        {
            "kind": "baseline",
            "id": f"{tag}@{base.shape}",
            "shape": base.shape,
            "timing": dataclasses.asdict(timing),
        }
    )
    if run.cancel.is_set() or answer.get("stage") == "cancelled":
        return
    run.tick(bool(answer.get("ok")))
    if not answer.get("ok"):
        base.error = str(answer.get("error", ""))
        return
    ms = float(answer["timing"]["median"])
    base.runs_ms.append(ms)
    base.library = str(answer.get("library", ""))
    if base.median_ms is None or ms <= base.median_ms:
        base.ok = True
        base.median_ms = ms
        base.spread = float(answer["timing"]["spread"])
        base.sm_clock_mhz, base.power_w = clocks_of(answer)


def clocks_of(answer: dict[str, Any]) -> tuple[float | None, float | None]:
    """The median SM clock (MHz) and board power (W) the worker read while timing."""
    clocks = answer.get("clocks") or {}
    sm, power = clocks.get("sm_clock_mhz"), clocks.get("power_w")
    return (float(sm) if sm is not None else None, float(power) if power is not None else None)
