"""`kls tune` on the terminal for an instance whose choice is a config (Triton): the table
or JSON, the results file, --apply (kls.tune.configs does the work)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kls.bench.probe import gpu_problem
from kls.cache_dir import write_atomic
from kls.instances import InstanceSpec
from kls.profiles import profile
from kls.profiles.base import ConfigSpace, ConfigSpaceError
from kls.tune.apply import ApplyError, apply_config
from kls.tune.configs import ConfigTuneResult, run_config_tune, table
from kls.tune.options import results_folder
from kls.tune.space import TuneSpaceError, load_space

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def config_space(spec: InstanceSpec, exhaustive: bool) -> ConfigSpace | None:
    """Inductor's configs (and flags) for the instance; a RuntimeError whose message says
    what to do where they cannot be read."""
    try:
        return profile(spec.profile).config_space(spec, exhaustive)
    except ConfigSpaceError as exc:
        raise RuntimeError(f"cannot read Inductor's configs for '{spec.name}': {exc}") from None
    except Exception as exc:  # whatever else: said in words, never a traceback
        raise RuntimeError(
            f"cannot read Inductor's configs for '{spec.name}': {type(exc).__name__}: {exc}"
        ) from None


def run_configs(args: argparse.Namespace, spec: InstanceSpec) -> int:
    """`kls tune` of an instance whose profile tunes its config: the cheap checks first,
    then Inductor's configs (the torch worker's start and a lowering)."""
    if args.executor != "local" or args.ray_address or args.resume:
        print(
            "kls: --executor ray and --resume are for op tunes (CUTLASS); a Triton tune runs here",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not args.build_only and (problem := gpu_problem()) is not None:
        print(
            f"kls: {problem}: kls tune times on this machine's GPU; --build-only compiles the "
            "candidates without one",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        space = load_space(spec)
    except TuneSpaceError as exc:
        print(f"kls: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        found = config_space(spec, bool(getattr(args, "exhaustive", False)))
    except RuntimeError as exc:
        print(f"kls: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def say(line: str) -> None:
        print(f"kls tune: {line}", file=sys.stderr, flush=True)

    method = str(getattr(args, "method", "events"))
    result = run_config_tune(spec, space, args.limit, args.build_only, found, say, method=method)
    path = write_result(result, spec)
    applied = ""
    if args.apply:
        if result.winner is None:
            print("kls: no config was verified and timed; nothing applied", file=sys.stderr)
        else:
            try:
                applied = apply_config(spec.config_path, spec.name, result.winner.config)
            except ApplyError as exc:
                print(f"kls: {exc}", file=sys.stderr)
                return EXIT_FAILED
    if args.json:
        print(json.dumps({**result.to_json(), "applied": applied, "file": str(path)}, indent=1))
    else:
        print(table(result))
        print(f"results: {path}")
        if applied:
            print(f"applied: {applied}")
    if result.build_only:
        return EXIT_OK if any(not t.problem for t in result.trials) else EXIT_FAILED
    return EXIT_OK if result.winner is not None else EXIT_FAILED


def write_result(result: ConfigTuneResult, spec: InstanceSpec) -> Path:
    folder = results_folder(spec)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "configs.json"
    write_atomic(path, (json.dumps(result.to_json(), indent=1) + "\n").encode("utf-8"))
    return path
