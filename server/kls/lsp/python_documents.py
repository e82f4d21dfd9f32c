"""Python files whose string constants are templates (`file.py::NAME` in kls.toml).

The document is the Python file; its templates are the constants kls.toml's instances read.
Diagnostics need nothing here: `check_file` on a Python file checks those constants and reports
in the file's own lines and columns (kls.template.source), so they lie inside the template
strings. The editor features (hover, completion, go to definition, symbols, code lenses) work
on one constant: the position asked about is moved into the template's text
(`TemplateSource.from_file`), the template features answer there, and every range they give
back is moved to the file. Anywhere else in a Python file kls answers nothing, so it never
competes with a Python language server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from kls.instances import InstanceSpec
from kls.lsp.convert import from_lsp_position, to_lsp_range
from kls.lsp.offload import off_loop
from kls.lsp.protocol import BENCHMARK_COMMAND, COMPILE_COMMAND, PREVIEW_COMMAND
from kls.lsp.state import KlsServer
from kls.positions import Position, Range
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from kls.template.model import TemplateModel, parse_template
from kls.template.source import (
    SourceError,
    TemplateRef,
    TemplateSource,
    is_python_file,
    read_source,
)


def handles(ls: KlsServer, uri: str) -> bool:
    """Whether `uri` is a Python document (its features are answered here)."""
    return is_python_file(ls.path(uri))


@dataclass(frozen=True)
class ConstantView:
    """One template constant of a Python document, and a position in its template text."""

    source: TemplateSource
    model: TemplateModel
    position: Position

    @property
    def path(self) -> Path:
        """The template's source id as the pipeline names it (`file.py::NAME`)."""
        return self.source.ref.path


@functools.lru_cache(maxsize=32)
def _model(text: str) -> TemplateModel:
    return parse_template(text)


def _sources(ls: KlsServer, uri: str) -> list[TemplateSource]:
    """The constants of this Python document that instances read, from its current text."""
    path = ls.path(uri)
    instances = ls.instances(path)
    if instances is None:
        return []
    overrides = {path: ls.text(uri)}
    out = []
    for source_id in instances.sources_in(path):
        try:
            out.append(read_source(source_id, overrides))
        except (SourceError, OSError, UnicodeDecodeError):
            continue  # the check reports why (KT105 on the constant's line)
    return out


async def sources(ls: KlsServer, uri: str) -> list[TemplateSource]:
    await ls.load_config(ls.path(uri))
    return await off_loop(_sources, ls, uri)


async def view_at(ls: KlsServer, uri: str, pos: Position) -> ConstantView | None:
    """The template constant written at `pos` of the document, if any."""
    for source in await sources(ls, uri):
        inside = source.from_file(pos)
        if inside is not None:
            return ConstantView(source, await off_loop(_model, source.text), inside)
    return None


def instance_for(ls: KlsServer, uri: str, source: TemplateSource) -> InstanceSpec | None:
    """The document's active instance if it reads this constant, else the first that does."""
    readers = ls.instances_of(source.ref.path)
    active = ls.active_instance(ls.path(uri))
    if active is not None and any(r.name == active.name for r in readers):
        return active
    return readers[0] if readers else None


async def _render(ls: KlsServer, uri: str, spec: InstanceSpec | None) -> RenderResult | None:
    """`spec`'s render for the current text: the last check's when it is current."""
    if spec is None:
        return None
    state = ls.docs.get(uri)
    if state is not None and state.up_to_date and state.result is not None:
        checked = state.result.renders.get(spec.name)
        if checked is not None:
            return checked
    return await off_loop(render_isolated, spec, ls.overrides())


def _range_to_file(source: TemplateSource, rng: lsp.Range) -> lsp.Range:
    template = Range(from_lsp_position(rng.start), from_lsp_position(rng.end))
    return to_lsp_range(source.to_file(template))


def location_to_file(ls: KlsServer, location: lsp.Location) -> lsp.Location:
    """A location in a template constant (its URI names the source id) as the Python file's."""
    path = to_fs_path(location.uri) or ""
    ref = TemplateRef.parse(path)
    if ref.constant is None:
        return location
    try:
        source = read_source(ref, ls.overrides())
    except (SourceError, OSError, UnicodeDecodeError):
        return lsp.Location(uri=ref.file.resolve().as_uri(), range=location.range)
    return lsp.Location(
        uri=ref.file.resolve().as_uri(), range=_range_to_file(source, location.range)
    )


