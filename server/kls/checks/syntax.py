"""KT501: parse the rendered CUDA with tree-sitter-cuda and map errors back to template lines."""

from __future__ import annotations

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
        nodes = error_nodes(result.text)
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
