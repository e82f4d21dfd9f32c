"""Benchmarks from the editor: the Benchmark command as a job, and its last result as a
kls-bench diagnostic, lens title and inlay hint (stale once the rendered kernel changes)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from kls.bench.history import History
from kls.bench.report import BenchReport
from kls.bench.run import BenchOptions, benchmark_instance, source_hash
from kls.bench.runner import WorkerCancelled
from kls.compile.run import CompileCancelled
from kls.findings import Finding
from kls.lsp.features import BenchView, bench_finding
from kls.template.model import parse_template

if TYPE_CHECKING:
    from kls.lsp.server import KlsServer


def bench_view(k: KlsServer, uri: str) -> BenchView | None:
    """The last benchmark of the active instance, and whether the template changed since."""
    path = k.path(uri)
    spec = k.active_instance(path)
    if spec is None:
        return None
    report = History(spec.config_path.parent).last(spec.name, ok_only=False)
    if report is None:
        return None
    state = k.docs.get(uri)
    rendered = state.result.renders.get(spec.name) if state and state.result else None
    stale = bool(
        rendered is not None
        and rendered.text is not None
        and report.source_hash
        and source_hash(rendered.text) != report.source_hash
    )
    return BenchView(report, stale)


def bench_findings(k: KlsServer, uri: str) -> list[Finding]:
    view = bench_view(k, uri)
    if view is None or uri not in k.docs:
        return []
    model = parse_template(k.text(uri))
    calls = model.calls_to("kernel", "def_kernel")
    if not calls:
        return []
    return [bench_finding(view, calls[0].range, str(k.path(uri)))]


async def benchmark_active(k: KlsServer, uri: str) -> dict[str, Any]:
    path = k.path(uri)
    spec = k.active_instance(path)
    if spec is None:
        return {"ok": False, "error": "no instance declares this template in kls.toml"}
    options = BenchOptions(compile=k.compile_options("build"))
    overrides = k.overrides()

    def work(cancel: threading.Event, report: Callable[[str], None]) -> BenchReport:
        return benchmark_instance(spec, options, overrides, cancel, report)

    assert k.jobs is not None
    try:
        result = await k.jobs.run(f"bench:{path}", f"kls benchmark {spec.name}", work)
    except (asyncio.CancelledError, CompileCancelled, WorkerCancelled):
        return {"ok": False, "cancelled": True, "instance": spec.name}
    if uri in k.docs:
        k.publish(uri)
    k.refresh_lenses()
    if not result.ok:
        k.ls.window_show_message(
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
