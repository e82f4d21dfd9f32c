"""`kls tune` from start to end: candidates, builds, then verify-and-time in two stages.

Builds run on the executor; each library that comes back is queued for stage 1 on the GPU
while the other builds go on. Stage 1 times every built op once per shape at one setting of
the runtime variables (the instance's own, else the first listed), with a short timing.
Stage 2 takes the best `STAGE2_PER_SHAPE` ops of each shape (filled up to `STAGE2_OPS` by
their stage-1 geometric mean, and always the instance's own op) and times each of them with
every runtime-variable combination on every shape, with the full timing, cuBLAS timed before
and after each shape's candidates in the same worker. The winners come from stage 2 alone:
per shape the fastest verified configuration, and overall the configuration with the best
geometric mean over shapes (what `--apply` writes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kls.bench.job import TensorJob, Timing
from kls.bench.run import BenchOptions, make_job, source_hash
from kls.compile import CompileOptions
from kls.instances import InstanceSpec
from kls.render import Limits
from kls.sandbox.workers import render_isolated
from kls.template.source import is_python_ref
from kls.tune.candidates import (
    BuildUnit,
    CandidateSet,
    at_shape,
    instance_shape,
    make_candidates,
    unit_id,
)
from kls.tune.executors import (
    BuildOutcome,
    BuildTask,
    Executor,
    LocalExecutor,
    RayExecutor,
    build_resources,
    local_slots,
)
from kls.tune.gpu import GpuSession, GpuUnavailable
from kls.tune.results import (
    Baseline,
    BuildRecord,
    Choice,
    Measurement,
    ShapeBest,
    TuneResult,
    flops,
    geomean,
    shape_key,
)
from kls.tune.resume import Prior, key_of, load_prior
from kls.tune.space import TuneSpace, load_space, runtime_variables, unread_variables

RENDER_SECONDS = 120.0  # a fresh render process first generates the CUTLASS op list
STOP_JOIN_S = 10.0  # for the stage-1 thread to see the stop, after an error or a cancel
STAGE2_PER_SHAPE = 1
STAGE2_OPS = 6
STAGE2_MAX_OPS = 8  # shapes' own winners may take stage 2 past STAGE2_OPS, up to this
STAGE1_TIMING = Timing(
    warmup_s=0.05, min_samples=20, min_seconds=0.05, max_samples=400, target_spread=0.02,
    max_seconds=0.15,
)  # fmt: skip
STAGE2_TIMING = Timing(
    warmup_s=0.2, min_samples=40, min_seconds=0.2, max_samples=2000, target_spread=0.01,
    max_seconds=0.6,
)  # fmt: skip


class TuneError(Exception):
    """The tune cannot run at all (bad space, no GPU, no Ray); the message says why."""


class NoGpu(TuneError):
    """No GPU worker could start here: nothing can be timed (a `--build-only` run can)."""


@dataclass
class TuneOptions:
    limit: int | None = None
    build_only: bool = False
    executor: str = "local"  # local | ray
    ray_address: str | None = None
    slots: int | None = None  # local pool size (default: from cores and free memory)
    compile: CompileOptions = field(default_factory=lambda: CompileOptions(mode="build"))
    stage1: Timing = field(default_factory=lambda: dataclasses.replace(STAGE1_TIMING))
    stage2: Timing = field(default_factory=lambda: dataclasses.replace(STAGE2_TIMING))
    stage2_per_shape: int = STAGE2_PER_SHAPE
    stage2_ops: int = STAGE2_OPS
    worker: list[str] | None = None  # another GPU worker command (tests use stand-ins)
    resume: bool = False  # reuse the last run's measurements (kls.tune.resume)
    seed: int = 0
    timeout_s: float = 120.0  # per GPU request


@dataclass
class Progress:
    phase: str
    builds_done: int = 0
    builds_failed: int = 0
    builds_total: int = 0
    timed: int = 0
    timed_failed: int = 0
    timed_total: int = 0
    best: str = ""

    def line(self) -> str:
        parts = [
            f"builds {self.builds_done}/{self.builds_total}"
            + (f" ({self.builds_failed} failed)" if self.builds_failed else "")
        ]
        if self.timed_total:
            parts.append(
                f"timed {self.timed}/{self.timed_total}"
                + (f" ({self.timed_failed} failed)" if self.timed_failed else "")
            )
        if self.best:
            parts.append(f"best {self.best}")
        return f"{self.phase}: " + " · ".join(parts)


def results_folder(spec: InstanceSpec) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in spec.name)
    return spec.config_path.parent / ".kls" / "tune" / safe


def make_executor(options: TuneOptions, resources_3x: bool) -> Executor:
    if options.executor == "ray":
        try:
            return RayExecutor(options.ray_address)
        except Exception as exc:
            raise TuneError(str(exc)) from None
    if options.executor != "local":
        raise TuneError(f"unknown executor '{options.executor}' (local or ray)")
    from kls.tune.executors import Resources

    need = Resources(1.0, int(2.5 * 1024**3) if resources_3x else int(1.5 * 1024**3))
    return LocalExecutor(options.slots or local_slots(need))


class Tuner:
    def __init__(
        self,
        spec: InstanceSpec,
        options: TuneOptions,
        on_progress: Callable[[Progress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.spec = spec
        self.options = options
        self.say = on_progress or (lambda _p: None)
        self.cancel = cancel or threading.Event()
        self.progress = Progress("candidates")
        self.folder = results_folder(spec)
        self.lock = threading.Lock()
        self.result: TuneResult | None = None  # what is known so far (kept on interrupt)

    # -- setup ------------------------------------------------------------------------------
    def plan(self) -> tuple[TuneSpace, CandidateSet, list[tuple[int, int, int]]]:
        from kls.tune.candidates import CandidateError
        from kls.tune.space import TuneSpaceError

        try:
            space = load_space(self.spec)
            cs = make_candidates(self.spec, space, self.options.limit)
            shapes = list(space.shapes) or [instance_shape(self.spec)]
        except (TuneSpaceError, CandidateError) as exc:
            raise TuneError(str(exc)) from None
        return space, cs, shapes

    def run(self) -> TuneResult:
        space, cs, shapes = self.plan()
        keys = [shape_key(s) for s in shapes]
        rendered = render_isolated(self.spec, None, Limits(seconds=RENDER_SECONDS)).text
        current = self._current_unit(cs)
        result = TuneResult(
            self.spec.name,
            str(self.spec.template),
            str(self.spec.config_path),
            self.options.executor,
            time.time(),
            keys,
            candidates=len(cs.units) * len(cs.runtime_combos),
            compatible_ops=cs.total_ops,
            distinct_ops=cs.distinct_ops,
            selected_ops=cs.filtered_ops,
            runtime_combos=cs.runtime_combos,
            build_only=self.options.build_only,
            source_hash=source_hash(rendered) if rendered is not None else "",
        )
        self.result = result
        for name in unread_variables(self.spec, space):
            result.notes.append(
                f"the tune table's '{name}' is not read by the instance's templates (a typo?): "
                "its values all build the same kernel"
            )
        units = list(cs.units)
        if current is not None and all(u.id != current.id for u in units):
            units.append(current)  # the margin over the current choice is always measured
        result.builds = [
            BuildRecord(
                u.id, u.choice.op, u.choice.conf_name, u.choice.family, u.choice.tile,
                dict(u.build_vars), current=current is not None and u.id == current.id,
                level=u.choice.level,
            )
            for u in units
        ]  # fmt: skip
        result.method = {
            "stage1_timing": dataclasses.asdict(self.options.stage1),
            "stage2_timing": dataclasses.asdict(self.options.stage2),
            "stage2_per_shape": self.options.stage2_per_shape,
            "stage2_ops": self.options.stage2_ops,
            "limit": self.options.limit,
            "cutlass_instantiation_level": space.level or self.spec.instantiation_level,
        }
        gpu = None
        stage1: _Stage1 | None = None
        if self.options.resume and self.options.build_only:
            result.notes.append(
                "--resume has nothing to take in a --build-only run: builds always come from "
                "the compile cache"
            )
        if not self.options.build_only:
            threading.Thread(target=self._watch_gpu, daemon=True).start()
            try:
                gpu, plans = self._gpu(units, shapes, result)
            except BaseException:
                self._done = True
                raise
            if self.options.resume:
                self.prior, note = load_prior(self.folder / "results.json", result, gpu.device)
                if note:
                    result.notes.append(note)
            stage1 = _Stage1(self, gpu, plans, keys, cs, units, result)
            self.progress.timed_total = (len(units) + 2) * len(stage1.keys)  # (+ cuBLAS, twice)
        try:
            self._build(units, result, stage1)
            if stage1 is not None and gpu is not None and not self.cancel.is_set():
                stage1.finish()
                self.checkpoint(result)
                self._stage2(gpu, stage1, units, cs, keys, current, result)
        finally:
            if stage1 is not None:
                stage1.stop()  # (an error or a cancel: nothing more is timed)
                if stage1.thread.is_alive() and gpu is not None:
                    gpu.cancel()  # its request in flight ends now (a Ctrl-C must not wait)
                stage1.thread.join(timeout=STOP_JOIN_S)
            if self.prior is not None:
                result.notes.append(
                    f"--resume: {self.prior.used} measurement(s) taken from the run of "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.prior.timestamp))}"
                )
            self._done = True
            if gpu is not None:
                result.device = gpu.device
                gpu.finish()
        result.cancelled = self.cancel.is_set()
        return result

    _done = False
    _session: GpuSession | None = None
    prior: Prior | None = None

    def _watch_gpu(self) -> None:
        """A cancel kills the GPU worker at once (its setup or a request in flight may
        otherwise take minutes); nothing is timed after it."""
        while not self._done:
            if self.cancel.wait(0.2):
                if self._session is not None:
                    self._session.cancel()
                return

    def checkpoint(self, result: TuneResult) -> None:
        """results.json as it stands, so a run stopped half way leaves what it measured."""
        from kls.tune.results import write_files

        with contextlib.suppress(OSError):
            write_files(dataclasses.replace(result, partial=True), self.folder, None)

    def _current_unit(self, cs: CandidateSet) -> BuildUnit | None:
        op = self.spec.op
        if op is None:
            return None
        build_vars = {
            k: self.spec.variables[k]
            for k in (cs.units[0].build_vars if cs.units else {})
            if k in self.spec.variables
        }
        for u in cs.units:
            if u.choice.op == op and u.build_vars == build_vars:
                return u
        from kls.tune.candidates import compatible_ops

        for c in compatible_ops(self.spec):
            if c.op == op:
                return BuildUnit(unit_id(c.op, build_vars), c, build_vars)
        return None

    # -- builds -----------------------------------------------------------------------------
    def _build(self, units: list[BuildUnit], result: TuneResult, stage1: _Stage1 | None) -> None:
        if self.options.executor == "local":
            self._check_toolchain()  # (Ray's builder nodes bring their own nvcc)
        executor = make_executor(self.options, units[0].choice.op.startswith("cutlass3x"))
        result.notes.append(f"builds: {executor.describe()}")
        libs = self.folder / "libs"
        libs.mkdir(parents=True, exist_ok=True)
        remote = isinstance(executor, RayExecutor)
        tasks = [
            BuildTask(
                u.id,
                u.spec(self.spec),
                self.options.compile,
                self._template_texts() if remote else {},
                build_resources(self.spec, u.choice.op.startswith("cutlass3x")),
                return_bytes=remote,
            )
            for u in units
        ]
        records = {b.unit: b for b in result.builds}
        by_id = {u.id: u for u in units}
        self.progress.phase = "building"
        self.progress.builds_total = len(tasks)
        self.say(self.progress)
        started = time.monotonic()
        watcher = threading.Thread(target=self._watch_cancel, args=(executor,), daemon=True)
        watcher.start()
        try:
            for outcome in executor.run(tasks):
                record = records[outcome.id]
                self._record_build(record, outcome, libs)
                self.progress.builds_done += 1
                self.progress.builds_failed += 0 if record.ok else 1
                self.say(self.progress)
                if record.ok and stage1 is not None:
                    stage1.submit(by_id[outcome.id], record)
                if self.cancel.is_set():
                    break
        finally:
            result.build_seconds = time.monotonic() - started
            self._stop_watch = True
            executor.close()

    _stop_watch = False

    def _check_toolchain(self) -> None:
        """nvcc and the CUTLASS headers once, before any build: a missing or wrong nvcc is one
        message, not the same failure for every candidate."""
        from kls.compile.toolchain import ToolchainError, find_toolchain

        try:
            find_toolchain(self.options.compile.nvcc, self.options.compile.cutlass_include)
        except ToolchainError as exc:
            raise TuneError(f"{exc}; nothing was built") from None

    def _watch_cancel(self, executor: Executor) -> None:
        while not self._stop_watch:
            if self.cancel.wait(0.2):
                executor.cancel()
                return

    def _template_texts(self) -> dict[str, str]:
        texts: dict[str, str] = {}
        for p in (self.spec.template, self.spec.argument_template, self.spec.epilogue_template):
            if p is None or is_python_ref(p):
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                texts[str(p)] = p.read_text(encoding="utf-8")
        return texts

    def _record_build(self, record: BuildRecord, outcome: BuildOutcome, libs: Path) -> None:
        record.ok = outcome.ok
        record.cached = outcome.cached
        record.seconds = outcome.seconds
        record.error = outcome.error
        record.node = outcome.node
        if not outcome.ok:
            return
        target = libs / f"{record.unit}.so"
        try:
            if outcome.data is not None:
                target.write_bytes(outcome.data)
            elif outcome.artifact is not None:
                shutil.copyfile(outcome.artifact, target)
            record.library = str(target)
        except OSError as exc:
            record.ok = False
            record.error = f"cannot keep the built library: {exc}"

    # -- GPU ----------------------------------------------------------------------------------
    def _gpu(
        self, units: list[BuildUnit], shapes: list[tuple[int, int, int]], result: TuneResult
    ) -> tuple[GpuSession, dict[tuple[str, bool], _ShapePlan]]:
        """Start the worker first (no GPU: stop before building anything), with every shape's
        tensors; and the C parameters and size arguments of each (shape, swap) from a render."""
        plans: dict[tuple[str, bool], _ShapePlan] = {}
        tensors: dict[str, dict[str, Any]] = {}
        for shape in shapes:
            key = shape_key(shape)
            for unit in _representatives(self.spec, units):
                plan = self._shape_plan(unit, shape)
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
            "reference": self.spec.reference if self.spec.reference != "none" else "gemm",
            "alpha": self.spec.alpha,
            "beta": self.spec.beta,
            "seed": self.options.seed,
            "samples": 256,
        }
        gpu = GpuSession(setup, self.options.worker, self.options.timeout_s)
        self._session = gpu
        if self.cancel.is_set():
            gpu.cancel()
        try:
            gpu.start()
        except GpuUnavailable as exc:
            if gpu.cancelled:
                raise TuneError("cancelled") from None
            raise NoGpu(f"{exc}; to only build the candidates, use --build-only") from None
        return gpu, plans

    def _shape_plan(self, unit: BuildUnit, shape: tuple[int, int, int]) -> _ShapePlan:
        base = unit.spec(self.spec)
        shaped = at_shape(base, shape)
        limits = Limits(seconds=RENDER_SECONDS)
        built_text = render_isolated(base, None, limits).text
        rendered = render_isolated(shaped, None, limits)
        if rendered.text is None or rendered.op is None:
            first = rendered.findings[0].message if rendered.findings else "render failed"
            raise TuneError(f"'{self.spec.name}' does not render at {shape_key(shape)}: {first}")
        job = make_job(shaped, rendered, Path("unused"), BenchOptions())
        problem = ""
        if rendered.text != built_text:
            problem = (
                f"{shape_key(shape)}: the rendered source differs from the instance's own "
                "shape (sizes are not runtime arguments for this template/profile), so one "
                "build cannot serve it; it is not timed"
            )
        return _ShapePlan(
            rendered.op.should_swap_xw,
            job.params,
            [list(a) for a in job.extra_args],
            job.tensors,
            problem,
            runtime_variables(self.spec),
        )

    def _stage2(
        self,
        gpu: GpuSession,
        stage1: _Stage1,
        units: list[BuildUnit],
        cs: CandidateSet,
        keys: list[str],
        current: BuildUnit | None,
        result: TuneResult,
    ) -> None:
        keys = stage1.keys  # shapes one build can serve
        chosen = stage1.top(self.options.stage2_per_shape, self.options.stage2_ops)
        if current is not None and current.id not in chosen and stage1.built(current.id):
            chosen.append(current.id)
        by_id = {u.id: u for u in units}
        combos = cs.runtime_combos
        self.progress.phase = "stage 2"
        self.progress.timed = 0
        self.progress.timed_failed = 0
        self.progress.timed_total = len(keys) * (len(chosen) * len(combos) + 2)
        self.say(self.progress)
        for key in keys:
            if self.cancel.is_set():
                return
            wanted = [key_of(uid, key, combo, 2) for uid in chosen for combo in combos]
            reused = self.prior.bar(key, 2, wanted) if self.prior is not None else None
            if reused is not None:
                self._stage2_shape(gpu, stage1, by_id, chosen, combos, key, result)
                result.baselines.append(reused)
                self._tick(True)
                self._tick(True)
                continue
            base = Baseline(key, False, stage=2)
            self.time_bar(gpu, base, self.options.stage2)
            if self.cancel.is_set():
                return
            self._stage2_shape(gpu, stage1, by_id, chosen, combos, key, result)
            if self.cancel.is_set():
                return
            self.time_bar(gpu, base, self.options.stage2)
            result.baselines.append(base)
        self._judge(result, chosen, combos, keys, current)

    def time_bar(self, gpu: GpuSession, base: Baseline, timing: Timing) -> None:
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
        if self.cancel.is_set() or answer.get("stage") == "cancelled":
            return
        self._tick(bool(answer.get("ok")))
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

    def _stage2_shape(
        self,
        gpu: GpuSession,
        stage1: _Stage1,
        by_id: dict[str, BuildUnit],
        chosen: list[str],
        combos: list[dict[str, Any]],
        key: str,
        result: TuneResult,
    ) -> None:
        for uid in chosen:
            for combo in combos:
                if self.cancel.is_set():
                    return
                m = stage1.measure(by_id[uid], key, combo, 2, self.options.stage2)
                if self.cancel.is_set():
                    return  # (a measurement the cancel cut short is no result)
                result.measurements.append(m)
                self._tick(m.ok)

    def _tick(self, ok: bool) -> None:
        self.progress.timed += 1
        self.progress.timed_failed += 0 if ok else 1
        self.say(self.progress)

    def _judge(
        self,
        result: TuneResult,
        chosen: list[str],
        combos: list[dict[str, Any]],
        keys: list[str],
        current: BuildUnit | None,
    ) -> None:
        cublas = result.cublas_ms(2)
        ops = {b.unit: b for b in result.builds}
        stage2 = [m for m in result.measurements if m.stage == 2]
        for key in keys:
            rows = [m for m in stage2 if m.shape == key and m.ok and m.median_ms]
            best = min(rows, key=lambda m: m.median_ms or 0.0) if rows else None
            base = cublas.get(key)
            result.best.append(
                ShapeBest(
                    key,
                    best.unit if best else None,
                    ops[best.unit].op if best else None,
                    best.vars if best else {},
                    best.median_ms if best else None,
                    best.spread if best else None,
                    best.tflops if best else None,
                    base,
                    base / best.median_ms if best and base and best.median_ms else None,
                )
            )
        choices: list[Choice] = []
        for uid in chosen:
            for combo in combos:
                per: dict[str, float] = {}
                for key in keys:
                    m = next(
                        (
                            m
                            for m in stage2
                            if m.unit == uid and m.vars == combo and m.shape == key and m.ok
                        ),
                        None,
                    )
                    base = cublas.get(key)
                    if m and m.median_ms and base:
                        per[key] = base / m.median_ms
                complete = len(per) == len(keys)
                mean = geomean(list(per.values())) if complete else None
                choice = Choice(uid, ops[uid].op, dict(combo), mean, per)
                choices.append(choice)
                is_current = current is not None and uid == current.id
                if is_current and own_values(self.spec, combo) == combo:
                    result.current = choice
        ranked = [c for c in choices if c.geomean_vs_cublas is not None]
        if ranked:
            result.winner = max(ranked, key=lambda c: c.geomean_vs_cublas or 0.0)


@dataclass
class _ShapePlan:
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


def clocks_of(answer: dict[str, Any]) -> tuple[float | None, float | None]:
    """The median SM clock (MHz) and board power (W) the worker read while timing."""
    clocks = answer.get("clocks") or {}
    sm, power = clocks.get("sm_clock_mhz"), clocks.get("power_w")
    return (float(sm) if sm is not None else None, float(power) if power is not None else None)


# What kls.render passes for a runtime variable the instance leaves unset.
RUNTIME_DEFAULTS: dict[str, Any] = {"swizzle": 1}


def own_values(spec: InstanceSpec, names: Any) -> dict[str, Any]:
    """The instance's own values of `names`: its variables, and for a runtime variable it
    leaves unset the value its render passes (so its current choice is found and measured)."""
    runtime = runtime_variables(spec)
    out: dict[str, Any] = {}
    for name in names:
        if name in spec.variables:
            out[name] = spec.variables[name]
        elif name in runtime and name in RUNTIME_DEFAULTS:
            out[name] = RUNTIME_DEFAULTS[name]
    return out


def swap_of(spec: InstanceSpec, unit: BuildUnit) -> bool:
    """Whether Inductor swaps X and W for this op (a bias with a TMA epilogue): the call's
    size arguments follow the swap."""
    from kls.cutlass.ops import OpLookupError
    from kls.profiles.common import tensor_layout as _layout
    from kls.profiles.torch211.ops import emit_instance_torch211

    x, w, b, y = (_layout(spec.tensors.get(n)) for n in ("X", "W", "Bias", "Y"))
    if x is None or w is None or y is None:
        return False
    try:
        emitted = emit_instance_torch211(
            unit.choice.op, x, w, b, y, spec.sm, unit.choice.level, spec.torch_package
        )
        return emitted.should_swap_xw
    except OpLookupError:
        return False


def _representatives(spec: InstanceSpec, units: list[BuildUnit]) -> list[BuildUnit]:
    """One unit per swap setting is enough to learn the call arguments of a shape."""
    seen: dict[bool, BuildUnit] = {}
    for u in units:
        seen.setdefault(swap_of(spec, u), u)
    return list(seen.values())


class _Stage1:
    """Stage 1 on its own thread: each built unit, every shape, one runtime setting; cuBLAS
    timed the same way before the first unit and after the last (its stage-1 bar)."""

    def __init__(
        self,
        tuner: Tuner,
        gpu: GpuSession,
        plans: dict[tuple[str, bool], _ShapePlan],
        keys: list[str],
        cs: CandidateSet,
        units: list[BuildUnit],
        result: TuneResult,
    ) -> None:
        self.tuner = tuner
        self.gpu = gpu
        self.plans = plans
        self.keys = [
            k for k in keys if not any(p.problem for (pk, _), p in plans.items() if pk == k)
        ]
        self.result = result
        own = own_values(tuner.spec, cs.runtime_combos[0])
        self.combo = own if own in cs.runtime_combos else cs.runtime_combos[0]
        self.unit_ids = [u.id for u in units]
        self.bars: dict[str, Baseline] = {}
        self.reused: set[str] = set()
        self.queue: list[tuple[BuildUnit, BuildRecord]] = []
        self.cond = threading.Condition()
        self.closed = False
        self.stopped = False
        self.records: dict[str, BuildRecord] = {}
        self.swap: dict[str, bool] = {}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def submit(self, unit: BuildUnit, record: BuildRecord) -> None:
        with self.cond:
            self.queue.append((unit, record))
            self.records[unit.id] = record
            self.cond.notify()

    def built(self, uid: str) -> bool:
        return uid in self.records

    def finish(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join()

    def stop(self) -> None:
        """End now (an error or a cancel): no more candidates, and no closing cuBLAS runs."""
        with self.cond:
            self.closed = True
            self.stopped = True
            self.queue.clear()
            self.cond.notify()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.closed:
                    self.cond.wait()
                if not self.queue:
                    break
                unit, _record = self.queue.pop(0)
            if not self.bars:
                self._time_bars()
            for key in self.keys:
                if self.tuner.cancel.is_set() or self.stopped:
                    return
                m = self.measure(unit, key, self.combo, 1, self.tuner.options.stage1)
                if self.tuner.cancel.is_set() or self.stopped:
                    return  # (a measurement the stop cut short is no result)
                with self.tuner.lock:
                    self.result.measurements.append(m)
                    self.tuner._tick(m.ok)
                    self._best()
        if self.bars and not self.tuner.cancel.is_set() and not self.stopped:
            self._time_bars()  # the closing run of each bar, after a normal finish()

    def _time_bars(self) -> None:
        """One cuBLAS run per shape with the stage-1 timing. The first call adds the bars to
        the result, or takes the last run's bar of a shape whose stage-1 measurements all
        come from that run (kls.tune.resume); a bar taken so is not timed again."""
        for key in self.keys:
            if self.tuner.cancel.is_set() or self.stopped:
                return
            if key not in self.bars:
                self.bars[key] = self._new_bar(key)
            if key not in self.reused:
                self.tuner.time_bar(self.gpu, self.bars[key], self.tuner.options.stage1)

    def _new_bar(self, key: str) -> Baseline:
        prior = self.tuner.prior
        reused = None
        if prior is not None:  # (a unit whose build failed last time has nothing to reuse)
            built = [uid for uid in self.unit_ids if uid in prior.built]
            reused = prior.bar(key, 1, [key_of(uid, key, self.combo, 1) for uid in built])
        bar = dataclasses.replace(reused) if reused else Baseline(key, False, stage=1)
        with self.tuner.lock:
            self.result.baselines.append(bar)
            if reused is not None:
                self.reused.add(key)
                self.tuner._tick(True)
                self.tuner._tick(True)
        return bar

    def _best(self) -> None:
        rows = [m for m in self.result.measurements if m.ok and m.stage == 1 and m.tflops]
        if rows:
            top = max(rows, key=lambda m: m.tflops or 0.0)
            bar = self.bars.get(top.shape)
            vs = (
                f", {bar.median_ms / top.median_ms:.2f}x cuBLAS"
                if bar is not None and bar.median_ms and top.median_ms
                else ""
            )
            self.tuner.progress.best = f"{top.tflops:.0f} TFLOP/s at {top.shape} ({top.unit}{vs})"

    def measure(
        self, unit: BuildUnit, key: str, combo: dict[str, Any], stage: int, timing: Timing
    ) -> Measurement:
        prior = self.tuner.prior
        reused = prior.take(unit.id, key, combo, stage) if prior is not None else None
        if reused is not None:
            return dataclasses.replace(reused)
        record = self.records[unit.id]
        swap = self._swap(unit)
        plan = self.plans.get((key, swap)) or next(
            p for (k, _), p in self.plans.items() if k == key
        )
        answer = self.gpu.request(
            {
                "kind": "candidate",
                "id": f"{unit.id}@{key}",
                "shape": key,
                "library": str(Path(record.library or "").resolve()),
                "symbol": self.tuner.spec.kernel_name,
                "params": plan.params,
                "extra_args": plan.args_for(combo),
                "timing": dataclasses.asdict(timing),
            }
        )
        m = Measurement(unit.id, dict(combo), key, stage, bool(answer.get("ok")))
        verification = answer.get("verification") or {}
        if "max_error" in verification:
            m.max_error = float(verification["max_error"])
        if m.ok and "timing" in answer:
            t = answer["timing"]
            m.median_ms = float(t["median"])
            m.spread = float(t["spread"])
            m.samples = int(t["n"])
            m.tflops = flops(key) / (m.median_ms * 1e-3) / 1e12
            m.sm_clock_mhz, m.power_w = clocks_of(answer)
        else:
            m.ok = False
            m.error = f"{answer.get('stage', '?')}: {answer.get('error', 'failed')}"
        return m

    def _swap(self, unit: BuildUnit) -> bool:
        if unit.id not in self.swap:
            self.swap[unit.id] = swap_of(self.tuner.spec, unit)
        return self.swap[unit.id]

    def top(self, per_shape: int, cap: int) -> list[str]:
        """Each shape's best `per_shape` ops by stage-1 time (every shape's fastest first,
        even past `cap`), then the best by geometric mean over shapes up to `cap`."""
        rows = [m for m in self.result.measurements if m.stage == 1 and m.ok and m.median_ms]
        ranked = {
            key: sorted((m for m in rows if m.shape == key), key=lambda m: m.median_ms or 0)
            for key in self.keys
        }
        chosen: list[str] = []
        for rank in range(per_shape):
            for key in self.keys:
                fits = len(chosen) < (max(cap, STAGE2_MAX_OPS) if rank == 0 else cap)
                if fits and rank < len(ranked[key]) and ranked[key][rank].unit not in chosen:
                    chosen.append(ranked[key][rank].unit)
        by_unit: dict[str, list[float]] = {}
        for m in rows:
            by_unit.setdefault(m.unit, []).append(flops(m.shape) / (m.median_ms or 1))
        complete = {u: v for u, v in by_unit.items() if len(v) == len(self.keys)}
        for u in sorted(complete, key=lambda u: -(geomean(list(complete[u])) or 0)):
            if len(chosen) >= cap:
                break
            if u not in chosen:
                chosen.append(u)
        return chosen
