"""Checks of a rendered Triton module (Python): it parses, mapped back to the template line.

The module is parsed with `ast` only: it is never imported or run here (Triton's compile is
the compile stage's, on save, in trusted workspaces).
"""

from __future__ import annotations

import ast

from kls.checks.catalogue import rule
from kls.checks.rendered import Models, line_range
from kls.findings import Finding
from kls.render import RenderResult


def module_findings(result: RenderResult, models: Models) -> list[Finding]:
    if not result.ok or result.text is None:
        return []
    try:
        ast.parse(result.text)
    except SyntaxError as exc:
        rendered_line = (exc.lineno or 1) - 1
        origin = result.source_map.origin(rendered_line) if result.source_map else None
        path = origin.path if origin else str(result.instance.template)
        line = origin.line if origin else 0
        shown = (exc.text or "").strip()
        return [
            Finding(
                "KT851",
                rule("KT851").severity,
                line_range(models.get(path), line),
                f"the rendered module does not parse: {exc.msg} at rendered line "
                f"{rendered_line + 1} ({shown[:80]!r}); this template line produced it",
                path=path,
                instance=result.instance.name,
            )
        ]
    return []
