"""KT501: parse the rendered CUDA with tree-sitter-cuda and map errors back to template lines."""

from __future__ import annotations

import sys

from kls.checks.rendered import Models, finding_at_origin
from kls.cuda_syntax import error_nodes
from kls.findings import Finding
from kls.render import RenderResult

MAX_SYNTAX_FINDINGS = 5


def syntax_findings(result: RenderResult, models: Models) -> list[Finding]:
    if not result.ok or result.text is None:
        return []
    # The render worker parsed it already (kls.sandbox.child), unless the text was large.
    nodes = result.syntax_errors
    if nodes is None:
        try:
            nodes = error_nodes(result.text)
        except (ImportError, OSError) as exc:
            _say_parser_missing(exc)
            return []
    if not nodes:
        return []
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    lines = result.text.split("\n")
    for row, kind, missing in nodes:
        origin = result.source_map.origin(row) if result.source_map else None
        key = (origin.path, origin.line) if origin else ("", row)
        if key in seen:
            continue
        seen.add(key)
        snippet = lines[row].strip() if row < len(lines) else ""
        what = f"missing '{kind}'" if missing else "unexpected text"
        message = f"rendered CUDA does not parse ({what}) in: {snippet[:120]}"
        out.append(finding_at_origin(origin, models, result, "KT501", message))
        if len(out) >= MAX_SYNTAX_FINDINGS:
            break
    return out


_SAID: list[str] = []


def _say_parser_missing(exc: Exception) -> None:
    """tree-sitter-cuda is a dependency of kls; a broken install turns KT501 off, once said."""
    if not _SAID:
        _SAID.append(str(exc))
        print(
            f"kls: the rendered-CUDA syntax check (KT501) is off: tree-sitter-cuda cannot be "
            f"loaded ({exc}); reinstall kls (pip install --force-reinstall kls)",
            file=sys.stderr,
        )
