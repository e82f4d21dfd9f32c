"""Pipeline values to LSP values."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp

from kls.findings import Finding, Severity
from kls.positions import Position, Range

SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
    Severity.HINT: lsp.DiagnosticSeverity.Hint,
}


def to_lsp_range(r: Range) -> lsp.Range:
    return lsp.Range(
        start=lsp.Position(line=r.start.line, character=r.start.column),
        end=lsp.Position(line=r.end.line, character=r.end.column),
    )


def from_lsp_position(p: lsp.Position) -> Position:
    return Position(p.line, p.character)


def end_of_line_hint(line: int, line_text: str, label: str) -> lsp.InlayHint:
    """An inlay hint after the last character of a line (the Benchmark and Tune results)."""
    return lsp.InlayHint(
        position=lsp.Position(line=line, character=len(line_text)),
        label=f" {label}",
        padding_left=True,
    )


def to_diagnostic(f: Finding) -> lsp.Diagnostic:
    message = f.message if not f.instance else f"{f.message} [instance {f.instance}]"
    return lsp.Diagnostic(
        range=to_lsp_range(f.range),
        message=message,
        severity=SEVERITY[f.severity],
        code=f.code,
        source=f.source,
        related_information=[
            lsp.DiagnosticRelatedInformation(
                location=lsp.Location(uri=Path(r.path).as_uri(), range=to_lsp_range(r.range)),
                message=r.message,
            )
            for r in f.related
        ]
        or None,
    )
