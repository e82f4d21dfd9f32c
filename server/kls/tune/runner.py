"""`kls tune` from start to end: plan the candidates (kls.tune.plan), build them
(kls.tune.building), then verify-and-time in two stages (kls.tune.stage1, kls.tune.stage2).

Builds run on the executor; each library that comes back is queued for stage 1 on the GPU
while the other builds go on. Stage 1 times every built op once per shape with a short
timing; stage 2 times the best of them with every runtime-variable combination and the full
timing, and the winners come from stage 2 alone. results.json is written after stage 1 (a
checkpoint) and at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

from kls.bench.run import source_hash
from kls.instances import InstanceSpec
from kls.render import Limits
from kls.sandbox.workers import render_isolated
from kls.tune.building import build_all, make_executor
from kls.tune.gpu import GpuSession
from kls.tune.options import (
    RENDER_SECONDS,
    STAGE1_TIMING,
    STAGE2_TIMING,
    NoGpu,
    Progress,
    TuneError,
    TuneOptions,
    results_folder,
)
from kls.tune.plan import make_plan, start_result
from kls.tune.results import TuneResult
from kls.tune.resume import Prior, load_prior
from kls.tune.stage1 import Stage1
from kls.tune.stage2 import run_stage2
from kls.tune.timing import start_gpu

__all__ = [
    "STAGE1_TIMING",
    "STAGE2_TIMING",
    "NoGpu",
    "Progress",
    "TuneError",
    "TuneOptions",
    "Tuner",
    "make_executor",
    "results_folder",
]

STOP_JOIN_S = 10.0  # for the stage-1 thread to see the stop, after an error or a cancel


class Tuner:
    """One tune of one instance; `run()` returns its result (`result` holds it meanwhile)."""

    def __init__(
        self,
        spec: InstanceSpec,
        options: TuneOptions,
        on_progress: Callable[[Progress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.spec = spec
        self.options = options
        self.say: Callable[[Progress], None] = on_progress or (lambda _p: None)
        self.cancel = cancel or threading.Event()
        self.progress = Progress("candidates")
        self.folder = results_folder(spec)
        self.lock = threading.Lock()
        self.result: TuneResult | None = None  # what is known so far (kept on interrupt)
        self.prior: Prior | None = None
        self._session: GpuSession | None = None
        self._done = False

    def run(self) -> TuneResult:
        plan = make_plan(self.spec, self.options.limit)
        rendered = render_isolated(self.spec, None, Limits(seconds=RENDER_SECONDS)).text
        rendered_hash = source_hash(rendered) if rendered is not None else ""
        result = start_result(self.spec, self.options, plan, rendered_hash)
        self.result = result
        units, keys = plan.units, plan.keys
        gpu = None
        stage1: Stage1 | None = None
        if self.options.resume and self.options.build_only:
            result.notes.append(
                "--resume has nothing to take in a --build-only run: builds always come from "
                "the compile cache"
            )
        if not self.options.build_only:
            threading.Thread(target=self._watch_gpu, daemon=True).start()
            try:
                gpu, plans = start_gpu(self, units, plan.shapes, result, self._started)
            except BaseException:
                self._done = True
                raise
            if self.options.resume:
                self.prior, note = load_prior(self.folder / "results.json", result, gpu.device)
                if note:
                    result.notes.append(note)
            stage1 = Stage1(self, gpu, plans, keys, plan.candidates, units, result)
            self.progress.timed_total = (len(units) + 2) * len(stage1.keys)  # (+ cuBLAS, twice)
        try:
            build_all(self, units, result, self.folder / "libs", stage1.submit if stage1 else None)
            if stage1 is not None and gpu is not None and not self.cancel.is_set():
                stage1.finish()
                self.checkpoint(result)
                run_stage2(self, gpu, stage1, units, plan.candidates, plan.current, result)
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

    def tick(self, ok: bool) -> None:
        """One more GPU request answered (kls.tune.options.TuneRun)."""
        self.progress.timed += 1
        self.progress.timed_failed += 0 if ok else 1
        self.say(self.progress)

    def checkpoint(self, result: TuneResult) -> None:
        """results.json as it stands, so a run stopped half way leaves what it measured."""
        from kls.tune.results import write_files

        with contextlib.suppress(OSError):
            write_files(dataclasses.replace(result, partial=True), self.folder, None)

    def _started(self, session: GpuSession) -> None:
        self._session = session

    def _watch_gpu(self) -> None:
        """A cancel kills the GPU worker at once (its setup or a request in flight may
        otherwise take minutes); nothing is timed after it."""
        while not self._done:
            if self.cancel.wait(0.2):
                if self._session is not None:
                    self._session.cancel()
                return
