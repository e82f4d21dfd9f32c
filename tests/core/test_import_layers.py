"""The `kls` package's imports keep the pipeline's order: no module cycle, and no package
importing one of a later layer. Every import counts: module level, inside functions and under
`if TYPE_CHECKING:` (a cycle hidden there is still a cycle of design)."""

from __future__ import annotations

import ast
from pathlib import Path

import kls

PACKAGE = Path(kls.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The kls modules `path` imports (`from kls.a import b` counts kls.a.b if it is one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports(f, modules) for f in files}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_no_import_cycle_in_kls() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_detector_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_stage_imports_the_language_server() -> None:
    """The pipeline does not know about LSP (only the CLI starts the server)."""
    for module, targets in graph().items():
        if module.startswith("kls.lsp") or module == "kls.cli":
            continue
        assert not {t for t in targets if t.startswith("kls.lsp")}, module


# The layers, first to last: a module may import its own layer and earlier ones. A package
# (kls.render counts as one) or a module of the package root names its layer's members.
LAYERS: tuple[tuple[str, ...], ...] = (
    # small leaf modules
    (
        *("kls", "arch", "cache_dir", "cuda_syntax", "dtypes", "findings", "input_limits"),
        *("positions", "sourcemap", "suggest", "text_edit"),
    ),
    ("template",),
    ("upstream",),  # where Inductor's files are read; instances resolve torch: refs through it
    ("instances",),
    ("cutlass",),
    ("runtime",),
    ("profiles",),
    ("render",),
    ("sandbox",),
    ("checks",),
    ("compile",),
    ("bench",),
    ("tune",),
    ("lsp",),
    ("cli", "docs", "info", "scaffold"),  # the commands
)

# Imports that run up the layers on purpose, each with its reason.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("kls.instances.load", "kls.profiles"): (
        "note_version asks the registry for a profile's mirrored torch release, inside the "
        "function: the registry's packages build on instances"
    ),
    ("kls.instances.load", "kls.profiles.names"): (
        "registered_profiles asks the registry which profile names kls.toml may use, inside "
        "the function: the registry's packages build on instances"
    ),
}


def layer_of(module: str) -> int:
    """The index in LAYERS of `module`'s package (kls.a.b -> a; the root package -> kls)."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    for index, members in enumerate(LAYERS):
        if name in members:
            return index
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a later layer that EXCEPTIONS does not name, as 'a -> b'."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(edges.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module) and (module, target) not in EXCEPTIONS
    ]


def test_every_package_has_a_layer() -> None:
    for module in graph():
        layer_of(module)


def test_no_package_imports_a_later_layer() -> None:
    assert upward_imports(graph()) == []


def test_the_exceptions_are_still_there() -> None:
    """An exception that no import needs any more is taken out of the list."""
    edges = graph()
    assert [pair for pair in EXCEPTIONS if pair[1] not in edges.get(pair[0], set())] == []


def test_the_layer_check_finds_one() -> None:
    edges = {"kls.render": {"kls.sandbox.child"}, "kls.sandbox.child": {"kls.render"}}
    assert upward_imports(edges) == ["kls.render -> kls.sandbox.child"]
    assert upward_imports({"kls.instances.load": {"kls.profiles"}}) == []
