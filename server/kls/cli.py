"""The `kls` command line: init, check, instances, render, compile, bench, rules, serve."""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kls import __version__
from kls.checks import check_paths
from kls.checks.catalogue import RULES
from kls.checks.run import ModelCache, check_instance
from kls.findings import Finding, Severity
from kls.instances import InstanceSet, InstanceSpec, find_config, load_instances
from kls.render import RenderResult
from kls.sandbox.workers import (
    DEFAULT_MEMORY_MB,
    DEFAULT_SECONDS,
    RENDER_MEMORY_MB_RANGE,
    RENDER_SECONDS_RANGE,
    WorkerLimits,
    configure,
)
from kls.template.source import findings_to_file, python_file, source_map_to_file

if TYPE_CHECKING:
    from kls.bench.run import BenchOptions
    from kls.compile import CompileOptions, CompileResult

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_CODES = """\
exit codes:
  0    no errors (warnings and info notes do not count)
  1    errors found, or the command's work failed (a render, a compile, a benchmark)
  2    usage: a missing file, kls.toml or instance, or an instance to choose with -i
  130  interrupted

positions: text output is path:line:column, 1-based; JSON ranges are 0-based
(line, column), as LSP and the pipeline count them."""
TEMPLATE_HELP = (
    "a template file (.cu.jinja, .py.jinja, ...), a Python file's constant written "
    "file.py::NAME as kls.toml names it, or kls.toml itself (then -i names the instance)"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "format", "text") == "json"
    _apply_render_limits(args)
    if getattr(args, "torch_source", None):
        from kls.upstream import set_explicit

        set_explicit(args.torch_source)
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        print("kls: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kls",
        description="Editor tooling for Jinja GPU kernel templates (CUDA, CUTLASS, Triton).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kls {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="lint templates and every instance in kls.toml")
    check.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[Path(".")],
        help="templates, folders (every template and kls.toml below) or kls.toml files "
        "(default: .)",
    )
    check.add_argument(
        "--compile",
        action="store_true",
        help="also run nvcc's check mode on every instance (in parallel, bounded by cores and "
        "memory), for CI: type errors only one instance's dtypes make fail the command",
    )
    check.add_argument("--nvcc", default="nvcc", help="nvcc for --compile (default: from PATH)")
    _add_extra_root(check)
    _add_render_limits(check)
    check.set_defaults(func=cmd_check)

    info = sub.add_parser(
        "info",
        help="what kls runs on: the torch source it reads Inductor's files from (and where it "
        "looked), its version, the profiles and the versions they mirror",
    )
    info.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=Path("."),
        help="a folder or kls.toml whose [torch] source to consider (default: .)",
    )
    info.set_defaults(func=cmd_info)

    init = sub.add_parser(
        "init", help="write a kls.toml and a template that check, compile and benchmark"
    )
    init.add_argument(
        "folder", nargs="?", type=Path, default=Path("."), help="where to write (default: .)"
    )
    init.add_argument(
        "--gemm",
        action="store_true",
        help="a CUTLASS 3.x GEMM in today's Inductor style (torch 2.11's templates) instead of "
        "an elementwise add",
    )
    init.add_argument(
        "--triton",
        action="store_true",
        help="a Triton template of kls's own in Inductor's style (an elementwise scale), "
        "rendered by Inductor when torch 2.11 is importable",
    )
    init.set_defaults(func=cmd_init)

    instances = sub.add_parser("instances", help="list the instances declared for a template")
    instances.add_argument(
        "template",
        type=Path,
        nargs="?",
        default=Path("."),
        help=f"{TEMPLATE_HELP}; or a folder: every instance of the configs at and below it "
        "(default: .)",
    )
    instances.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    _add_extra_root(instances)
    instances.set_defaults(func=cmd_instances)

    render = sub.add_parser("render", help="print the rendered source of one instance")
    render.add_argument("template", type=Path, help=TEMPLATE_HELP)
    render.add_argument(
        "--instance", "-i", help="the instance (may be left out when the template has one)"
    )
    render.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    render.add_argument(
        "--line-directives", action="store_true", help="emit #line directives for nvcc"
    )
    render.add_argument(
        "--source-map", action="store_true", help="prefix each line with its template line"
    )
    _add_extra_root(render)
    _add_render_limits(render)
    render.set_defaults(func=cmd_render)

    compile_ = sub.add_parser("compile", help="compile one instance with nvcc")
    compile_.add_argument("template", type=Path, help=TEMPLATE_HELP)
    compile_.add_argument(
        "--instance", "-i", help="the instance (may be left out when the template has one)"
    )
    compile_.add_argument(
        "--mode",
        choices=("check", "build", "quick"),
        default="check",
        help="check: nvcc's front end; build: the shared library; quick: clang's host-side "
        "check first (about a second with a warm preamble), then nvcc's check",
    )
    compile_.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    compile_.add_argument("--nvcc", default="nvcc", help="nvcc to run (default: from PATH)")
    compile_.add_argument("--arch", help="override the instance's arch, e.g. 90a or 80")
    compile_.add_argument("--opt", default="-O1", help="optimisation level for build mode")
    compile_.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    compile_.add_argument("--output", "-o", type=Path, help="copy the built library here")
    compile_.add_argument("--log", action="store_true", help="print nvcc's full output")
    compile_.add_argument(
        "--clang", help="clang for --mode quick (default: clang++-19, then clang++, from PATH)"
    )
    _add_extra_root(compile_)
    _add_render_limits(compile_)
    compile_.set_defaults(func=cmd_compile)

    bench = sub.add_parser("bench", help="build, verify and time instances on the local GPU")
    bench.add_argument("template", type=Path, help=TEMPLATE_HELP)
    bench.add_argument("--instance", "-i", action="append", help="repeat; default: all")
    bench.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    bench.add_argument("--nvcc", default="nvcc", help="nvcc for the build (default: from PATH)")
    bench.add_argument("--no-baseline", action="store_true", help="skip the cuBLAS baseline")
    bench.add_argument("--timeout", type=float, default=300.0, help="seconds per instance")
    bench.add_argument(
        "--max-seconds",
        type=float,
        default=10.0,
        help="seconds of timed launches per kernel at most (the kernel, then the baseline), "
        "when the spread has not settled under 1%% before (default 10)",
    )
    _add_method(bench)
    bench.add_argument(
        "--sanitize",
        action="store_true",
        help="run each instance once under compute-sanitizer's memcheck and racecheck instead "
        "of timing it; each reported access is a finding at its template line",
    )
    _add_extra_root(bench)
    _add_render_limits(bench)
    bench.set_defaults(func=cmd_bench)

    tune = sub.add_parser(
        "tune",
        help="find the best CUTLASS op and variables, or Triton config, for an instance "
        "(docs/TUNING.md)",
    )
    tune.add_argument("template", type=Path, help=TEMPLATE_HELP)
    tune.add_argument(
        "--instance", "-i", help="the instance (may be left out when the template has one)"
    )
    tune.add_argument(
        "--limit",
        type=_bounded(int, 1, 100000),
        metavar="N",
        help="build N candidates spread evenly over the compatible ops (reproducible; the "
        "instance's own op is built besides, to measure the margin over it)",
    )
    tune.add_argument("--build-only", action="store_true", help="stop after the builds (no GPU)")
    tune.add_argument(
        "--exhaustive",
        action="store_true",
        help="Triton: start from Inductor's EXHAUSTIVE config space, not its DEFAULT one",
    )
    tune.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where the builds run: a local pool (default) or Ray tasks (docs/TUNING.md)",
    )
    tune.add_argument("--ray-address", metavar="ADDR", help="a Ray cluster (default: start one)")
    tune.add_argument(
        "--apply",
        action="store_true",
        help='write the winner into kls.toml (and, with the tune table\'s dispatch = "m" or '
        '"mn", an instance per bucket)',
    )
    tune.add_argument(
        "--resume",
        action="store_true",
        help="reuse what the last run measured the same way (after a time limit or Ctrl-C)",
    )
    tune.add_argument(
        "--jobs",
        type=_bounded(int, 1, 1024),
        metavar="N",
        help="local builds at a time (default: from cores and free memory)",
    )
    tune.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    tune.add_argument("--nvcc", default="nvcc", help="nvcc for the builds (default: from PATH)")
    _add_method(tune)
    _add_extra_root(tune)
    _add_render_limits(tune)
    tune.set_defaults(func=cmd_tune)

    ops = sub.add_parser(
        "ops",
        help="the CUTLASS ops Inductor would accept for an instance's tensors, arch and level, "
        "and why it refuses each other one",
    )
    ops.add_argument("template", type=Path, help=TEMPLATE_HELP + ", or kls.toml")
    ops.add_argument("--instance", "-i", help="the instance (may be left out when it is alone)")
    ops.add_argument("--config", type=Path, help="kls.toml to read (default: nearest)")
    ops.add_argument("--level", help="cutlass_instantiation_level (default: the instance's)")
    ops.add_argument("--contains", action="append", default=[], help="only ops containing this")
    ops.add_argument("--refused", action="store_true", help="list the refused ops and why")
    _add_extra_root(ops)
    ops.set_defaults(func=cmd_ops)

    cache = sub.add_parser(
        "cache",
        help="what kls keeps on disk: compile and preamble caches, CUTLASS op lists, unpacked "
        "torch sources, CUDA headers, and the project's tune results and bench history",
    )
    cache.add_argument(
        "action", choices=("info", "clear"), help="info: where and how large; clear: remove"
    )
    cache.add_argument(
        "names", nargs="*", help="only these caches (as `kls cache info` names them; default: all)"
    )
    cache.set_defaults(func=cmd_cache)

    rules = sub.add_parser("rules", help="list the rule catalogue")
    rules.add_argument(
        "--profile",
        help="also list what templates of this profile may use: helpers, context names, "
        "reserved C names, the rules only its templates raise (inductor-2023, torch-2.11, "
        "triton)",
    )
    rules.set_defaults(func=cmd_rules)

    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    serve.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    serve.set_defaults(func=cmd_serve)
    docs = sub.add_parser(
        "docs", help="print the template API reference (what a template may use, per profile)"
    )
    docs.add_argument(
        "section",
        nargs="?",
        help="only the sections whose heading contains this (e.g. torch-2.11, kernel.size)",
    )
    docs.set_defaults(func=cmd_docs)
    for name, command in sub.choices.items():
        command.epilog = EXIT_CODES
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        if name != "serve":
            _add_format(command)
        command.add_argument(
            "--torch-source",
            metavar="PATH",
            help="where Inductor's own files are read from: a PyTorch checkout, a torch/ "
            "folder or a torch wheel (before KLS_TORCH_SOURCE, [torch] source in kls.toml and "
            "the installed torch; `none` turns the search off)",
        )
    return parser


