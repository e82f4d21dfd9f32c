"""Code lenses (Preview / Compile / Benchmark above each def_kernel) and the benchmark inlay
hint. The Benchmark lens is resolved lazily (`codeLens/resolve`): its title reads the
benchmark history."""

from __future__ import annotations

from lsprotocol import types as lsp

from kls.lsp import python_documents
from kls.lsp.bench import BenchView, bench_view
from kls.lsp.convert import to_lsp_range
from kls.lsp.protocol import BENCHMARK_COMMAND, COMPILE_COMMAND, PREVIEW_COMMAND
from kls.lsp.state import KlsServer
from kls.template.model import TemplateModel


def code_lenses(model: TemplateModel, uri: str, instance: str | None) -> list[lsp.CodeLens]:
    lenses: list[lsp.CodeLens] = []
    for call in model.calls_to("kernel", "def_kernel"):
        rng = to_lsp_range(call.range)
        suffix = f" ({instance})" if instance else " (no instance)"
        for title, command in (("Preview" + suffix, PREVIEW_COMMAND), ("Compile", COMPILE_COMMAND)):
            lenses.append(
                lsp.CodeLens(
                    range=rng, command=lsp.Command(title=title, command=command, arguments=[uri])
                )
            )
        lenses.append(lsp.CodeLens(range=rng, data={"uri": uri, "kind": "benchmark"}))
    return lenses


def resolve_benchmark_lens(lens: lsp.CodeLens, bench: BenchView | None) -> lsp.CodeLens:
    uri = lens.data.get("uri") if isinstance(lens.data, dict) else None
    title = f"Benchmark · {bench.title()}" if bench else "Benchmark"
    lens.command = lsp.Command(title=title, command=BENCHMARK_COMMAND, arguments=[uri])
    return lens


def bench_inlay_hints(model: TemplateModel, view: BenchView | None) -> list[lsp.InlayHint]:
    if view is None or not view.report.ok:
        return []
    hints = []
    for call in model.calls_to("kernel", "def_kernel"):
        line = call.range.end.line
        end = len(model.index.line_text(line))
        hints.append(
            lsp.InlayHint(
                position=lsp.Position(line=line, character=end),
                label=f" {view.title()}",
                padding_left=True,
            )
        )
    return hints


# -- handlers ---------------------------------------------------------------------------------


async def on_code_lens(ls: KlsServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
    uri = params.text_document.uri
    if python_documents.handles(ls, uri):  # templates in a Python file's string constants
        return await python_documents.code_lenses(ls, params)
    model = await ls.model(uri)
    spec = ls.active_instance(ls.path(uri))
    return code_lenses(model, uri, spec.name if spec else None)


def on_code_lens_resolve(ls: KlsServer, lens: lsp.CodeLens) -> lsp.CodeLens:
    uri = lens.data.get("uri") if isinstance(lens.data, dict) else None
    view = bench_view(ls, uri) if isinstance(uri, str) else None
    return resolve_benchmark_lens(lens, view)


async def on_inlay_hints(ls: KlsServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
    uri = params.text_document.uri
    if uri not in ls.docs or python_documents.handles(ls, uri):
        return []
    view = bench_view(ls, uri)
    return bench_inlay_hints(await ls.model(uri), view)


def register(ls: KlsServer) -> None:
    ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=True))(
        on_code_lens
    )
    ls.feature(lsp.CODE_LENS_RESOLVE)(on_code_lens_resolve)
    ls.feature(lsp.TEXT_DOCUMENT_INLAY_HINT)(on_inlay_hints)
