"""Building a tune's candidates on an executor (kls.tune.executors): the libraries are kept
under the results folder, and each one that builds is handed on (to stage 1) at once."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kls.instances import InstanceSpec
from kls.template.source import is_python_ref
from kls.tune.candidates import BuildUnit
from kls.tune.executors import (
    BuildOutcome,
    BuildTask,
    Executor,
    LocalExecutor,
    RayExecutor,
    Resources,
    build_resources,
    local_slots,
)
from kls.tune.options import TuneError, TuneOptions, TuneRun
from kls.tune.results import BuildRecord, TuneResult


def make_executor(options: TuneOptions, resources_3x: bool) -> Executor:
    if options.executor == "ray":
        try:
            return RayExecutor(options.ray_address)
        except Exception as exc:
            raise TuneError(str(exc)) from None
    if options.executor != "local":
        raise TuneError(f"unknown executor '{options.executor}' (local or ray)")
    need = Resources(1.0, int(2.5 * 1024**3) if resources_3x else int(1.5 * 1024**3))
    return LocalExecutor(options.slots or local_slots(need))


def build_all(
    run: TuneRun,
    units: list[BuildUnit],
    result: TuneResult,
    libs: Path,
    on_built: Callable[[BuildUnit, BuildRecord], None] | None,
) -> None:
    """Build every unit, filling its record in `result`; `on_built` gets each one that built."""
    options = run.options
    if options.executor == "local":
        check_toolchain(options)  # (Ray's builder nodes bring their own nvcc)
    executor = make_executor(options, units[0].choice.op.startswith("cutlass3x"))
    result.notes.append(f"builds: {executor.describe()}")
    libs.mkdir(parents=True, exist_ok=True)
    remote = isinstance(executor, RayExecutor)
    tasks = [
        BuildTask(
            u.id,
            u.spec(run.spec),
            options.compile,
            template_texts(run.spec) if remote else {},
            build_resources(run.spec, u.choice.op.startswith("cutlass3x")),
            return_bytes=remote,
        )
        for u in units
    ]
    records = {b.unit: b for b in result.builds}
    by_id = {u.id: u for u in units}
    run.progress.phase = "building"
    run.progress.builds_total = len(tasks)
    run.say(run.progress)
    started = time.monotonic()
    done = threading.Event()
    watcher = threading.Thread(target=_watch_cancel, args=(run.cancel, done, executor), daemon=True)
    watcher.start()
    try:
        for outcome in executor.run(tasks):
            record = records[outcome.id]
            record_build(record, outcome, libs)
            run.progress.builds_done += 1
            run.progress.builds_failed += 0 if record.ok else 1
            run.say(run.progress)
            if record.ok and on_built is not None:
                on_built(by_id[outcome.id], record)
            if run.cancel.is_set():
                break
    finally:
        result.build_seconds = time.monotonic() - started
        done.set()
        executor.close()


def check_toolchain(options: TuneOptions) -> None:
    """nvcc and the CUTLASS headers once, before any build: a missing or wrong nvcc is one
    message, not the same failure for every candidate."""
    from kls.compile.toolchain import ToolchainError, find_toolchain

    try:
        find_toolchain(options.compile.nvcc, options.compile.cutlass_include)
    except ToolchainError as exc:
        raise TuneError(f"{exc}; nothing was built") from None


def _watch_cancel(cancel: threading.Event, done: threading.Event, executor: Executor) -> None:
    while not done.is_set():
        if cancel.wait(0.2):
            executor.cancel()
            return


def template_texts(spec: InstanceSpec) -> dict[str, str]:
    """The instance's template files by path, for builder nodes that do not share them."""
    texts: dict[str, str] = {}
    for p in (spec.template, spec.argument_template, spec.epilogue_template):
        if p is None or is_python_ref(p):
            continue
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts[str(p)] = p.read_text(encoding="utf-8")
    return texts


def record_build(record: BuildRecord, outcome: BuildOutcome, libs: Path) -> None:
    """The outcome in its record, and the library kept in `libs`."""
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