def _add_format(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="json: machine-readable on stdout (ranges 0-based); default: text (1-based)",
    )
    command.add_argument(
        "--json", dest="format", action="store_const", const="json", help="--format json"
    )


def _add_method(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=("events", "graph"),
        default="events",
        help="events: each launch between its own CUDA events (default); graph: kernel against "
        "kernel, a CUDA graph of launches replayed (kls.bench.graph_timing), for the kernel "
        "and its cuBLAS baseline alike",
    )


def _add_extra_root(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--extra-root",
        dest="extra_roots",
        metavar="DIR",
        type=Path,
        action="append",
        default=[],
        help="a folder outside the project (the folder of kls.toml) that templates may be read "
        "from; repeat for several",
    )


def _add_render_limits(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--render-timeout",
        type=_bounded(float, *RENDER_SECONDS_RANGE),
        metavar="S",
        help=f"seconds a render may take before it is stopped (KT104; default {DEFAULT_SECONDS:g})",
    )
    command.add_argument(
        "--render-memory",
        type=_bounded(int, *RENDER_MEMORY_MB_RANGE),
        metavar="MB",
        help=f"memory a render process may use (KT104; default {DEFAULT_MEMORY_MB})",
    )


def _bounded(kind: Callable[[str], float], low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:g} is outside {low:g}..{high:g}")
        return value

    return parse


