"""Benchmarks from the editor: the Benchmark command as a job, and the last result of the active
instance as a kls-bench diagnostic on the def_kernel line (stale once the rendered kernel
changes). The lens title and inlay hint (`kls.lsp.lenses`) read the same view."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types as lsp

from kls.bench.history import History
from kls.bench.report import BenchReport
from kls.bench.run import BenchOptions, benchmark_instance, source_hash
from kls.bench.runner import WorkerCancelled
from kls.compile.run import CompileCancelled
from kls.findings import Finding, Severity
from kls.lsp.protocol import BENCHMARK_COMMAND, BenchmarkAnswer, uri_argument
from kls.lsp.state import NO_SETTINGS, KlsServer
from kls.positions import Range
from kls.template.model import parse_template
from kls.template.source import is_python_file

NO_INSTANCE = "no instance declares this template in kls.toml"


@dataclass(frozen=True)
class BenchView:
    report: BenchReport
    stale: bool

    def title(self) -> str:
        text = self.report.headline()
        return f"{text} (stale: the template changed since)" if self.stale else text


def bench_finding(view: BenchView, rng: Range, path: str) -> Finding:
    """The last benchmark as a diagnostic on the def_kernel line (source kls-bench)."""
    report = view.report
    if report.ok:
        severity = Severity.HINT if view.stale else Severity.INFO
        return Finding(
            "KT700", severity, rng, view.title(), path, report.instance, source="kls-bench"
        )
    return Finding(
        "KT701",
        Severity.ERROR,
        rng,
        f"benchmark failed: {report.message}",
        path,
        report.instance,
        source="kls-bench",
    )


def bench_view(ls: KlsServer, uri: str) -> BenchView | None:
    """The last benchmark of the active instance, and whether the template changed since."""
    spec = ls.active_instance(ls.path(uri))
    if spec is None:
        return None
    report = History(spec.config_path.parent).last(spec.name, ok_only=False)
    if report is None:
        return None
    state = ls.docs.get(uri)
    rendered = state.result.renders.get(spec.name) if state and state.result else None
    stale = bool(
        rendered is not None
        and rendered.text is not None
        and report.source_hash
        and source_hash(rendered.text) != report.source_hash
    )
    return BenchView(report, stale)


def bench_findings(ls: KlsServer, uri: str) -> list[Finding]:
    view = bench_view(ls, uri)
    if view is None or uri not in ls.docs or is_python_file(ls.path(uri)):
        return []  # (a Python file is no template: its constants are, kls.lsp.python_documents)
    anchors = parse_template(ls.text(uri)).kernel_declarations()
    if not anchors:
        return []
    return [bench_finding(view, anchors[0], str(ls.path(uri)))]


def update_findings(ls: KlsServer, uri: str, first: bool = True) -> None:
    """Store the kls-bench finding of `uri` (after every check: the render it is compared
    with changed)."""
    ls.diagnostics.set(uri, "kls-bench", bench_findings(ls, uri))


async def benchmark_active(ls: KlsServer, uri: str) -> BenchmarkAnswer:
    path = ls.path(uri)
    spec = ls.active_instance(path)
    if spec is None:
        return {"ok": False, "error": NO_INSTANCE}
    options = BenchOptions(compile=ls.compile_options("build"))
    overrides = ls.overrides()

    def work(cancel: threading.Event, report: Callable[[str], None]) -> BenchReport:
        return benchmark_instance(spec, options, overrides, cancel, report)

    try:
        result = await ls.jobs.run(f"bench:{path}", f"kls benchmark {spec.name}", work)
    except (asyncio.CancelledError, CompileCancelled, WorkerCancelled):
        return {"ok": False, "cancelled": True, "instance": spec.name}
    if uri in ls.docs:
        update_findings(ls, uri)
        ls.publish(uri)
    ls.refresh_lenses()
    if not result.ok:
        ls.window_show_message(
            lsp.ShowMessageParams(
                type=lsp.MessageType.Error, message=f"kls benchmark: {result.headline()}"
            )
        )
    return {
        "ok": result.ok,
        "instance": spec.name,
        "headline": result.headline(),
        "report": result.to_json(),
    }


async def benchmark_command(ls: KlsServer, *args: Any) -> BenchmarkAnswer:
    uri = uri_argument(args, BENCHMARK_COMMAND)
    if not await ls.wait_for_settings():
        return {"ok": False, "error": NO_SETTINGS}
    await ls.load_config(ls.path(uri))
    return await benchmark_active(ls, uri)


def register(ls: KlsServer) -> None:
    ls.command(BENCHMARK_COMMAND)(benchmark_command)
    ls.after_check.append(update_findings)
