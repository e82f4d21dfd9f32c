"""What kls adds to LSP, as types: its request and command names, their arguments' vocabularies
and the shape of every answer.

The VS Code extension mirrors these in `vscode-extension/src/logic/protocol.ts`;
`tests/lsp/test_contracts.py` keeps the two (and package.json's settings, against
`kls.lsp.settings.Settings`) in step.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover
    from typing_extensions import NotRequired

from pygls.exceptions import JsonRpcInvalidParams

from kls.instances.schema import InstanceKind, Profile, Reference

__all__ = [
    "ASSEMBLY_COMMAND",
    "BENCHMARK_COMMAND",
    "CANCEL_COMMAND",
    "COMMANDS",
    "COMPILE_COMMAND",
    "PREVIEW_COMMAND",
    "PREVIEW_REQUEST",
    "SELECT_INSTANCE_COMMAND",
    "TUNE_COMMAND",
    "AssemblyAnswer",
    "AssemblyKind",
    "BenchmarkAnswer",
    "CancelAnswer",
    "CompileAnswer",
    "CompileMode",
    "DiagnosticSource",
    "InstanceKind",
    "JobKind",
    "PreviewAnswer",
    "Profile",
    "Reference",
    "SelectInstanceAnswer",
    "TuneAnswer",
]

PREVIEW_REQUEST = "kls/preview"
PREVIEW_COMMAND = "kls.preview"
SELECT_INSTANCE_COMMAND = "kls.selectInstance"
COMPILE_COMMAND = "kls.compile"
CANCEL_COMMAND = "kls.cancel"
BENCHMARK_COMMAND = "kls.benchmark"
TUNE_COMMAND = "kls.tune"
ASSEMBLY_COMMAND = "kls.assembly"
COMMANDS = (
    PREVIEW_COMMAND,
    SELECT_INSTANCE_COMMAND,
    COMPILE_COMMAND,
    CANCEL_COMMAND,
    BENCHMARK_COMMAND,
    TUNE_COMMAND,
    ASSEMBLY_COMMAND,
)

# `check`: nvcc's front end only (fast); `build`: a shared library with Inductor's flags.
CompileMode = Literal["check", "build"]
# Who found a diagnostic: kls's own checks, nvcc (a compile), the last benchmark, the last tune.
DiagnosticSource = Literal["kls", "clang", "nvcc", "kls-bench", "kls-tune"]
# What `kls.cancel` stops.
JobKind = Literal["compile", "bench", "tune"]
# Which listing `kls.assembly` shows: Triton's PTX, or the cubin's SASS.
AssemblyKind = Literal["ptx", "sass"]


class PreviewAnswer(TypedDict):
    """`kls/preview` and `kls.preview`: the rendered CUDA of an instance, or why not."""

    instance: str | None
    text: str | None
    error: str | None
    uri: str | None


class SelectInstanceAnswer(TypedDict):
    """`kls.selectInstance [uri, name?]`: the instances of a template and the active one."""

    ok: bool
    instances: list[str]
    active: NotRequired[str | None]
    error: NotRequired[str]


class CompileAnswer(TypedDict):
    """`kls.compile [uri, mode?]`. `error` alone when no instance renders the template;
    `cancelled` when a cancel stopped it; else the compile's outcome."""

    ok: bool
    instance: NotRequired[str]
    error: NotRequired[str]
    cancelled: NotRequired[bool]
    mode: NotRequired[CompileMode]
    cached: NotRequired[bool]
    seconds: NotRequired[float]
    errors: NotRequired[int]
    artifact: NotRequired[str | None]
    log: NotRequired[str]


class CancelAnswer(TypedDict):
    """`kls.cancel [uri]`: the kinds of job that were running and were told to stop."""

    cancelled: list[JobKind]


class BenchmarkAnswer(TypedDict):
    """`kls.benchmark [uri]`. `report` is `kls.bench.report.BenchReport.to_json()`."""

    ok: bool
    instance: NotRequired[str]
    error: NotRequired[str]
    cancelled: NotRequired[bool]
    headline: NotRequired[str]
    report: NotRequired[dict[str, Any]]


class TuneAnswer(TypedDict):
    """`kls.tune [uri]`. `build_only` when there was no GPU to time on (the candidates were
    only built; `headline` says so); `winner` the best op over every shape and `margin` its
    geometric-mean speed-up over the instance's current op and variables (0.03: 3 % faster);
    `results` the results.json written."""

    ok: bool
    instance: NotRequired[str]
    error: NotRequired[str]
    cancelled: NotRequired[bool]
    build_only: NotRequired[bool]
    headline: NotRequired[str]
    winner: NotRequired[str | None]
    margin: NotRequired[float | None]
    results: NotRequired[str]


class AssemblyAnswer(TypedDict):
    """`kls.assembly [uri, kind?, line?]`: the PTX or SASS of a Triton template's active
    instance (`uri` the template or its preview), its virtual document's `uri`, and `lines`,
    the listing lines (0-based) of the instructions of `line` (a template line, or a module
    line when `uri` is the preview); `error` alone, with the instance, when there is none."""

    ok: bool
    instance: NotRequired[str]
    error: NotRequired[str]
    kind: NotRequired[AssemblyKind]
    uri: NotRequired[str]
    text: NotRequired[str]
    lines: NotRequired[list[int]]


# -- reading arguments: anything malformed is the client's mistake (InvalidParams) -------------


def uri_argument(args: tuple[Any, ...], command: str) -> str:
    """`[uri]`."""
    if len(args) != 1 or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(f"{command} takes arguments [uri]")
    return args[0]


def uri_and_name(args: tuple[Any, ...], command: str) -> tuple[str, str | None]:
    """`[uri]` or `[uri, instance]`."""
    if not args or not isinstance(args[0], str) or len(args) > 2:
        raise JsonRpcInvalidParams(f"{command} takes arguments [uri, instance?]")
    name = args[1] if len(args) == 2 else None
    if name is not None and not isinstance(name, str):
        raise JsonRpcInvalidParams(f"{command}: the instance name must be a string")
    return args[0], name


def uri_and_mode(args: tuple[Any, ...], command: str) -> tuple[str, CompileMode]:
    """`[uri]` or `[uri, "check" | "build"]`."""
    if not args or not isinstance(args[0], str) or len(args) > 2:
        raise JsonRpcInvalidParams(f"{command} takes arguments [uri, mode?]")
    mode = args[1] if len(args) == 2 else "check"
    if mode == "check":
        return args[0], "check"
    if mode == "build":
        return args[0], "build"
    raise JsonRpcInvalidParams(f"{command}: mode is 'check' or 'build'")


def param(params: Any, key: str) -> Any:
    """A field of a custom request's params (a dict, or pygls's object for unknown methods)."""
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)