def _apply_render_limits(args: argparse.Namespace) -> None:
    seconds = getattr(args, "render_timeout", None)
    memory = getattr(args, "render_memory", None)
    if seconds is not None or memory is not None:
        configure(
            WorkerLimits(
                memory_mb=int(memory or DEFAULT_MEMORY_MB), seconds=seconds or DEFAULT_SECONDS
            )
        )


def cmd_check(args: argparse.Namespace) -> int:
    result = check_paths(list(args.paths), extra_roots=args.extra_roots)
    compiled = _compile_rendered(result.renders, args) if args.compile else {}
    seen: set[tuple[str, str, str]] = set()
    for name, compile_result in compiled.items():
        for f in compile_result.findings:
            key = (f.code, f.path, f.message)  # e.g. nvcc missing: once, not per instance
            if key not in seen:
                seen.add(key)
                result.findings.append(dataclasses.replace(f, instance=f.instance or name))
    findings = sorted(result.findings, key=_order)
    if args.format == "json":
        payload = {
            "findings": [f.to_json() for f in findings],
            "instances_rendered": sorted(n for n, r in result.renders.items() if r.ok),
            "instances_not_rendered": sorted(
                {n for n, r in result.renders.items() if not r.ok} | set(result.unparsed)
            ),
            "configs": [str(c) for c in result.configs],
            "errors": result.errors,
        }
        if args.compile:
            payload["instances_compiled"] = {n: r.ok for n, r in sorted(compiled.items())}
        print(json.dumps(payload, indent=2))
    else:
        for f in findings:
            print(f.format_line())
        warnings = sum(1 for f in findings if f.severity == Severity.WARNING)
        rendered = sum(r.ok for r in result.renders.values())
        failed = len(result.renders) - rendered + len(result.unparsed)
        print(
            f"kls: {result.errors} error(s), {warnings} warning(s); "
            f"{rendered} instance(s) rendered"
            + (f", {failed} did not render" if failed else "")
            + (
                f", {sum(r.ok for r in compiled.values())}/{len(compiled)} compiled"
                if args.compile
                else ""
            )
            + f"; {_configs_read(result.configs)}",
            file=sys.stderr,
        )
        if not result.renders:
            print(_static_only_note(list(args.paths), result.errors), file=sys.stderr)
    return EXIT_FINDINGS if result.errors else EXIT_OK


