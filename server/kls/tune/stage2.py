"""Stage 2 of a tune, and the judging: the best `stage2_per_shape` ops of each shape (filled
up to `stage2_ops` by their stage-1 geometric mean, and always the instance's own op) timed
with every runtime-variable combination on every shape, with the full timing, cuBLAS timed
before and after each shape's candidates. The winners come from stage 2 alone: per shape the
fastest verified configuration, and overall the configuration with the best geometric mean
over shapes (what `--apply` writes), and the best of each M bucket (kls.tune.dispatch)."""

from __future__ import annotations

from typing import Any

from kls.tune.candidates import BuildUnit, CandidateSet
from kls.tune.dispatch import bucket_choices
from kls.tune.gpu import GpuSession
from kls.tune.options import TuneRun
from kls.tune.plan import own_values
from kls.tune.results import Baseline, Choice, ShapeBest, TuneResult, geomean
from kls.tune.resume import key_of
from kls.tune.stage1 import Stage1
from kls.tune.timing import time_bar


def run_stage2(
    run: TuneRun,
    gpu: GpuSession,
    stage1: Stage1,
    units: list[BuildUnit],
    cs: CandidateSet,
    current: BuildUnit | None,
    result: TuneResult,
) -> None:
    keys = stage1.keys  # shapes one build can serve
    chosen = stage1.top(run.options.stage2_per_shape, run.options.stage2_ops)
    if current is not None and current.id not in chosen and stage1.built(current.id):
        chosen.append(current.id)
    by_id = {u.id: u for u in units}
    combos = cs.runtime_combos
    run.progress.phase = "stage 2"
    run.progress.timed = 0
    run.progress.timed_failed = 0
    run.progress.timed_total = len(keys) * (len(chosen) * len(combos) + 2)
    run.say(run.progress)
    for key in keys:
        if run.cancel.is_set():
            return
        wanted = [key_of(uid, key, combo, 2) for uid in chosen for combo in combos]
        reused = run.prior.bar(key, 2, wanted) if run.prior is not None else None
        if reused is not None:
            _time_shape(run, stage1, by_id, chosen, combos, key, result)
            result.baselines.append(reused)
            run.tick(True)
            run.tick(True)
            continue
        base = Baseline(key, False, stage=2)
        time_bar(run, gpu, base, run.options.stage2)
        if run.cancel.is_set():
            return
        _time_shape(run, stage1, by_id, chosen, combos, key, result)
        if run.cancel.is_set():
            return
        time_bar(run, gpu, base, run.options.stage2)
        result.baselines.append(base)
    judge(run, result, chosen, combos, keys, current, by_n=cs.dispatch == "mn")


def _time_shape(
    run: TuneRun,
    stage1: Stage1,
    by_id: dict[str, BuildUnit],
    chosen: list[str],
    combos: list[dict[str, Any]],
    key: str,
    result: TuneResult,
) -> None:
    for uid in chosen:
        for combo in combos:
            if run.cancel.is_set():
                return
            m = stage1.measure(by_id[uid], key, combo, 2, run.options.stage2)
            if run.cancel.is_set():
                return  # (a measurement the cancel cut short is no result)
            result.measurements.append(m)
            run.tick(m.ok)


def judge(
    run: TuneRun,
    result: TuneResult,
    chosen: list[str],
    combos: list[dict[str, Any]],
    keys: list[str],
    current: BuildUnit | None,
    by_n: bool = False,
) -> None:
    """Each shape's best, the winner, the current choice and the dispatch's buckets (by N
    too with `by_n`), from stage 2's measurements."""
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
            if is_current and own_values(run.spec, combo) == combo:
                result.current = choice
    ranked = [c for c in choices if c.geomean_vs_cublas is not None]
    if ranked:
        result.winner = max(ranked, key=lambda c: c.geomean_vs_cublas or 0.0)
    result.dispatch = bucket_choices(choices, keys, by_n)
