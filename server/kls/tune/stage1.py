"""Stage 1 of a tune: every built op, once per shape, at one setting of the runtime variables
(the instance's own, else the first listed), with a short timing; it runs on its own thread
while the other builds go on, and picks the ops stage 2 times again."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from kls.bench.job import Timing
from kls.tune.candidates import BuildUnit, CandidateSet
from kls.tune.gpu import GpuSession
from kls.tune.options import STAGE2_MAX_OPS, TuneRun
from kls.tune.plan import own_values
from kls.tune.results import Baseline, BuildRecord, Measurement, TuneResult, flops, geomean
from kls.tune.resume import key_of
from kls.tune.timing import ShapePlans, clocks_of, swap_of, time_bar


class Stage1:
    """Stage 1 on its own thread: each built unit, every shape, one runtime setting; cuBLAS
    timed the same way before the first unit and after the last (its stage-1 bar)."""

    def __init__(
        self,
        run: TuneRun,
        gpu: GpuSession,
        plans: ShapePlans,
        keys: list[str],
        cs: CandidateSet,
        units: list[BuildUnit],
        result: TuneResult,
    ) -> None:
        self.run = run
        self.gpu = gpu
        self.plans = plans
        self.keys = [
            k for k in keys if not any(p.problem for (pk, _), p in plans.items() if pk == k)
        ]
        self.result = result
        own = own_values(run.spec, cs.runtime_combos[0])
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
                if self.run.cancel.is_set() or self.stopped:
                    return
                m = self.measure(unit, key, self.combo, 1, self.run.options.stage1)
                if self.run.cancel.is_set() or self.stopped:
                    return  # (a measurement the stop cut short is no result)
                with self.run.lock:
                    self.result.measurements.append(m)
                    self.run.tick(m.ok)
                    self._best()
        if self.bars and not self.run.cancel.is_set() and not self.stopped:
            self._time_bars()  # the closing run of each bar, after a normal finish()

    def _time_bars(self) -> None:
        """One cuBLAS run per shape with the stage-1 timing. The first call adds the bars to
        the result, or takes the last run's bar of a shape whose stage-1 measurements all
        come from that run (kls.tune.resume); a bar taken so is not timed again."""
        for key in self.keys:
            if self.run.cancel.is_set() or self.stopped:
                return
            if key not in self.bars:
                self.bars[key] = self._new_bar(key)
            if key not in self.reused:
                time_bar(self.run, self.gpu, self.bars[key], self.run.options.stage1)

    def _new_bar(self, key: str) -> Baseline:
        prior = self.run.prior
        reused = None
        if prior is not None:  # (a unit whose build failed last time has nothing to reuse)
            built = [uid for uid in self.unit_ids if uid in prior.built]
            reused = prior.bar(key, 1, [key_of(uid, key, self.combo, 1) for uid in built])
        bar = dataclasses.replace(reused) if reused else Baseline(key, False, stage=1)
        with self.run.lock:
            self.result.baselines.append(bar)
            if reused is not None:
                self.reused.add(key)
                self.run.tick(True)
                self.run.tick(True)
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
            self.run.progress.best = f"{top.tflops:.0f} TFLOP/s at {top.shape} ({top.unit}{vs})"

    def measure(
        self, unit: BuildUnit, key: str, combo: dict[str, Any], stage: int, timing: Timing
    ) -> Measurement:
        prior = self.run.prior
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
                "symbol": self.run.spec.kernel_name,
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
            self.swap[unit.id] = swap_of(self.run.spec, unit)
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