def _configs_read(configs: list[Path]) -> str:
    """'2 config(s) read: a/kls.toml, b/kls.toml' (relative to the current folder when below it)."""
    if not configs:
        return "no kls.toml read"
    shown = []
    for c in configs[:5]:
        try:
            shown.append(str(c.relative_to(Path.cwd().resolve())))
        except ValueError:
            shown.append(str(c))
    more = f" and {len(configs) - 5} more" if len(configs) > 5 else ""
    return f"{len(configs)} config(s) read: {', '.join(shown)}{more}"


def _compile_rendered(
    renders: dict[str, RenderResult], args: argparse.Namespace
) -> dict[str, CompileResult]:
    """nvcc's check mode on every instance that rendered, in parallel (kls.compile.batch)."""
    from kls.compile import CompileOptions
    from kls.compile.batch import compile_all
    from kls.compile.parallel import default_limit

    specs = [r.instance for _, r in sorted(renders.items()) if r.ok]
    if not specs:
        return {}
    _kill_children_on_exit(grace_s=None)
    limit = default_limit()
    print(f"kls: compiling {len(specs)} instance(s), {limit} at a time ...", file=sys.stderr)
    options = CompileOptions(mode="check", nvcc=_absolute_if_path(args.nvcc))
    done: list[CompileResult] = []
    lock = threading.Lock()

    def finished(result: CompileResult) -> None:  # from compile threads, as each ends
        with lock:
            done.append(result)
            how = "cached" if result.cached else f"{result.seconds:.1f} s"
            verdict = "ok" if result.ok else "failed"
            print(
                f"kls: [{len(done)}/{len(specs)}] {result.instance}: {verdict} ({how})",
                file=sys.stderr,
                flush=True,
            )

    results = compile_all(specs, options, limit, on_done=finished)
    return {spec.name: r for spec, r in zip(specs, results)}


def _static_only_note(paths: list[Path], errors: int) -> str:
    """Why nothing rendered: say that only the static checks ran, and how to declare one."""
    folders = [p if p.is_dir() else p.parent for p in paths]
    if not any(find_config(f) for f in folders):
        where = ", ".join(str(f) for f in folders)
        return (
            f"kls: only the static checks ran: no kls.toml at or above {where}, so no instance "
            "was rendered (render-time checks, the C contract and nvcc need one). Declare one "
            f"in kls.toml:\n{_instance_example(paths)}"
            "or run `kls init` in an empty folder for a working example (README: Quick start)"
        )
    if errors:
        return (
            "kls: no instance was rendered: the error(s) above stop it (a Jinja syntax error "
            "stops every render of its template; a kls.toml error, a missing template or a "
            "`file.py::NAME` kls cannot read drops the instance): fix them and check again"
        )
    return (
        "kls: only the static checks ran: kls.toml declares no instance of these templates "
        "(add [instances.NAME] with template = ... and its tensors)"
    )


def _instance_example(paths: list[Path]) -> str:
    """A kls.toml instance for the first checked template: `file.py::NAME` for a Python
    file (its first string constant with Jinja code), else the template's own name."""
    from kls.checks.run import jinja_constants
    from kls.template.source import TemplateRef

    template = "add.cu.jinja"
    for path in paths:
        if path.is_file() and path.suffix == ".py":
            names = [TemplateRef.parse(i).constant for i in jinja_constants(path.resolve())]
            template = f"{path.name}::{names[0] if names else 'NAME'}"
            break
        if path.is_file() and path.suffix != ".toml":
            template = path.name
            break
    return (
        f'  [instances.example]\n  template = "{template}"\n  profile = "torch-2.11"\n'
        '  tensors.A = { shape = [1024], dtype = "fp32" }   # one line per buffer\n'
    )


def cmd_info(args: argparse.Namespace) -> int:
    from kls.info import info_lines, info_record

    config = args.path if args.path.suffix == ".toml" else find_config(args.path)
    if args.format == "json":
        print(json.dumps(info_record(config), indent=1))
    else:
        print("\n".join(info_lines(config)))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from kls.scaffold import InitError, init, next_steps

    if args.gemm and args.triton:
        print("kls: choose one of --gemm and --triton", file=sys.stderr)
        return EXIT_USAGE
    kind = "gemm" if args.gemm else "triton" if args.triton else "default"
    try:
        init(args.folder, kind)
    except (InitError, OSError) as exc:
        print(f"kls: {exc}", file=sys.stderr)
        return EXIT_USAGE
    steps = next_steps(args.folder, kind)
    print(json.dumps({"folder": str(args.folder), "next_steps": steps}) if args.json else steps)
    return EXIT_OK


