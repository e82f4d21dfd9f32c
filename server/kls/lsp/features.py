"""Hover, completion, definition, symbols and code lenses, computed from the template model
and the active instance's render record."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types as lsp

from kls.bench.report import BenchReport
from kls.checks.signatures import BUFFER_HELPERS, helper_sig, helpers_of
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.lsp.convert import to_lsp_range
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
    spec = result.instance.tensors.get(name)
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


def code_lenses(model: TemplateModel, uri: str, instance: str | None) -> list[lsp.CodeLens]:
    """Preview / Compile / Benchmark above each def_kernel. The Benchmark lens is resolved
    lazily (`codeLens/resolve`): its title reads the benchmark history."""
    lenses: list[lsp.CodeLens] = []
    for call in model.calls_to("kernel", "def_kernel"):
        rng = to_lsp_range(call.range)
        suffix = f" ({instance})" if instance else " (no instance)"
        for title, command in (("Preview" + suffix, "kls.preview"), ("Compile", "kls.compile")):
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
    lens.command = lsp.Command(title=title, command="kls.benchmark", arguments=[uri])
    return lens
