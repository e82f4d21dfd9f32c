"""KT501: parse the rendered CUDA with tree-sitter-cuda and map errors back to template lines."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from kls.checks.rendered import Models, finding_at_origin
from kls.findings import Finding
from kls.render import RenderResult

MAX_SYNTAX_FINDINGS = 5
# Attribute-like macros tree-sitter cannot expand; blanked to spaces so columns stay put.
ATTRIBUTE_MACROS = re.compile(
    r"(?<!#define )\b(PT_EXPORT|CUTLASS_HOST_DEVICE|CUTLASS_DEVICE|CUTLASS_GLOBAL)\b"
)


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_cuda

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


def syntax_findings(result: RenderResult, models: Models) -> list[Finding]:
    if not result.ok or result.text is None:
        return []
    blanked = ATTRIBUTE_MACROS.sub(lambda m: " " * len(m.group(0)), result.text)
    tree = _parser().parse(blanked.encode("utf-8"))
    if not tree.root_node.has_error:
        return []
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    lines = result.text.split("\n")
    for node in _errors(tree.root_node):
        row = node.start_point[0]
        origin = result.source_map.origin(row) if result.source_map else None
        key = (origin.path, origin.line) if origin else ("", row)
        if key in seen:
            continue
        seen.add(key)
        snippet = lines[row].strip() if row < len(lines) else ""
        what = f"missing '{node.type}'" if node.is_missing else "unexpected text"
        message = f"rendered CUDA does not parse ({what}) in: {snippet[:120]}"
        out.append(finding_at_origin(origin, models, result, "KT501", message))
        if len(out) >= MAX_SYNTAX_FINDINGS:
            break
    return out


def _errors(node: Any) -> Iterator[Any]:
    if node.is_error or node.is_missing:
        yield node
        return
    if not node.has_error:
        return
    for child in node.children:
        yield from _errors(child)