def _order(f: Finding) -> tuple[str, int, int, str]:
    return (f.path, f.range.start.line, f.range.start.column, f.code)


def _instances_for(
    template: Path, config: Path | None, extra_roots: Sequence[Path] = ()
) -> tuple[InstanceSet | None, str]:
    if not python_file(template).is_file():  # a template, or file.py::CONSTANT
        return None, f"kls: {template}: no such template file"
    config = config or find_config(python_file(template))
    if config is None:
        return None, (
            f"kls: no kls.toml found at or above {template.parent}; declare instances there "
            "(see README: Instances)"
        )
    return load_instances(config, extra_roots=extra_roots), ""


def _load_instances(args: argparse.Namespace) -> InstanceSet | None:
    """The instances for `args.template`, or None after saying why there are none."""
    instances, problem = _instances_for(args.template, args.config, args.extra_roots)
    if instances is None:
        print(problem, file=sys.stderr)
    return instances


def _selected_instance(args: argparse.Namespace) -> InstanceSpec | None:
    """The instance `--instance` names for `args.template`, or None after saying why."""
    instances = _load_instances(args)
    return _instance_named(instances, args) if instances is not None else None


def _print_config_problems(instances: InstanceSet) -> None:
    for f in instances.findings:
        print(f.format_line(), file=sys.stderr)


def _instance_named(instances: InstanceSet, args: argparse.Namespace) -> InstanceSpec | None:
    readers = {i.name for i in instances.depends_on(args.template)}
    known = ", ".join(sorted(readers)) or "none"
    if args.instance is None:  # -i may be left out when one instance reads the template
        if len(readers) == 1:
            args.instance = next(iter(readers))
        else:
            _print_config_problems(instances)
            print(
                f"kls: {args.template} has {len(readers)} instances: name one with -i ({known})",
                file=sys.stderr,
            )
            return None
    spec = instances.instances.get(args.instance)
    if spec is None:
        from kls.suggest import did_you_mean

        _print_config_problems(instances)
        if not instances.instances and instances.findings:
            print(f"kls: no instance '{args.instance}': the config above could not be used",
                  file=sys.stderr)  # fmt: skip
            return None
        if args.instance in instances.declared:
            print(
                f"kls: instance '{args.instance}' is declared in {instances.path} but could not "
                "be used: mend the problem above",
                file=sys.stderr,
            )
            return None
        hint = did_you_mean(args.instance, instances.instances)
        print(
            f"kls: no instance '{args.instance}'{hint}; instances of this template: {known}",
            file=sys.stderr,
        )
        return None
    if spec.name not in readers and Path(args.template).suffix != ".toml":
        print(
            f"kls: instance '{args.instance}' renders {spec.template}, which is not "
            f"{args.template} and does not read it; instances of this template: {known}",
            file=sys.stderr,
        )
        return None
    return spec


def cmd_instances(args: argparse.Namespace) -> int:
    if args.template.is_dir():  # every config at and below the folder, every instance
        from kls.checks.run import is_template
        from kls.checks.walk import project_files

        above = find_config(args.template)
        found = project_files(args.template, is_template).configs
        paths = list(dict.fromkeys([*([above] if above else []), *found]))
        if args.config:
            paths = [args.config]
        if not paths:
            print(f"kls: no kls.toml at, above or below {args.template}", file=sys.stderr)
            return EXIT_USAGE
        sets = [load_instances(p, extra_roots=args.extra_roots) for p in paths]
        listed = [(s, list(s.instances.values())) for s in sets]
    else:
        instances = _load_instances(args)
        if instances is None:
            return EXIT_USAGE
        listed = [(instances, instances.depends_on(args.template))]
    rows = []
    for instance_set, specs in listed:
        _print_config_problems(instance_set)
        for spec in specs:
            op = spec.op or (f"filter {list(spec.op_filter.contains)}" if spec.op_filter else "-")
            rows.append((spec, op))
    if args.json:
        print(json.dumps([_instance_record(spec) for spec, _ in rows], indent=2))
    for spec, op in rows if not args.json else []:
        tensors = ", ".join(f"{n}={t.describe() if t else 'None'}" for n, t in spec.tensors.items())
        print(f"{spec.name}\tarch={spec.arch}\tkind={spec.kind}\top={op}\t{tensors}")
    errors = [f for s, _ in listed for f in s.findings if f.severity == Severity.ERROR]
    return EXIT_FINDINGS if errors else EXIT_OK


