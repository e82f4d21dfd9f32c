"""Compiles from the editor: on save or as a command, as a cancellable job; nvcc's findings
are published on the template lines they belong to, apart from kls's own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from kls.compile import CompileResult, compile_instance
from kls.compile.run import CompileCancelled
from kls.findings import Finding
from kls.instances import InstanceSpec
from kls.lsp.convert import to_diagnostic

if TYPE_CHECKING:
    from kls.lsp.server import KlsServer


async def compile_active(k: KlsServer, uri: str, mode: str) -> dict[str, Any]:
    """Compile the active instance of `uri` with progress and cancellation; publish
    nvcc's findings on the template lines they belong to."""
    path = k.path(uri)
    spec = k.active_instance(path)
    if spec is None:
        return {"ok": False, "error": "no instance declares this template in kls.toml"}
    options = k.compile_options(mode)
    overrides = k.overrides()

    def work(cancel: threading.Event, report: Callable[[str], None]) -> CompileResult:
        report(f"rendering {spec.name}")
        return compile_instance(
            spec,
            options,
            overrides,
            cancel,
            on_nvcc_start=lambda: report(f"nvcc {mode}: {spec.name}"),
        )

    assert k.jobs is not None
    try:
        result = await k.jobs.run(f"compile:{path}", f"kls {mode} {spec.name}", work)
    except (asyncio.CancelledError, CompileCancelled):
        return {"ok": False, "cancelled": True, "instance": spec.name}
    set_nvcc_findings(k, spec, result.findings)
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


def set_nvcc_findings(k: KlsServer, spec: InstanceSpec, findings: list[Finding]) -> None:
    files = {
        str(p.resolve())
        for p in (spec.template, spec.argument_template, spec.epilogue_template)
        if p is not None
    }
    files |= {f.path for f in findings}
    for file in files:
        k.nvcc[file] = [f for f in findings if f.path == file]
        uri = Path(file).as_uri()
        if uri in k.docs:
            k.publish(uri)
        else:
            k.ls.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(
                    uri=uri, diagnostics=[to_diagnostic(f) for f in k.nvcc[file]]
                )
            )
