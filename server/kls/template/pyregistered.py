"""Templates a Python file registers by name: `TritonTemplate(name="mm_plus_mm", source=...)`.

Inductor writes some of its Triton templates as the `source` argument of the call that
registers them, not as a constant of their own (`kernel/conv.py`, `kernel/mm_plus_mm.py`,
`fx_passes/b2b_gemm.py`). kls names such a template by its registered name
(`conv.py::convolution2d`); this module finds those calls with `ast` and hands back each one's
source expression, which kls.template.pysource reads like a constant (literals, and `+` of
literals and the file's own string constants). Nothing is imported or run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# The classes whose `name=`/`source=` keywords register a template (Inductor's Triton one).
REGISTERING_CALLS = frozenset({"TritonTemplate"})


@dataclass(frozen=True)
class Registered:
    """One registering call: the template's name, its source expression and the 0-based line
    of the `name=` value."""

    name: str
    source: ast.expr
    line: int


def _called(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def registered_templates(tree: ast.Module) -> list[Registered]:
    """The registering calls of the module's top-level statements, in file order (calls
    inside functions are skipped: their sources may read names that exist only at run time)."""
    found: list[Registered] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call) or _called(node) not in REGISTERING_CALLS:
                continue
            name = _keyword(node, "name")
            source = _keyword(node, "source")
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and name.value.isidentifier()
                and source is not None
            ):
                found.append(Registered(name.value, source, name.lineno - 1))
    return found