def _instance_record(spec: InstanceSpec) -> dict[str, object]:
    return {
        "name": spec.name,
        "config": str(spec.config_path),
        "template": str(spec.template),
        "profile": spec.profile,
        "kind": spec.kind,
        "arch": spec.arch,
        "op": spec.op,
        "op_filter": list(spec.op_filter.contains) if spec.op_filter else None,
        "tensors": {
            n: None
            if t is None
            else {"dtype": t.dtype.name, "shape": list(t.shape), "stride": list(t.stride)}
            for n, t in spec.tensors.items()
        },
    }


def cmd_render(args: argparse.Namespace) -> int:
    spec = _selected_instance(args)
    if spec is None:
        return EXIT_USAGE
    result, findings = check_instance(spec, ModelCache())
    findings = findings_to_file(findings)  # templates in Python constants: the file's lines
    errors = [f for f in findings if f.severity == Severity.ERROR]
    if args.json:
        print(
            json.dumps(
                {
                    "instance": spec.name,
                    "rendered": result.text is not None,
                    "text": result.text,
                    "findings": [f.to_json() for f in findings],
                },
                indent=2,
            )
        )
        return EXIT_FINDINGS if errors or result.text is None else EXIT_OK
    for f in findings:
        print(f.format_line(), file=sys.stderr)
    if result.text is None or result.source_map is None:
        print(f"kls: instance '{spec.name}' did not render", file=sys.stderr)
        return EXIT_FINDINGS
    text = result.text
    source_map = source_map_to_file(result.source_map)
    if args.line_directives:
        text = source_map.line_directives(text)
    elif args.source_map:
        lines = []
        for i, line in enumerate(text.split("\n")):
            origin = source_map.origin(i)
            where = f"{Path(origin.path).name}:{origin.line + 1}" if origin else "?"
            lines.append(f"{where:>28} | {line}")
        text = "\n".join(lines)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_FINDINGS if errors else EXIT_OK


