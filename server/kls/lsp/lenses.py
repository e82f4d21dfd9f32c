"""Code lenses (Preview / Compile / Benchmark / Tune above each def_kernel, or a torch-2.11
GEMM's kernel_call_signature) and the benchmark and tune inlay hints. The Benchmark and Tune
lenses are resolved lazily (`codeLens/resolve`): their titles read the benchmark history and
the last tune's results."""

from __future__ import annotations

from lsprotocol import types as lsp

from kls.lsp import python_documents, triton
from kls.lsp.bench import BenchView, bench_view
from kls.lsp.convert import end_of_line_hint, to_lsp_range
from kls.lsp.protocol import BENCHMARK_COMMAND, COMPILE_COMMAND, PREVIEW_COMMAND
from kls.lsp.state import KlsServer
from kls.lsp.tune import (
    resolve_tune_lens,
    tune_inlay_hints,
    tune_view,
)
from kls.template.model import TemplateModel


def code_lenses(
    model: TemplateModel, uri: str, instance: str | None, tunable: bool = False
) -> list[lsp.CodeLens]:
    """Preview, Compile, Benchmark, and Tune where the active instance is a CUTLASS GEMM (what
    `kls tune` can tune; for another kernel it would only answer 'nothing to tune')."""
    lenses: list[lsp.CodeLens] = []
    for anchor in model.kernel_declarations():
        rng = to_lsp_range(anchor)
        suffix = f" ({instance})" if instance else " (no instance)"
        for title, command in (("Preview" + suffix, PREVIEW_COMMAND), ("Compile", COMPILE_COMMAND)):
            lenses.append(
                lsp.CodeLens(
                    range=rng, command=lsp.Command(title=title, command=command, arguments=[uri])
                )
            )
        lenses.append(lsp.CodeLens(range=rng, data={"uri": uri, "kind": "benchmark"}))
        if tunable:
            lenses.append(lsp.CodeLens(range=rng, data={"uri": uri, "kind": "tune"}))
    return lenses


def resolve_benchmark_lens(lens: lsp.CodeLens, bench: BenchView | None) -> lsp.CodeLens:
    uri = lens.data.get("uri") if isinstance(lens.data, dict) else None
    title = f"Benchmark · {bench.title()}" if bench else "Benchmark"
    lens.command = lsp.Command(title=title, command=BENCHMARK_COMMAND, arguments=[uri])
    return lens


def bench_inlay_hints(model: TemplateModel, view: BenchView | None) -> list[lsp.InlayHint]:
    if view is None or not view.report.ok:
        return []
    lines = [rng.end.line for rng in model.kernel_declarations()]
    return [end_of_line_hint(n, model.index.line_text(n), view.title()) for n in lines]


# -- handlers ---------------------------------------------------------------------------------


async def on_code_lens(ls: KlsServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
    uri = params.text_document.uri
    if python_documents.handles(ls, uri):  # templates in a Python file's string constants
        return await python_documents.code_lenses(ls, params)
    model = await ls.model(uri)
    spec = ls.active_instance(ls.path(uri))
    tunable = spec is not None and spec.kind == "cutlass_gemm"
    return code_lenses(model, uri, spec.name if spec else None, tunable)


def on_code_lens_resolve(ls: KlsServer, lens: lsp.CodeLens) -> lsp.CodeLens:
    data = lens.data if isinstance(lens.data, dict) else {}
    uri = data.get("uri")
    if data.get("kind") == "tune":
        return resolve_tune_lens(lens, tune_view(ls, uri) if isinstance(uri, str) else None)
    view = bench_view(ls, uri) if isinstance(uri, str) else None
    return resolve_benchmark_lens(lens, view)


async def on_inlay_hints(ls: KlsServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
    uri = params.text_document.uri
    if uri not in ls.docs or python_documents.handles(ls, uri):
        return []
    if triton.is_triton(ls, uri):  # the last Triton compile's registers, shared memory
        compiled = await triton.inlay_hints(ls, uri)
    else:
        compiled = []
    model = await ls.model(uri)
    return (
        compiled
        + bench_inlay_hints(model, bench_view(ls, uri))
        + tune_inlay_hints(model, tune_view(ls, uri))
    )


def register(ls: KlsServer) -> None:
    ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=True))(
        on_code_lens
    )
    ls.feature(lsp.CODE_LENS_RESOLVE)(on_code_lens_resolve)
    ls.feature(lsp.TEXT_DOCUMENT_INLAY_HINT)(on_inlay_hints)
