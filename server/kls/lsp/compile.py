"""Compiles from the editor: on save or as a command, as a cancellable job (`kls.lsp.jobs`);
nvcc's findings are stored under the template lines they belong to, apart from kls's own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kls.compile import CompileResult, compile_instance
from kls.compile.run import CompileCancelled
from kls.findings import Finding
from kls.instances import InstanceSpec
from kls.lsp.protocol import (
    CANCEL_COMMAND,
    COMPILE_COMMAND,
    CancelAnswer,
    CompileAnswer,
    CompileMode,
    JobKind,
    uri_and_mode,
    uri_argument,
)
from kls.lsp.quick import nvcc_verdict, quick_on_save
from kls.lsp.quick import register as register_quick
from kls.lsp.state import NO_SETTINGS, KlsServer
from kls.lsp.triton import remember_compile
from kls.template.source import python_file

NO_INSTANCE = "no instance declares this template in kls.toml"
JOB_KINDS: tuple[JobKind, ...] = ("compile", "bench", "tune")


async def compile_active(
    ls: KlsServer, uri: str, mode: CompileMode, spec: InstanceSpec | None = None
) -> CompileAnswer:
    """Compile the active instance of `uri` (or `spec`) with progress and cancellation;
    publish nvcc's (or Triton's) findings on the template lines they belong to."""
    path = ls.path(uri)
    spec = spec or ls.active_instance(path)
    if spec is None:
        return {"ok": False, "error": NO_INSTANCE}
    options = ls.compile_options(mode)
    overrides = ls.overrides()

    def work(cancel: threading.Event, report: Callable[[str], None]) -> CompileResult:
        report(f"rendering {spec.name}")
        return compile_instance(
            spec,
            options,
            overrides,
            cancel,
            on_nvcc_start=lambda: report(f"nvcc {mode}: {spec.name}"),
        )

    try:
        result = await ls.jobs.run(f"compile:{path}", f"kls {mode} {spec.name}", work)
    except (asyncio.CancelledError, CompileCancelled):
        return {"ok": False, "cancelled": True, "instance": spec.name}
    set_nvcc_findings(ls, spec, result.findings)
    remember_compile(ls, spec, result)  # a Triton compile's figures: inlay hint, PTX / SASS
    return {
        "ok": result.ok,
        "instance": spec.name,
        "mode": mode,
        "cached": result.cached,
        "seconds": round(result.seconds, 3),
        "errors": len(result.errors),
        "artifact": str(result.artifact) if result.artifact else None,
        "log": result.log[-20000:],
    }


def set_nvcc_findings(ls: KlsServer, spec: InstanceSpec, findings: list[Finding]) -> None:
    """Replace the nvcc findings of every file the instance reads (and of any file nvcc
    blamed), and publish them."""
    files = {
        str(python_file(p).resolve())  # a template in a Python constant: that file
        for p in (spec.template, spec.argument_template, spec.epilogue_template)
        if p is not None
    }
    files |= {f.path for f in findings}
    nvcc_verdict(ls, spec, findings)  # the quick tier's findings give way to nvcc's
    for file in files:
        for uri in ls.uris_of(Path(file)):
            ls.diagnostics.set(uri, "nvcc", [f for f in findings if f.path == file])
            ls.publish(uri)


async def compile_on_save(ls: KlsServer, uri: str) -> None:
    """clang's quick check, then nvcc's; a save before the client's settings arrive waits for
    them (a while) and then does what they say, never what the defaults say."""
    if not await ls.wait_for_settings():
        return
    if ls.settings.compile_on_save:
        await ls.load_config(ls.path(uri))
        await quick_on_save(ls, uri)  # clang first (about a second), then nvcc's verdict
        await compile_active(ls, uri, "check")


async def compile_command(ls: KlsServer, *args: Any) -> CompileAnswer:
    uri, mode = uri_and_mode(args, COMPILE_COMMAND)
    if not await ls.wait_for_settings():
        return {"ok": False, "error": NO_SETTINGS}
    await ls.load_config(ls.path(uri))
    return await compile_active(ls, uri, mode)


def cancel_command(ls: KlsServer, *args: Any) -> CancelAnswer:
    """Stop the compile, benchmark and tune jobs of a template (what a status-bar Cancel
    sends)."""
    path = ls.path(uri_argument(args, CANCEL_COMMAND))
    return {"cancelled": [kind for kind in JOB_KINDS if ls.jobs.cancel(f"{kind}:{path}")]}


def register(ls: KlsServer) -> None:
    ls.command(COMPILE_COMMAND)(compile_command)
    ls.command(CANCEL_COMMAND)(cancel_command)
    ls.after_save.append(compile_on_save)
    register_quick(ls)
