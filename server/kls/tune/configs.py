"""`kls tune` for a template whose choice is a config rather than an op (the triton profile:
num_warps, num_stages and the template's variables such as BLOCK_M).

The space is Inductor's own: the configs its template heuristics try for the instance's
tensors on the instance's device model (`Profile.config_space`, read from Inductor's
lowering in the torch worker), plus every combination the instance's tune table lists
(`[instances.NAME.tune]`, e.g. `BLOCK_K = [64, 128]`, `num_stages = [3, 4, 5]`, applied over the
instance's own config), plus the instance's own config; each with every flag set the profile
offers (flex: USE_TMA, and the promises its mask keeps). Each candidate is rendered and compiled
by Triton for the target first (no GPU): one whose shared memory exceeds the device's limit or
that fails to compile is dropped there, with the reason. Then, on the GPU, each survivor is
verified and timed briefly (stage 1, L2 warm is not assumed: the CUDA benchmark's method with a
short budget), and the best few, with the instance's own, again with the full budget (stage 2).
The fastest verified stage-2 config wins; `--apply` writes it to kls.toml.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kls.bench.history import History
from kls.bench.job import BenchJob, Timing
from kls.bench.run import BenchOptions, benchmark_instance, worker_command
from kls.bench.runner import WorkerOutcome, outcome_of
from kls.compile import CompileOptions, compile_instance
from kls.instances import InstanceSpec
from kls.instances.tune_table import TuneSpace
from kls.profiles.base import ConfigSpace
from kls.profiles.triton.overridden import constexprs, overridden_in, printed_value
from kls.tune.gpu import GpuSession

LAUNCH = ("num_warps", "num_stages")
STAGE1 = Timing(warmup_s=0.2, min_samples=10, min_seconds=0.2, max_samples=200, max_seconds=1.5)
STAGE2_COUNT = 3  # the best of stage 1 timed again, with the instance's own config
Progress = Callable[[str], None]


@dataclass
class ConfigTrial:
    """One candidate config and what became of it."""

    config: dict[str, Any]
    origin: str  # "current" (the instance's own), "inductor", "tune table"
    problem: str = ""  # why it was dropped or failed ('' while it stands)
    stage1_ms: float | None = None
    stage2_ms: float | None = None
    spread: float | None = None
    verified: bool = False
    registers: int | None = None
    shared_bytes: int | None = None
    # Every constexpr the compiled module prints (NAME -> value): the kernel as made, to tell
    # two candidates that Inductor made alike. Not kept in the results file.
    made: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "made"}

    def label(self, keys: tuple[str, ...] | None = None) -> str:
        """The config in words: `keys` only (those that vary among the trials), else all."""
        shown = (
            self.config if keys is None else {k: self.config[k] for k in keys if k in self.config}
        )
        return ", ".join(f"{k}={v}" for k, v in shown.items())


@dataclass
class ConfigTuneResult:
    instance: str
    trials: list[ConfigTrial] = field(default_factory=list)
    device: dict[str, Any] = field(default_factory=dict)
    method: str = ""
    build_only: bool = False
    notes: list[str] = field(default_factory=list)  # e.g. a flag not offered, and why

    @property
    def winner(self) -> ConfigTrial | None:
        timed = [t for t in self.trials if t.stage2_ms is not None and t.verified]
        return min(timed, key=lambda t: t.stage2_ms or 0.0) if timed else None

    @property
    def current(self) -> ConfigTrial | None:
        return next((t for t in self.trials if t.origin == "current"), None)

    def to_json(self) -> dict[str, Any]:
        winner = self.winner
        return {
            "format": "kls-config-tune",
            "format_version": 1,
            "instance": self.instance,
            "device": self.device,
            "method": self.method,
            "build_only": self.build_only,
            "notes": self.notes,
            "trials": [t.to_json() for t in self.trials],
            "winner": winner.to_json() if winner else None,
        }


def instance_config(spec: InstanceSpec) -> dict[str, Any]:
    """The instance's own config: its launch and its variables, in kls.toml's order."""
    return {"num_warps": spec.num_warps, "num_stages": spec.num_stages, **spec.variables}


def with_config(spec: InstanceSpec, config: dict[str, Any]) -> InstanceSpec:
    """`spec` with `config` in place of its launch and variables (the variables Inductor
    derives, such as EVEN_K, as the config gives them)."""
    variables = {k: v for k, v in config.items() if k not in LAUNCH}
    return dataclasses.replace(
        spec,
        variables={**spec.variables, **variables},
        num_warps=int(config.get("num_warps", spec.num_warps)),
        num_stages=int(config.get("num_stages", spec.num_stages)),
    )


def candidates(
    spec: InstanceSpec, space: TuneSpace, found: ConfigSpace, limit: int | None
) -> list[ConfigTrial]:
    """The instance's own config, the tune table's combinations over it, then Inductor's;
    each of them with each of the profile's flag sets (flex: USE_TMA, the promises its mask
    keeps); each config once (the first origin kept), at most `limit`."""
    own = instance_config(spec)
    trials: dict[str, ConfigTrial] = {}

    def add(config: dict[str, Any], origin: str) -> None:
        key = json.dumps(config, sort_keys=True, default=str)
        trials.setdefault(key, ConfigTrial(config, origin))

    add(own, "current")
    bases = [(own, "flags")]
    bases += [({**own, **combo}, "tune table") for combo in space.combos(tuple(space.variables))]
    bases += [
        ({**own, **{k: v for k, v in config.items() if found.complete or k in own}}, "inductor")
        for config in found.configs
    ]
    for config, origin in bases:
        for flags in found.flag_sets:
            add({**config, **flags}, origin)
    chosen = list(trials.values())
    return chosen[:limit] if limit else chosen


def prune(trial: ConfigTrial, spec: InstanceSpec, cancel: threading.Event | None) -> None:
    """Render and compile the candidate for its target (Triton's compile, no GPU): a
    candidate that fails, or whose shared memory exceeds the device's limit, is dropped."""
    options = CompileOptions(mode="build")
    built = compile_instance(with_config(spec, trial.config), options, None, cancel)
    figures = built.triton or {}
    trial.registers = figures.get("registers")
    trial.shared_bytes = figures.get("shared")
    if not built.ok:
        first = built.errors[0] if built.errors else None
        trial.problem = f"{first.code}: {first.message}" if first else "compile failed"
        return
    module = (built.rendered.text if built.rendered is not None else None) or ""
    printed = constexprs(module)
    trial.made = {k: printed_value(v) for k, v in printed.items()}
    variables = {k: v for k, v in trial.config.items() if k not in LAUNCH}
    changed = overridden_in(variables, printed)
    # The config as Inductor made the kernel (flex's USE_TMA turned off where TMA cannot be
    # used): what runs, what is timed, what --apply writes.
    trial.config = {**trial.config, **{k: printed_value(v) for k, v in changed.items()}}


def drop_repeats(trials: list[ConfigTrial], keys: tuple[str, ...]) -> None:
    """A candidate whose kernel, as made, is an earlier one's is dropped, naming that one (a
    key a config leaves out counts with the value the module printed for it)."""
    every = sorted({k for t in trials for k in t.config})
    seen: dict[str, ConfigTrial] = {}
    for trial in trials:
        if trial.problem:
            continue
        made = {k: trial.config.get(k, trial.made.get(k)) for k in every}
        first = seen.setdefault(json.dumps(made, sort_keys=True, default=str), trial)
        if first is not trial:
            same = "the instance's own" if first.origin == "current" else first.label(keys)
            trial.problem = f"KT816: Inductor's lowering made the same kernel as {same}"


def time_trial(
    trial: ConfigTrial,
    spec: InstanceSpec,
    timing: Timing,
    history: History,
    cancel: threading.Event | None,
    runner: Callable[[BenchJob], WorkerOutcome] | None = None,
) -> tuple[float | None, dict[str, Any]]:
    """Verify and time the candidate on the GPU (in `runner`'s worker, else a fresh one): its
    median (ms) and the device, or None with the reason in `trial.problem`."""
    options = BenchOptions(timing=timing, baseline=False, runner=runner)
    report = benchmark_instance(
        with_config(spec, trial.config), options, cancel=cancel, history=history
    )
    if not report.ok or report.median_ms is None:
        trial.problem = report.message or "the benchmark failed"
        return None, report.device
    trial.verified = report.verified
    trial.spread = report.spread
    return report.median_ms, report.device


def run_config_tune(
    spec: InstanceSpec,
    space: TuneSpace,
    limit: int | None = None,
    build_only: bool = False,
    found: ConfigSpace | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    method: str = "events",
) -> ConfigTuneResult:
    """Tune `spec`'s config over `found` (Inductor's configs and the profile's flags:
    `Profile.config_space`), the tune table and its own config."""
    say = progress or (lambda _line: None)
    found = found or ConfigSpace([])
    result = ConfigTuneResult(spec.name, candidates(spec, space, found, limit))
    result.build_only = build_only
    result.notes = list(found.notes)
    flags = f", each with {len(found.flag_sets)} flag sets" if len(found.flag_sets) > 1 else ""
    result.method = (
        f"{len(result.trials)} configs ({len(found.configs)} from Inductor's heuristics{flags}); "
        "each compiled by Triton for the target first (dropped above the shared-memory limit or on "
        "a compile error); stage 1: verified and timed with a short budget (>= 10 samples, "
        f"<= 1.5 s); stage 2: the best {STAGE2_COUNT} and the instance's own, the CUDA "
        "benchmark's full budget; L2 flushed before each launch; one benchmark worker "
        "serves every candidate"
    )
    keys = varying_keys(result.trials)
    for i, trial in enumerate(result.trials, 1):
        say(f"compiling {i}/{len(result.trials)}: {trial.label(keys)}")
        prune(trial, spec, cancel)
    drop_repeats(result.trials, keys)
    standing = [t for t in result.trials if not t.problem]
    if build_only or not standing:
        return result
    history = History(Path(tempfile.mkdtemp(prefix="kls-config-tune-")))
    session = bench_session(spec)
    try:
        time_stages(result, standing, spec, history, cancel, method, say, runner_of(session))
    finally:
        session.finish()
    return result


def bench_session(spec: InstanceSpec) -> GpuSession:
    """One benchmark worker serving every candidate (`python -m kls.bench.worker --serve`,
    in the instance's profile's Python): torch and triton are imported once, not once a
    candidate; a candidate that takes the process down costs only itself."""
    command, env = worker_command(spec)
    return GpuSession({}, [*command, "--serve"], timeout_s=BenchOptions().timeout_s, env=env)


def runner_of(session: GpuSession) -> Callable[[BenchJob], WorkerOutcome]:
    def run(job: BenchJob) -> WorkerOutcome:
        found = session.request(job.to_json())
        return outcome_of({k: v for k, v in found.items() if k not in ("id", "fatal")})

    return run


def time_stages(
    result: ConfigTuneResult,
    standing: list[ConfigTrial],
    spec: InstanceSpec,
    history: History,
    cancel: threading.Event | None,
    method: str,
    say: Progress,
    runner: Callable[[BenchJob], WorkerOutcome],
) -> None:
    """Stage 1 for every standing candidate, then stage 2 for the best and the own."""
    keys = varying_keys(result.trials)
    for i, trial in enumerate(standing, 1):
        say(f"stage 1 {i}/{len(standing)}: {trial.label(keys)}")
        stage1 = dataclasses.replace(STAGE1, method=method)
        trial.stage1_ms, device = time_trial(trial, spec, stage1, history, cancel, runner)
        result.device = device or result.device
    timed = sorted(
        (t for t in standing if t.stage1_ms is not None), key=lambda t: t.stage1_ms or 0.0
    )
    finalists = timed[:STAGE2_COUNT]
    current = result.current
    if current is not None and current in timed and current not in finalists:
        finalists.append(current)
    for i, trial in enumerate(finalists, 1):
        say(f"stage 2 {i}/{len(finalists)}: {trial.label(keys)}")
        stage2 = Timing(method=method)
        trial.stage2_ms, _device = time_trial(trial, spec, stage2, history, cancel, runner)


def varying_keys(trials: list[ConfigTrial]) -> tuple[str, ...]:
    """The config keys whose values differ among `trials` (a key some configs lack, such as
    a flag, differs), in the order they first appear (every key where none differs)."""
    if not trials:
        return ()
    keys = list(dict.fromkeys(k for t in trials for k in t.config))
    first = trials[0].config
    varying = tuple(k for k in keys if any(t.config.get(k) != first.get(k) for t in trials))
    return varying or tuple(keys)  # one config (or all alike): all of it


def table(result: ConfigTuneResult) -> str:
    """The trials as a terminal table, fastest stage 2 first, then stage 1, then dropped."""

    def order(t: ConfigTrial) -> tuple[int, float]:
        if t.stage2_ms is not None:
            return 0, t.stage2_ms
        if t.stage1_ms is not None:
            return 1, t.stage1_ms
        return 2, 0.0

    keys = varying_keys(result.trials)
    lines = [f"{'stage 2 ms':>10}  {'stage 1 ms':>10}  {'origin':10}  config / why dropped"]
    for t in sorted(result.trials, key=order):
        s2 = f"{t.stage2_ms:10.4f}" if t.stage2_ms is not None else " " * 10
        s1 = f"{t.stage1_ms:10.4f}" if t.stage1_ms is not None else " " * 10
        why = f"  [{t.problem.split('. ')[0]}]" if t.problem else ""  # its first sentence
        lines.append(f"{s2}  {s1}  {t.origin:10}  {t.label(keys)}{why}")
    lines += [f"note: {note}" for note in result.notes]
    winner, current = result.winner, result.current
    if winner is not None:
        lines.append(f"winner: {winner.label(keys)} ({winner.stage2_ms:.4f} ms)")
        if current is not None and current.stage2_ms and winner is not current:
            lines.append(f"  {current.stage2_ms / (winner.stage2_ms or 1):.3f}x the instance's own")
    return "\n".join(lines)