# -- the features, for Python documents (navigation.py and lenses.py hand them over, with the
# template feature that answers inside one template) -------------------------------------------

HoverFn = Callable[[TemplateModel, Position, RenderResult | None, Path], lsp.Hover | None]
CompletionFn = Callable[
    [TemplateModel, str, Position, InstanceSpec | None], list[lsp.CompletionItem]
]
DefinitionFn = Callable[[TemplateModel, Position, Path, InstanceSpec | None], lsp.Location | None]
SymbolsFn = Callable[[TemplateModel], list[lsp.DocumentSymbol]]


async def hover(ls: KlsServer, params: lsp.HoverParams, answer: HoverFn) -> lsp.Hover | None:
    uri = params.text_document.uri
    view = await view_at(ls, uri, from_lsp_position(params.position))
    if view is None:
        return None
    result = await _render(ls, uri, instance_for(ls, uri, view.source))
    found = answer(view.model, view.position, result, view.path)
    if found is not None and found.range is not None:
        found.range = _range_to_file(view.source, found.range)
    return found


async def completion(
    ls: KlsServer, params: lsp.CompletionParams, complete: CompletionFn
) -> lsp.CompletionList:
    uri = params.text_document.uri
    view = await view_at(ls, uri, from_lsp_position(params.position))
    if view is None:
        return lsp.CompletionList(is_incomplete=False, items=[])
    line = view.model.index.line_text(view.position.line)
    spec = instance_for(ls, uri, view.source)
    items = complete(view.model, line, view.position, spec)
    return lsp.CompletionList(is_incomplete=False, items=items)


async def definition(
    ls: KlsServer, params: lsp.DefinitionParams, find: DefinitionFn
) -> lsp.Location | None:
    uri = params.text_document.uri
    view = await view_at(ls, uri, from_lsp_position(params.position))
    if view is None:
        return None
    spec = instance_for(ls, uri, view.source)
    found = find(view.model, view.position, view.path, spec)
    return location_to_file(ls, found) if found is not None else None


def _symbol_to_file(source: TemplateSource, symbol: lsp.DocumentSymbol) -> lsp.DocumentSymbol:
    symbol.range = _range_to_file(source, symbol.range)
    symbol.selection_range = _range_to_file(source, symbol.selection_range)
    symbol.children = [_symbol_to_file(source, c) for c in symbol.children or []] or None
    return symbol


async def symbols(
    ls: KlsServer, params: lsp.DocumentSymbolParams, symbols_of: SymbolsFn
) -> list[lsp.DocumentSymbol]:
    out: list[lsp.DocumentSymbol] = []
    for source in await sources(ls, params.text_document.uri):
        model = await off_loop(_model, source.text)
        out.extend(_symbol_to_file(source, s) for s in symbols_of(model))
    return out


async def code_lenses(ls: KlsServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
    """Above each constant that an instance renders as its main template: Preview (which makes
    that instance the document's active one), and Compile / Benchmark for the active one."""
    uri = params.text_document.uri
    path = ls.path(uri)
    out: list[lsp.CodeLens] = []
    found = await sources(ls, uri)
    active = ls.active_instance(path)
    for source in found:
        mains = [s for s in ls.instances_of(source.ref.path) if s.template == source.ref.path]
        if not mains:
            continue
        chosen = instance_for(ls, uri, source)
        spec = next((s for s in mains if chosen and s.name == chosen.name), mains[0])
        start = source.position_to_file(Position(0, 0))  # just after the opening quote
        rng = to_lsp_range(Range(start, start))
        preview = lsp.Command(
            title=f"Preview ({spec.name})", command=PREVIEW_COMMAND, arguments=[uri, spec.name]
        )
        out.append(lsp.CodeLens(range=rng, command=preview))
        if active is not None and active.name == spec.name:
            for title, command in (("Compile", COMPILE_COMMAND), ("Benchmark", BENCHMARK_COMMAND)):
                run = lsp.Command(title=title, command=command, arguments=[uri])
                out.append(lsp.CodeLens(range=rng, command=run))
    return out