def cmd_compile(args: argparse.Namespace) -> int:
    from kls.compile import CompileOptions, compile_instance
    from kls.compile.progress import Spinner

    spec = _selected_instance(args)
    if spec is None:
        return EXIT_USAGE
    _kill_children_on_exit(grace_s=None)
    options = CompileOptions(
        mode="check" if args.mode == "quick" else args.mode,
        nvcc=_absolute_if_path(args.nvcc),
        arch=args.arch,
        opt_level=args.opt,
        timeout_s=args.timeout,
        clang=_absolute_if_path(args.clang) if args.clang else None,
    )
    if args.mode == "quick":
        _quick_tier(spec, options)
    with Spinner(f"kls: {options.mode} {spec.name}") as spinner:
        result = compile_instance(spec, options, on_nvcc_start=spinner.start_nvcc)
    if args.json:
        print(
            json.dumps(
                {
                    "instance": spec.name,
                    "mode": options.mode,
                    "ok": result.ok,
                    "cached": result.cached,
                    "seconds": round(result.seconds, 3),
                    "artifact": str(result.artifact) if result.artifact else None,
                    "findings": [f.to_json() for f in result.findings],
                },
                indent=2,
            )
        )
    for f in result.findings if not args.json else []:
        print(f.format_line())
    if args.log and result.log:
        print(result.log, file=sys.stderr)
    how = "cached" if result.cached else f"{result.seconds:.1f} s"
    status = "ok" if result.ok else "failed"
    verdict = " (nvcc's verdict)" if args.mode == "quick" else ""
    print(f"kls: {options.mode} of {spec.name} {status} ({how}){verdict}", file=sys.stderr)
    if result.ok and args.output and result.artifact:
        import shutil

        shutil.copyfile(result.artifact, args.output)
        print(f"kls: wrote {args.output}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _quick_tier(spec: InstanceSpec, options: CompileOptions) -> None:
    """The quick tier's findings, printed before nvcc starts (its notice instead when clang
    is missing or cannot handle the template)."""
    from kls.compile.quick import quick_check

    result = quick_check(spec, options)
    if result.notice:
        print(f"kls: {result.notice}", file=sys.stderr, flush=True)
        return
    for f in result.findings:
        print(f.format_line(), flush=True)
    status = "ok" if result.ok else f"{len(result.errors)} error(s)"
    print(
        f"kls: quick check (clang) of {spec.name}: {status} ({result.seconds:.1f} s); "
        "nvcc's check follows",
        file=sys.stderr,
        flush=True,
    )


def _absolute_if_path(program: str) -> str:
    """`./tools/nvcc` means the one under the current folder, though nvcc runs elsewhere."""
    return os.path.abspath(program) if os.sep in program else program


def _kill_children_on_exit(grace_s: float | None) -> None:
    """nvcc runs in its own process group, out of reach of the terminal's Ctrl-C and of a
    signal sent to kls: kill those groups however kls ends. Ctrl-C in `kls compile` unwinds
    (KeyboardInterrupt kills the running nvcc); SIGTERM and SIGHUP kill the children first, then
    unwind. With `grace_s` (the server, whose shutdown may wait on threads), Ctrl-C does the same
    and kls leaves after `grace_s` seconds even if unwinding has not finished."""
    from kls.compile.run import kill_children

    atexit.register(kill_children)

    def on_signal(signum: int, frame: object) -> None:
        kill_children()
        if grace_s is not None:
            deadline = threading.Timer(grace_s, os._exit, args=(128 + signum,))
            deadline.daemon = True
            deadline.start()
        raise SystemExit(128 + signum)

    signals = [signal.SIGTERM, signal.SIGHUP] + ([signal.SIGINT] if grace_s is not None else [])
    for signum in signals:
        signal.signal(signum, on_signal)


def cmd_bench(args: argparse.Namespace) -> int:
    from kls.bench.run import BenchOptions, benchmark_instance
    from kls.compile import CompileOptions

    instances = _load_instances(args)
    if instances is None:
        return EXIT_USAGE
    names = args.instance or [s.name for s in instances.depends_on(args.template)]
    specs = []
    for name in names:
        args.instance = name
        spec = _instance_named(instances, args)
        if spec is None:
            return EXIT_USAGE
        specs.append(spec)
    from kls.bench.probe import gpu_problem

    problem = gpu_problem()
    if problem is not None:  # nothing is built: its result could never be timed here
        from kls.bench.report import BenchReport

        failed = [BenchReport(s.name, ok=False, message=problem) for s in specs]
        if args.json:
            print(json.dumps([r.to_json() for r in failed], indent=2))
        else:
            for r in failed:
                print(f"{r.instance:32} {r.headline()}")
            print(
                "kls: kls bench times on this machine's NVIDIA GPU, and none is usable here; "
                "`kls compile` checks and builds without one",
                file=sys.stderr,
            )
        return EXIT_FINDINGS
    from kls.bench.job import Timing

    options = BenchOptions(
        compile=CompileOptions(mode="build", nvcc=args.nvcc),
        timing=Timing(max_seconds=args.max_seconds, method=args.method),
        baseline=not args.no_baseline,
        timeout_s=args.timeout,
    )
    if args.sanitize:
        return _sanitize(specs, options, args.json)
    reports = []
    for spec in specs:
        report = benchmark_instance(
            spec, options, progress=lambda m: print(f"kls: {m} ...", file=sys.stderr, flush=True)
        )
        reports.append(report)
        if not args.json:
            print(f"{spec.name:32} {report.headline()}", flush=True)
    if args.json:
        print(json.dumps([r.to_json() for r in reports], indent=2))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FINDINGS


def _sanitize(specs: list[InstanceSpec], options: BenchOptions, as_json: bool) -> int:
    """`kls bench --sanitize`: each instance under memcheck and racecheck, findings printed."""
    from kls.bench.sanitize import sanitize_instance

    reports = []
    for spec in specs:
        print(f"kls: sanitizing {spec.name} ...", file=sys.stderr, flush=True)
        report = sanitize_instance(spec, options)
        reports.append(report)
        if not as_json:
            for finding in report.findings:
                print(finding.format_line(), flush=True)
            print(f"{spec.name:32} {report.headline()}", flush=True)
    if as_json:
        print(json.dumps([r.to_json() for r in reports], indent=2))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FINDINGS


def cmd_tune(args: argparse.Namespace) -> int:
    from kls.tune.command import run

    spec = _selected_instance(args)
    if spec is None:
        return EXIT_USAGE
    _kill_children_on_exit(grace_s=None)
    if args.render_timeout is None:  # builds render in fresh processes, many at once
        configure(WorkerLimits(memory_mb=int(args.render_memory or DEFAULT_MEMORY_MB), seconds=120))
    return run(args, spec)


def cmd_ops(args: argparse.Namespace) -> int:
    from kls.profiles import ConfigProblem
    from kls.profiles.op_list import op_list

    if Path(args.template).name.endswith(".toml") and args.config is None:
        args.config = args.template
    spec = _selected_instance(args)
    if spec is None:
        return EXIT_USAGE
    try:
        found = op_list(spec, args.level)
    except ConfigProblem as exc:
        print(f"kls: instance '{spec.name}': {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    contains: list[str] = args.contains

    def keep(name: str) -> bool:
        return all(part in name for part in contains)

    accepted = [c for c in found.accepted if keep(c.op)]
    refused = [(n, r) for n, r in found.refused if keep(n)] if args.refused else []
    if args.json:
        print(
            json.dumps(
                {
                    "instance": spec.name,
                    "level": found.level,
                    "accepted": [dataclasses.asdict(c) for c in accepted],
                    "refused": [{"op": n, "reason": r} for n, r in refused],
                    "refused_total": sum(1 for n, _ in found.refused if keep(n)),
                },
                indent=2,
            )
        )
        return EXIT_OK
    for c in accepted:
        print(f"{c.op}  [{c.family}, {c.tile}]")
    for n, r in refused:
        print(f"{n}  refused: {r}")
    total = sum(1 for n, _ in found.refused if keep(n))
    print(
        f"kls: {len(accepted)} op(s) accepted, {total} refused for instance '{spec.name}' at "
        f'cutlass_instantiation_level "{found.level}"'
        + ("" if args.refused else " (--refused lists them with the reason)"),
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    from kls.cache_dir import caches, clear_cache, usage

    config = find_config(Path.cwd())
    areas = caches(config.parent if config else None)
    unknown = [n for n in args.names if n not in {a.name for a in areas}]
    if unknown:
        names = ", ".join(a.name for a in areas)
        print(f"kls: no cache named {', '.join(unknown)}; one of {names}", file=sys.stderr)
        return EXIT_USAGE
    chosen = [a for a in areas if not args.names or a.name in args.names]
    records = []
    for area in chosen:
        files, size = usage(area.path)
        if args.action == "clear":
            clear_cache(area.path)
        records.append(
            {"name": area.name, "path": str(area.path), "what": area.what}
            | {"files": files, "bytes": size}
        )
    if args.json:
        print(json.dumps({"action": args.action, "caches": records}, indent=2))
        return EXIT_OK
    for r in records:
        size_mb = f"{int(r['bytes']) / 1e6:.1f} MB"
        if args.action == "clear":
            print(f"kls: removed {r['name']}: {r['files']} file(s), {size_mb} from {r['path']}")
        else:
            print(f"{r['name']:16}{r['files']:>8} files {size_mb:>10}  {r['path']}  ({r['what']})")
    return EXIT_OK


def cmd_rules(args: argparse.Namespace) -> int:
    if args.json and not args.profile:
        rules = [
            {"code": r.code, "severity": r.severity.label, "name": r.name, "summary": r.summary}
            for r in RULES.values()
        ]
        print(json.dumps(rules, indent=2))
        return EXIT_OK
    for rule in RULES.values():
        print(f"{rule.code}\t{rule.severity.label}\t{rule.name}\t{rule.summary}")
    if args.profile:
        from kls.checks.catalogue import profile_rules
        from kls.checks.signatures import helpers
        from kls.profiles import PROFILES, profile

        try:
            facts = profile(args.profile)
        except KeyError:
            print(f"kls: unknown profile '{args.profile}'; one of {', '.join(PROFILES)}")
            return EXIT_USAGE
        print(f"\nprofile {facts.name}: mirrors {facts.mirrors}")
        table = helpers(facts.name)
        for sig in table.values():
            print(f"helper\t{sig.label}\t{' '.join(sig.doc.split())}")
        for owner in ("kernel", "template"):
            attrs = sorted(facts.api(owner) - {n for o, n in table if o == owner})
            if attrs:
                print(f"attribute\t{', '.join(f'{owner}.{a}' for a in attrs)}")
        for own in profile_rules(facts.name):
            print(f"rule\t{own.code}\t{own.severity.label}\t{own.name}\t{own.summary}")
        for kind in [k for k in ("cutlass_gemm", "cuda", "triton") if k in facts.context] or [
            "cutlass_gemm",
            "cuda",
        ]:
            buffers = set(facts.gemm_buffers) if kind == "cutlass_gemm" else set()
            names = ", ".join(sorted(facts.context_names(kind) | buffers))
            print(f"context\t{kind}\t{names}")
            print(f"reserved\t{kind}\t{', '.join(sorted(facts.reserved_c_names(kind)))}")
    return EXIT_OK


def cmd_docs(args: argparse.Namespace) -> int:
    from kls.docs import generate, sections

    text = generate()
    if args.section:
        text = sections(text, args.section)
        if not text:
            print(f"kls: no section of the template API mentions '{args.section}'", file=sys.stderr)
            return EXIT_USAGE
    if args.json:
        print(json.dumps({"section": args.section, "markdown": text}, indent=2))
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from kls.lsp.server import serve
    except ImportError as exc:  # pragma: no cover - packaging problem
        print(f"kls: the language server is unavailable: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from kls.compile.run import kill_children

    _kill_children_on_exit(grace_s=2.0)
    from kls.sandbox.workers import close_shared_workers

    try:
        return serve(args.tcp)
    finally:
        close_shared_workers()
        kill_children()


if __name__ == "__main__":
    sys.exit(main())
