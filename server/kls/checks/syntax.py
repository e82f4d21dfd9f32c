"""KT501: parse the rendered CUDA with tree-sitter-cuda and map errors back to template lines.

The parse itself runs in a render worker (kls.sandbox), never here: tree-sitter is slower
than linear on some texts and can take gigabytes doing it. A parse that a limit stopped is one
KT501 warning that says so.
"""

from __future__ import annotations

import sys

from kls.checks.rendered import Models, finding_at_origin
from kls.cuda_syntax import PARSE_SECONDS, ParseOutcome
from kls.findings import Finding, Severity
from kls.render import RenderResult
from kls.sandbox.workers import parse_isolated

MAX_SYNTAX_FINDINGS = 5


def syntax_findings(result: RenderResult, models: Models) -> list[Finding]:
    if not result.ok or result.text is None:
        return []
    outcome = result.syntax
    if outcome is None:  # rendered elsewhere than in a worker: a worker parses it now
        outcome = result.syntax = parse_isolated(result.text)
    if outcome.unavailable is not None:
        _say_parser_missing(outcome.unavailable)
        return []
    if outcome.stopped is not None:
        return [stopped_finding(result, models, outcome)]
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    lines = result.text.split("\n")
    for row, kind, missing in outcome.errors:
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


def stopped_finding(result: RenderResult, models: Models, outcome: ParseOutcome) -> Finding:
    """One warning at the top of the template: the syntax check did not run to its end."""
    size = len((result.text or "").encode("utf-8", "replace"))
    message = (
        f"the rendered CUDA ({size / 1024:,.0f} KB) was not syntax-checked: {outcome.stopped} "
        f"(it gets {PARSE_SECONDS:g} s and the render's memory, and is slower than linear on "
        "some texts); check the loops that produce this much or this repetitive text, and "
        "compile it (kls compile, nvcc) for a real verdict"
    )
    return finding_at_origin(None, models, result, "KT501", message, Severity.WARNING)


_SAID: list[str] = []


def _say_parser_missing(reason: str) -> None:
    """tree-sitter-cuda is a dependency of kls; a broken install turns KT501 off, once said."""
    if not _SAID:
        _SAID.append(reason)
        print(
            f"kls: the rendered-CUDA syntax check (KT501) is off: tree-sitter-cuda cannot be "
            f"loaded ({reason}); reinstall kls (pip install --force-reinstall kls)",
            file=sys.stderr,
        )
