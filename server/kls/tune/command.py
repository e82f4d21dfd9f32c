"""`kls tune` on the terminal: the progress line, the table or JSON, the files, --apply."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from typing import TextIO

from kls.compile import CompileOptions
from kls.instances import InstanceSpec
from kls.profiles import profile
from kls.tune.results import TuneResult, table, write_files

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class ProgressLine:
    """One line rewritten in place on a terminal; elsewhere (CI logs) a line on each phase
    change, at most one every `every_s` seconds, and the last one at the end."""

    def __init__(self, stream: TextIO, every_s: float = 10.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self.last = 0.0
        self.phase = ""
        self.width = 0
        self.lock = threading.Lock()
        self.pending = ""  # (not a terminal) the newest line not written yet

    def __call__(self, progress: object) -> None:
        line = f"kls tune: {progress.line()}"  # type: ignore[attr-defined]
        phase = str(getattr(progress, "phase", ""))
        with self.lock:
            now = time.monotonic()
            if self.tty:
                pad = max(0, self.width - len(line))
                self.stream.write("\r" + line + " " * pad)
                self.width = len(line)
            elif phase != self.phase or now - self.last >= self.every_s:
                self.stream.write(line + "\n")
                self.last = now
                self.pending = ""
            else:
                self.pending = line
            self.phase = phase
            self.stream.flush()

    def done(self) -> None:
        with self.lock:
            if self.tty and self.width:
                self.stream.write("\n")
            elif self.pending:
                self.stream.write(self.pending + "\n")
                self.pending = ""
            self.stream.flush()


def run(args: argparse.Namespace, spec: InstanceSpec) -> int:
    from kls.tune.config_command import run_configs

    if args.apply and args.build_only:
        print(
            "kls: --apply needs timings; it cannot be combined with --build-only", file=sys.stderr
        )
        return EXIT_USAGE
    if profile(spec.profile).tunes_configs:
        return run_configs(args, spec)
    return run_ops(args, spec)


def run_ops(args: argparse.Namespace, spec: InstanceSpec) -> int:
    """`kls tune` of an instance whose choice is an op (CUTLASS)."""
    from kls.tune.apply import ApplyError, apply_winner, level_to_write
    from kls.tune.plot import svg
    from kls.tune.runner import (
        STAGE1_TIMING,
        STAGE2_TIMING,
        TuneError,
        TuneOptions,
        Tuner,
        results_folder,
    )

    if args.ray_address and args.executor != "ray":
        print("kls: --ray-address needs --executor ray", file=sys.stderr)
        return EXIT_USAGE
    options = TuneOptions(
        limit=args.limit,
        build_only=args.build_only,
        executor=args.executor,
        ray_address=args.ray_address,
        slots=args.jobs,
        compile=CompileOptions(mode="build", nvcc=args.nvcc),
        resume=args.resume,
        stage1=dataclasses.replace(STAGE1_TIMING, method=args.method),
        stage2=dataclasses.replace(STAGE2_TIMING, method=args.method),
    )
    line = ProgressLine(sys.stderr)
    tuner = Tuner(spec, options, line)
    try:
        result = tuner.run()
    except TuneError as exc:
        line.done()
        print(f"kls: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, SystemExit) as exc:
        tuner.cancel.set()
        line.done()
        if tuner.result is not None:
            tuner.result.cancelled = True
            write_files(tuner.result, results_folder(spec), svg(tuner.result))
        print(f"kls: tune interrupted; partial results in {results_folder(spec)}", file=sys.stderr)
        return exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 130
    line.done()
    folder = results_folder(spec)
    write_files(result, folder, None if result.build_only else svg(result))
    applied = ""
    if args.apply:
        if result.winner is None:
            print("kls: no configuration was verified on every shape; nothing applied",
                  file=sys.stderr)  # fmt: skip
        else:
            ops = {b.unit: b for b in result.builds}
            unit = ops[result.winner.unit]
            try:
                applied = apply_winner(
                    spec.config_path,
                    spec.name,
                    result.winner.op,
                    {**unit.build_vars, **result.winner.vars},
                    level_to_write(
                        result.winner.op, unit.level, spec.instantiation_level, spec.arch
                    ),
                )
            except ApplyError as exc:
                print(f"kls: {exc}", file=sys.stderr)
                return EXIT_FAILED
        try:
            applied = "\n".join([applied, *_apply_dispatch(spec, result)]).strip()
        except ApplyError as exc:
            print(f"kls: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        payload = result.to_json()
        payload["applied"] = applied
        print(json.dumps(payload, indent=1))
    else:
        print(table(result))
        for kind, path in result.files.items():
            print(f"{kind}: {path}")
        if applied:
            print(f"applied: {applied}")
    if result.build_only:
        return EXIT_OK if result.builds_ok else EXIT_FAILED
    return EXIT_OK if result.best and any(b.unit for b in result.best) else EXIT_FAILED


def _apply_dispatch(spec: InstanceSpec, result: TuneResult) -> list[str]:
    """With `dispatch = "m"` or "mn" in the tune table: each bucket's instance
    (kls.tune.dispatch)."""
    from kls.tune.apply import apply_dispatch, stale_dispatch
    from kls.tune.dispatch import buckets_to_apply
    from kls.tune.space import TuneSpaceError, load_space

    try:
        wanted = load_space(spec).dispatch
    except TuneSpaceError:
        return []
    if wanted is None:
        return []
    if not result.dispatch:
        return [
            "no M bucket had a configuration verified on all its shapes; no dispatch written",
            *stale_dispatch(spec.config_path, spec.name),
        ]
    return apply_dispatch(spec.config_path, spec.name, buckets_to_apply(result, spec))
