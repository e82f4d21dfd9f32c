"""Checks of a rendered Triton module (Python), mapped back to the template line: it parses
(KT851), and every name a `@triton.jit` function reads is given by the function (an argument,
an assignment, a loop or `with` target, an import), by the module (an import, a definition, an
assignment) or by Python's builtins (KT852): Triton's compile would otherwise fail on it, and
only on save.

The module is parsed with `ast` only: it is never imported or run here (Triton's compile is
the compile stage's, on save, in trusted workspaces).
"""

from __future__ import annotations

import ast
import builtins

from kls.checks.catalogue import rule
from kls.checks.rendered import Models, line_range
from kls.findings import Finding
from kls.render import RenderResult


def module_findings(result: RenderResult, models: Models) -> list[Finding]:
    if not result.ok or result.text is None:
        return []
    try:
        tree = ast.parse(result.text)
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
    return unresolved_findings(result, tree, models)


def unresolved_findings(result: RenderResult, tree: ast.Module, models: Models) -> list[Finding]:
    """KT852 for each name a jit function reads that nothing gives, once per name and line."""
    lines = (result.text or "").split("\n")
    found: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    known = module_names(tree) | set(dir(builtins))
    for function in jit_functions(tree):
        given = known | local_names(function)
        for node in ast.walk(function):
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
                continue
            if node.id in given or (node.id, node.lineno) in seen:
                continue
            seen.add((node.id, node.lineno))
            rendered_line = node.lineno - 1
            origin = result.source_map.origin(rendered_line) if result.source_map else None
            path = origin.path if origin else str(result.instance.template)
            line = origin.line if origin else 0
            shown = lines[rendered_line].strip() if rendered_line < len(lines) else ""
            found.append(
                Finding(
                    "KT852",
                    rule("KT852").severity,
                    line_range(models.get(path), line),
                    f"'{node.id}' is not defined in the rendered kernel {function.name}() "
                    f"(rendered line {rendered_line + 1}: {shown[:80]!r}): no argument, "
                    "assignment, import or builtin gives it; this template line produced it",
                    path=path,
                    instance=result.instance.name,
                )
            )
    return found


def jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's functions decorated with `triton.jit` (or a bare `jit`)."""

    def is_jit(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
            isinstance(target, ast.Name) and target.id == "jit"
        )

    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(is_jit(d) for d in node.decorator_list)
    ]


def module_names(tree: ast.Module) -> set[str]:
    """What the module's top level binds: imports, definitions, assignments."""
    names: set[str] = set()
    for node in tree.body:
        names |= bound_names(node, top_level=True)
    return names


def local_names(function: ast.FunctionDef) -> set[str]:
    """What the function binds anywhere in it (Python's scoping: a name assigned later in the
    function is still the function's), its arguments and those of nested functions."""
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.arguments):
            for arg in [*node.posonlyargs, *node.args, *node.kwonlyargs]:
                names.add(arg.arg)
            for extra in (node.vararg, node.kwarg):
                if extra is not None:
                    names.add(extra.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        else:
            names |= bound_names(node, top_level=False)
    return names


def bound_names(node: ast.AST, top_level: bool) -> set[str]:
    """Names one statement binds other than through a stored ast.Name: imports, definitions,
    exception handlers, `global`/`nonlocal` (and, at the top level, assignment targets)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.ExceptHandler) and node.name:
        return {node.name}
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return set(node.names)
    if top_level:
        return {
            n.id
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
        }
    return set()
