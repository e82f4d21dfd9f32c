"""Hover, completion, go to definition and document symbols: computed from the template
model and the active instance's render (the last check's when it is current)."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from kls.checks.signatures import BUFFER_HELPERS, helper_sig, helpers_of
from kls.instances import InstanceSpec
from kls.lsp import config_documents, python_documents, triton
from kls.lsp.convert import from_lsp_position, to_lsp_range
from kls.lsp.state import KlsServer
from kls.positions import Position, Range
from kls.render import RenderResult, context_names
from kls.template.model import HelperCall, TemplateModel

OWNER_DOT = re.compile(r"\b(kernel|template)\.(\w*)$")


def hover(
    model: TemplateModel, pos: Position, result: RenderResult | None, path: Path
) -> lsp.Hover | None:
    call = model.call_at(pos)
    if call is None:
        return None
    sig = helper_sig(call.owner, call.helper, result.instance.profile if result else None)
    lines: list[str] = []
    if sig is not None:
        lines += [f"```python\n{sig.label}\n```", sig.doc]
    node = call.arg(0, "node")
    if result is not None and node is not None and call.helper in BUFFER_HELPERS:
        ref = node.name_ref()
        if ref is not None and ref.name is not None:
            lines.append(_buffer_text(ref.name, result))
    rendered = _rendered_text(call, result, path)
    if rendered is not None and result is not None:
        lines.append(f"Renders to (instance `{result.instance.name}`):\n```cuda\n{rendered}\n```")
    if not lines:
        return None
    return lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n\n".join(lines)),
        range=to_lsp_range(call.range),
    )


def _buffer_text(name: str, result: RenderResult) -> str:
    if name not in result.instance.tensors:
        return f"`{name}` is not a tensor of instance `{result.instance.name}` (see kls.toml)"
    spec = result.instance.tensors[name]
    if spec is None:
        return f"`{name}` is None for instance `{result.instance.name}`"
    params = [p.buffer for p in result.params]
    if not result.ok:
        where = "C parameter unknown: this instance does not render (see the diagnostics)"
    elif name in params:
        index = params.index(name)
        where = f"C parameter #{index} (`{result.params[index].declaration()}`)"
    else:
        where = "no C parameter (not declared in def_kernel)"
    shape = ", ".join(str(s) for s in spec.shape)
    stride = ", ".join(str(s) for s in spec.stride)
    return (
        f"**{name}** ({result.instance.name}): `{spec.dtype.name}[{shape}]`, "
        f"strides ({stride}), offset {spec.offset}; {where}"
    )


def _rendered_text(call: HelperCall, result: RenderResult | None, path: Path) -> str | None:
    """What this call rendered to in the active instance (its first execution)."""
    if result is None:
        return None
    for rec in result.calls:
        site = rec.site
        if (
            rec.helper == call.helper
            and site is not None
            and site.path == str(path)
            and call.range.start.line <= site.line <= call.range.end.line
        ):
            return rec.result
    return None


def completions(
    model: TemplateModel, line_text: str, pos: Position, instance: InstanceSpec | None
) -> list[lsp.CompletionItem]:
    prefix = line_text[: pos.column]
    m = OWNER_DOT.search(prefix)
    if m:
        return [
            lsp.CompletionItem(
                label=h.name,
                kind=lsp.CompletionItemKind.Method,
                detail=h.label,
                documentation=h.doc,
            )
            for h in helpers_of(m.group(1), instance.profile if instance else None)
        ]
    call = model.call_at(pos)
    if call is not None and call.helper in BUFFER_HELPERS and instance is not None:
        return [
            lsp.CompletionItem(
                label=name,
                kind=lsp.CompletionItemKind.Variable,
                detail=spec.describe() if spec else "None",
            )
            for name, spec in instance.tensors.items()
        ]
    names = context_names(instance) if instance else ["kernel", "template"]
    return [lsp.CompletionItem(label=n, kind=lsp.CompletionItemKind.Variable) for n in names]


SUB_TEMPLATE_NAMES = ("argument_template", "epilogue_template")


def definition(
    model: TemplateModel, pos: Position, path: Path, instance: InstanceSpec | None = None
) -> lsp.Location | None:
    for stmt in model.includes():
        if stmt.target and stmt.target_range and stmt.target_range.contains(pos):
            target = path.parent / stmt.target
            if target.is_file():
                return _file_start(target)
    word = _word_at(model, pos)
    if word is None:
        return None
    if word in SUB_TEMPLATE_NAMES and instance is not None:
        target = getattr(instance, word)
        return _file_start(target) if target is not None else None
    for call in model.calls_to("kernel", "def_kernel"):
        for index, name in ((0, "inputs"), (1, "outputs")):
            arg = call.arg(index, name)
            refs = arg.name_list(model.index) if arg else None
            for ref in refs or []:
                if ref.name == word:
                    return lsp.Location(uri=path.as_uri(), range=to_lsp_range(ref.range))
    return None


def _file_start(target: Path) -> lsp.Location:
    start = lsp.Position(line=0, character=0)
    return lsp.Location(uri=target.as_uri(), range=lsp.Range(start=start, end=start))


def _word_at(model: TemplateModel, pos: Position) -> str | None:
    for name, uses in model.name_uses.items():
        if any(u.contains(pos) for u in uses):
            return name
    return None


def symbols(model: TemplateModel) -> list[lsp.DocumentSymbol]:
    out: list[lsp.DocumentSymbol] = []
    for stmt in model.statements:
        if stmt.tag in ("block", "macro") and stmt.target:
            kind = lsp.SymbolKind.Function if stmt.tag == "macro" else lsp.SymbolKind.Namespace
            out.append(_symbol(f"{stmt.tag} {stmt.target}", kind, stmt.range, stmt.target_range))
    for call in model.calls_to("kernel", "def_kernel"):
        out.append(
            _symbol(
                "def_kernel (exported C entry)",
                lsp.SymbolKind.Function,
                call.range,
                call.name_range,
            )
        )
    return out


def _symbol(name: str, kind: lsp.SymbolKind, rng: Range, sel: Range | None) -> lsp.DocumentSymbol:
    return lsp.DocumentSymbol(
        name=name, kind=kind, range=to_lsp_range(rng), selection_range=to_lsp_range(sel or rng)
    )


# -- handlers ---------------------------------------------------------------------------------


async def on_hover(ls: KlsServer, params: lsp.HoverParams) -> lsp.Hover | None:
    uri = params.text_document.uri
    if python_documents.handles(ls, uri):  # templates in a Python file's string constants
        return await python_documents.hover(ls, params, hover)
    if triton.is_triton(ls, uri):  # a `.py.jinja`: Inductor's helpers, the torch render
        return await triton.hover(ls, uri, params.position)
    model = await ls.model(uri)
    result = await ls.active_render(uri)
    return hover(model, from_lsp_position(params.position), result, ls.path(uri))


async def on_completion(ls: KlsServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    uri = params.text_document.uri
    if python_documents.handles(ls, uri):
        return await python_documents.completion(ls, params, completions)
    if config_documents.handles(ls, uri):
        return await config_documents.completion(ls, params)
    if triton.is_triton(ls, uri):
        return await triton.completion(ls, params)
    if params.context is not None and params.context.trigger_character == '"':
        return lsp.CompletionList(is_incomplete=False, items=[])  # a Triton buffer's quote
    text = ls.text(uri)
    model = await ls.model(uri)
    lines = text.split("\n")
    line = lines[params.position.line] if params.position.line < len(lines) else ""
    items = completions(
        model, line, from_lsp_position(params.position), ls.active_instance(ls.path(uri))
    )
    return lsp.CompletionList(is_incomplete=False, items=items)


async def on_definition(ls: KlsServer, params: lsp.DefinitionParams) -> lsp.Location | None:
    uri = params.text_document.uri
    if python_documents.handles(ls, uri):
        return await python_documents.definition(ls, params, definition)
    if triton.is_triton(ls, uri):  # a buffer name -> its tensor in kls.toml
        return await triton.definition(ls, uri, params.position)
    model = await ls.model(uri)
    path = ls.path(uri)
    found = definition(model, from_lsp_position(params.position), path, ls.active_instance(path))
    # a sub-template may be a Python file's constant: its place in that file
    return python_documents.location_to_file(ls, found) if found is not None else None


async def on_symbols(ls: KlsServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
    if params.text_document.uri not in ls.docs:
        return []
    if python_documents.handles(ls, params.text_document.uri):
        return await python_documents.symbols(ls, params, symbols)
    return symbols(await ls.model(params.text_document.uri))


def register(ls: KlsServer) -> None:
    ls.feature(lsp.TEXT_DOCUMENT_HOVER)(on_hover)
    ls.feature(
        lsp.TEXT_DOCUMENT_COMPLETION,
        lsp.CompletionOptions(trigger_characters=[".", "(", ",", '"']),
    )(on_completion)
    ls.feature(lsp.TEXT_DOCUMENT_DEFINITION)(on_definition)
    ls.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)(on_symbols)
