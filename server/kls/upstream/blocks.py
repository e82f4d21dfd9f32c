"""Upstream text a profile reproduces, read from the torch source with `ast` (never imported
or run), and remembered by (path, mtime, size).

A profile that must emit what Inductor emits (the header includes, the PT_EXPORT globals, the
CUTLASS instance skeleton) names where that text lives: a method whose `.splice(...)` calls
carry it, a string assigned to an attribute in a class, or a module-level constant. The text
then follows the torch the user runs, and this repository stores none of it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from kls.upstream.source import MAX_MEMBER_BYTES


class UpstreamTextError(Exception):
    """The text is not where the profile expects it (another torch version, a local edit)."""


def method_splices(file: Path, cls: str, method: str) -> tuple[str, ...]:
    """The string literals passed to `.splice(...)` in `cls.method`, in source order."""
    found = _read(file).splices.get((cls, method))
    if found is None:
        raise UpstreamTextError(f'{file}: no method {cls}.{method} with .splice("...") calls')
    return found


def attribute_string(file: Path, cls: str, attribute: str) -> str:
    """The string literal assigned to `self.<attribute>` inside class `cls` (at any depth)."""
    found = _read(file).attributes.get((cls, attribute))
    if found is None:
        raise UpstreamTextError(f"{file}: class {cls} assigns no string to self.{attribute}")
    return found


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.splices: dict[tuple[str, str], tuple[str, ...]] = {}
        self.attributes: dict[tuple[str, str], str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self._read_class(node)

    def _read_class(self, cls: ast.ClassDef) -> None:
        for item in cls.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            texts = tuple(_splice_texts(item))
            if texts:
                self.splices[(cls.name, item.name)] = texts
            for node in ast.walk(item):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                        and isinstance(node.value, ast.Constant)
                        and isinstance(node.value.value, str)
                    ):
                        self.attributes.setdefault((cls.name, target.attr), node.value.value)


def _splice_texts(fn: ast.AST) -> list[str]:
    calls = [
        node
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "splice"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return [str(c.args[0].value) for c in calls if isinstance(c.args[0], ast.Constant)]


def _read(file: Path) -> _Module:
    try:
        st = file.stat()
    except OSError as exc:
        raise UpstreamTextError(f"cannot read {file}: {exc}") from exc
    return _parsed(str(file), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int) -> _Module:
    if size > MAX_MEMBER_BYTES:
        raise UpstreamTextError(f"{path} is larger than kls reads ({size} bytes)")
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_MEMBER_BYTES + 1).decode("utf-8")
        return _Module(ast.parse(text))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise UpstreamTextError(f"cannot read {path}: {exc}") from exc
