"""Static checks of a Triton template against one instance: no torch, no render.

What Inductor would raise at render time (a bare `KeyError`, an assertion with no message), or
never raise and leave for Triton or the GPU to find (a wrong unpack count, a config value that
prints as bad Python, an index that wraps at 2**31), read from the template's helper calls
(kls.template.model) and the instance's tensors and config. The codes are KT80x (the template
API); a problem the render also reports keeps the render's code, so the two merge.
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes

from kls.checks.catalogue import rule
from kls.findings import Finding
from kls.instances.locate import instance_key_range
from kls.instances.schema import InstanceSpec, TensorSpec
from kls.positions import Position, Range
from kls.profiles import profile
from kls.profiles.triton import HELPERS
from kls.profiles.triton.flex_render import static_view
from kls.profiles.triton.tensors import output_name
from kls.suggest import did_you_mean
from kls.template.model import Argument, HelperCall, TemplateModel

INT32_MAX = 2**31 - 1
BUFFER_HELPERS = ("size", "stride", "load_input", "make_load")
# Names every Triton template may read besides its config: the helpers and Jinja's globals.
KNOWN_NAMES = HELPERS | frozenset(jinja2.Environment().globals)
# A static finding and the render's finding of the same problem, under another code: the
# static one (with the exact token) replaces the render's on that line.
RENDER_TWINS = {"KT808": "KT102", "KT806": "KT103"}
# Frames a helper call sits in: ("if", id, branch) or (tag, id, 0) for loops, macros, ...
Frame = tuple[str, int, int]
_OPENERS = frozenset({"if", "for", "macro", "call", "filter", "block", "with"})
_UNPACK = re.compile(r"^\s*(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*,?\s*=\s*$")
_PROGRAM_ID = re.compile(r"tl\.program_id\([^()]*\)(?!\s*\.to\()")


def _finding(code: str, rng: Range, message: str, path: str, instance: str) -> Finding:
    return Finding(code, rule(code).severity, rng, message, path=path, instance=instance)


@dataclass(frozen=True)
class _Kernel:
    """What the instance gives the template: def_kernel's names bound to tensors, the output."""

    inputs: list[tuple[str, TensorSpec]]
    output: TensorSpec | None
    buffers: dict[str, TensorSpec]  # def_kernel name -> tensor (names of matching calls only)
    declared: set[str]  # every name any def_kernel call lists


def instance_findings(
    model: TemplateModel, path: str, instances: Sequence[InstanceSpec]
) -> list[Finding]:
    """The per-instance static findings of every instance of a python-language profile
    that reads the template at `path` (none when the template does not parse)."""
    if model.syntax_error is not None:
        return []
    out: list[Finding] = []
    for instance in instances:
        try:
            language = profile(instance.profile).language
        except KeyError:
            continue
        if language == "python":
            out.extend(triton_findings(model, path, instance))
    return out


def triton_findings(model: TemplateModel, path: str, instance: InstanceSpec) -> list[Finding]:
    """Every KT80x/KT81x finding of `instance` on the template `model` (at `path`)."""
    instance = static_view(instance)  # a flex instance: the buffers Inductor's lowering makes
    calls = model.bare_calls(HELPERS)
    kernel = _bind(calls, instance)
    frames = _frames(model)
    out: list[Finding] = []
    arity = list(_def_kernel_arity(calls, kernel, path, instance.name))
    out += arity
    out += _twice(model, calls, frames, path, instance.name)
    if not arity:  # with the names wrong, every use of a buffer would be reported too
        out += _buffer_uses(model, calls, kernel, path, instance.name)
    out += _missing_config(model, instance, path)
    out += _config_values(instance)
    out += _indents(model, calls, path, instance.name)
    out += _int32(model, kernel, path, instance.name)
    return out


# -- the instance's tensors as the template names them -------------------------------------


def _literal(arg: Argument | None) -> Any:
    if arg is None:
        return None
    try:
        return arg.literal()
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _def_names(call: HelperCall) -> list[str] | None:
    """def_kernel's names when every argument is a string literal, else None."""
    names = [_literal(a) for a in call.args]
    if any(a.keyword is not None for a in call.args) or not all(isinstance(n, str) for n in names):
        return None
    return names


def bound_buffers(model: TemplateModel, instance: InstanceSpec) -> dict[str, TensorSpec]:
    """The tensors the template's buffer names stand for with `instance`: def_kernel's names
    bound in order to its inputs (a flex instance: to the buffers Inductor's lowering makes
    too), and the output as "None" (Inductor's helpers name it so). The editor's hover,
    completion and go-to-definition read these, the checks the same binding."""
    kernel = _bind(model.bare_calls(HELPERS), static_view(instance))
    found = dict(kernel.buffers)
    if kernel.output is not None:
        found.setdefault("None", kernel.output)
    return found


def _bind(calls: list[HelperCall], instance: InstanceSpec) -> _Kernel:
    out = output_name(instance)
    inputs = [(n, s) for n, s in instance.tensors.items() if n != out and s is not None]
    output = instance.tensors.get(out) if out is not None else None
    declared: set[str] = set()
    bound: dict[str, TensorSpec | None] = {}
    for call in calls:
        names = _def_names(call) if call.helper == "def_kernel" else None
        if names is None:
            continue
        declared.update(names)
        if len(names) != len(inputs):
            continue
        for name, (_, spec) in zip(names, inputs):
            # Branches that bind one name to different tensors: its rank is not known.
            bound[name] = spec if bound.get(name, spec) is spec else None
    buffers = {n: s for n, s in bound.items() if s is not None}
    return _Kernel(inputs, output, buffers, declared)


def _def_kernel_arity(
    calls: list[HelperCall], kernel: _Kernel, path: str, instance: str
) -> Iterator[Finding]:
    """KT803: no def_kernel call names as many inputs as the instance has (a template with
    def_kernel in several branches fits an instance when one of them does)."""
    defs = [(c, n) for c in calls if c.helper == "def_kernel" if (n := _def_names(c)) is not None]
    if not defs or any(len(n) == len(kernel.inputs) for _, n in defs):
        return
    given = ", ".join(n for n, _ in kernel.inputs) or "none"
    for call, names in defs:
        yield _finding(
            "KT803",
            call.range,
            f"def_kernel names {len(names)} input(s) ({', '.join(names)}) but instance "
            f"'{instance}' passes {len(kernel.inputs)} ({given}; the output is not one of "
            "them); Inductor asserts with only the counts as its message",
            path,
            instance,
        )


# -- render paths ---------------------------------------------------------------------------


def _frames(model: TemplateModel) -> list[tuple[Position, tuple[Frame, ...]]]:
    """After each block statement, the frames open from there on (in text order)."""
    stack: list[Frame] = []
    out: list[tuple[Position, tuple[Frame, ...]]] = [(Position(0, 0), ())]
    for n, stmt in enumerate(model.statements):
        tag = stmt.tag
        if tag in _OPENERS or (
            tag == "set" and stmt.target is not None and not _inline(model, stmt)
        ):
            stack.append(("if" if tag == "if" else tag, n, 0))
        elif tag in ("elif", "else") and stack:
            kind, ident, branch = stack[-1]
            stack[-1] = (kind, ident, branch + 1)
        elif tag.startswith("end") and stack:
            stack.pop()
        out.append((stmt.range.end, tuple(stack)))
    return out


def _inline(model: TemplateModel, stmt: Any) -> bool:
    start, end = model.index.offset(stmt.range.start), model.index.offset(stmt.range.end)
    return "=" in model.source[start:end]


def _path_at(frames: list[tuple[Position, tuple[Frame, ...]]], pos: Position) -> tuple[Frame, ...]:
    found: tuple[Frame, ...] = ()
    for at, stack in frames:
        if at > pos:
            break
        found = stack
    return found


def _both_run(a: tuple[Frame, ...], b: tuple[Frame, ...]) -> bool:
    """Whether two calls surely run in one render: neither sits in a loop, macro or other
    block whose count kls cannot tell, they are not in two branches of one `{% if %}`, and
    one of them runs whenever the other's enclosing branches do (two calls each under its own
    `{% if %}` may be exclusive by their conditions: kls does not guess)."""
    if any(f[0] != "if" for f in a + b):
        return False
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common < min(len(a), len(b)) and a[common][1] == b[common][1]:
        return False  # two branches of one if
    return len(a) == common or len(b) == common


def _twice(
    model: TemplateModel,
    calls: list[HelperCall],
    frames: list[tuple[Position, tuple[Frame, ...]]],
    path: str,
    instance: str,
) -> Iterator[Finding]:
    """KT805: a second def_kernel, or a second load_input of one input, on one render path."""
    groups: dict[str, list[HelperCall]] = {}
    for call in calls:
        if call.helper == "def_kernel":
            groups.setdefault("def_kernel", []).append(call)
        elif call.helper == "load_input":
            name = _literal(call.arg(0, "input_name"))
            if isinstance(name, str):
                groups.setdefault(f"load_input:{name}", []).append(call)
    for key, group in groups.items():
        for i, later in enumerate(group[1:], 1):
            later_path = _path_at(frames, later.range.start)
            first = next(
                (c for c in group[:i] if _both_run(_path_at(frames, c.range.start), later_path)),
                None,
            )
            if first is None:
                continue
            line = first.range.start.line + 1
            if key == "def_kernel":
                message = (
                    f"def_kernel is called a second time on this render path (first at line "
                    f"{line}); Inductor registers its header hook once and raises: keep one "
                    "call, or put the calls in exclusive {% if %} branches"
                )
            else:
                message = (
                    f"load_input('{key.split(':', 1)[1]}') is called a second time on this "
                    f"render path (first at line {line}); Inductor asserts with no message: "
                    "load each input once and reuse the loaded value"
                )
            yield _finding("KT805", later.range, message, path, instance)


# -- buffers, ranks and unpacking ------------------------------------------------------------


def _buffer_uses(
    model: TemplateModel, calls: list[HelperCall], kernel: _Kernel, path: str, instance: str
) -> Iterator[Finding]:
    """KT802 (a buffer def_kernel does not name), KT806 (an index out of the tensor's rank),
    KT807 (all strides unpacked into the wrong number of names)."""
    for call in calls:
        if call.helper not in BUFFER_HELPERS:
            continue
        first = call.arg(0, "input_name" if call.helper == "load_input" else "name")
        name = _literal(first)
        if first is None or name is _NOT_LITERAL:
            continue
        if name is None:
            spec = kernel.output if call.helper in ("size", "stride") else None
        elif not isinstance(name, str):
            continue
        elif kernel.declared and name not in kernel.declared:
            known = sorted(kernel.declared)
            yield _finding(
                "KT802",
                first.value_range,
                f"{call.helper}('{name}'): no buffer '{name}' in this kernel; def_kernel names "
                f"{', '.join(known)} (size(None, i) and stride(None) read the output)"
                f"{did_you_mean(name, known)}; Inductor raises a bare KeyError",
                path,
                instance,
            )
            continue
        else:
            spec = kernel.buffers.get(name)
        if spec is None:
            continue
        label = "the output" if name is None else f"'{name}'"
        if call.helper in ("size", "stride"):
            index_arg = call.arg(1, "index")
            index = _literal(index_arg)
            if index_arg is not None and isinstance(index, int) and not isinstance(index, bool):
                if not -spec.rank <= index < spec.rank:
                    yield _finding(
                        "KT806",
                        index_arg.value_range,
                        f"{call.helper}({'None' if name is None else repr(name)}, {index}): "
                        f"{label} has rank {spec.rank} ({spec.describe()}); the index must lie "
                        f"in {-spec.rank}..{spec.rank - 1} (Inductor raises IndexError)",
                        path,
                        instance,
                    )
            elif call.helper == "stride" and index_arg is None:
                yield from _unpack(model, call, spec, label, path, instance)


def _unpack(
    model: TemplateModel,
    call: HelperCall,
    spec: TensorSpec,
    label: str,
    path: str,
    instance: str,
) -> Iterator[Finding]:
    """`a, b = {{stride("A")}}`: the names must be as many as the tensor's dimensions."""
    expr = next((e for e in model.expressions if e.range.contains(call.range.start)), None)
    if expr is None or expr.range.start.line != expr.range.end.line:
        return
    text = model.index.line_text(expr.range.start.line)
    before, after = text[: expr.range.start.column], text[expr.range.end.column :]
    match = _UNPACK.match(before)
    if match is None or after.split("#", 1)[0].strip():
        return
    names = [n.strip() for n in match.group("names").split(",")]
    if len(names) == spec.rank:
        return
    start = Position(expr.range.start.line, match.start("names"))
    end = Position(expr.range.start.line, match.end("names"))
    yield _finding(
        "KT807",
        Range(start, end),
        f"{len(names)} name(s) unpack the strides of {label}, "
        f"which renders {spec.rank} strides ({', '.join(str(s) for s in spec.stride)}); "
        f"Inductor does not check: the module fails later with 'too many/not enough values "
        f"to unpack' or reads the wrong stride. Write {spec.rank} names",
        path,
        instance,
    )


# -- the config --------------------------------------------------------------------------------


def _missing_config(model: TemplateModel, instance: InstanceSpec, path: str) -> Iterator[Finding]:
    """KT808: a Jinja name the template reads that the instance's vars do not give."""
    given = set(instance.variables)
    for name in sorted(_free_variables(model) - KNOWN_NAMES - given):
        uses = model.name_uses.get(name)
        if not uses:
            continue
        hint = did_you_mean(name, sorted(given))
        yield _finding(
            "KT808",
            uses[0],
            f"'{name}' is read by the template but instance '{instance.name}' gives no such "
            f"config value{hint}; add it to [instances.{instance.name}.vars] (Inductor raises "
            f"UndefinedError when this line renders)",
            path,
            instance.name,
        )


def _free_variables(model: TemplateModel) -> frozenset[str]:
    """The names the template reads but never sets, as Inductor's environment (with its
    indent_except_first filter) compiles it; none when it does not compile."""
    if model.ast is None:
        return frozenset()
    known = _FREE.get(model.ast)  # by AST: an edit of template data only reuses it
    if known is not None:
        return known
    codegen = jinja2.meta.TrackingCodeGenerator(_ENV)  # type: ignore[no-untyped-call]
    try:
        codegen.visit(model.ast)
        found = frozenset(codegen.undeclared_identifiers)
    except jinja2.TemplateError:
        found = frozenset()
    _FREE[model.ast] = found
    return found


_FREE: weakref.WeakKeyDictionary[jinja2.nodes.Template, frozenset[str]] = (
    weakref.WeakKeyDictionary()
)


def _indent_except_first(text: str, n: int) -> str:
    """Inductor's filter, for compiling only (never called here)."""
    return text


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)
_ENV.filters["indent_except_first"] = _indent_except_first


def _config_values(instance: InstanceSpec) -> Iterator[Finding]:
    """KT809: a config value Inductor prints as `NAME : tl.constexpr = <str(value)>` that is
    not a Python expression, or is a bare word the kernel does not define."""
    text: str | None = None
    for name, value in instance.variables.items():
        problem = _value_problem(value)
        if problem is None:
            continue
        text = _read(instance.config_path) if text is None else text
        path = instance.config_path
        start = instance_key_range(path, text, instance.name, "vars", name).start
        rng = Range(start, Position(start.line, start.column + len(name)))
        yield _finding(
            "KT809",
            rng,
            f"config value {name} = {value!r} is printed into the kernel as "
            f"`{name} : tl.constexpr = {value}`, {problem}",
            str(instance.config_path),
            instance.name,
        )


def _value_problem(value: Any) -> str | None:
    text = str(value)
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "which is not valid Python; a string meant as a string must carry its own quotes "
    if isinstance(tree.body, ast.Name):
        return (
            f"where `{text}` is a name the module does not define; for the string write "
            f"\"'{text}'\" (quotes inside the TOML string), for a dtype tl.{text}"
        )
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


# -- indentation ------------------------------------------------------------------------------


def _indents(
    model: TemplateModel, calls: list[HelperCall], path: str, instance: str
) -> Iterator[Finding]:
    """KT810: `indent_width=` (load_input, store_output) other than the column of the `{{`
    it sits in, and `indent_except_first(n)` other than that column / 4."""
    for call in calls:
        if call.helper not in ("load_input", "store_output"):
            continue
        arg = call.keyword("indent_width")
        expr = next((e for e in model.expressions if e.range.contains(call.range.start)), None)
        column = _own_line_column(model, expr.range.start) if expr else None
        width = _literal(arg) if arg is not None else 4
        if column is None or not isinstance(width, int) or width == column:
            continue
        where = arg.value_range if arg is not None else call.name_range
        said = f"indent_width={width}" if arg is not None else "the default indent_width=4"
        yield _finding(
            "KT810",
            where,
            f"{call.helper} has {said} but its {{{{ sits at column {column}: the lines it "
            f"renders start {width} spaces in, not {column}, and the Python block breaks or "
            f"shifts; write indent_width={column}",
            path,
            instance,
        )
    toks = model.tokens
    for i, tok in enumerate(toks):
        if tok.type != "name" or tok.value != "indent_except_first" or i == 0:
            continue
        if not toks[i - 1].is_op("|") or i + 3 >= len(toks) or not toks[i + 1].is_op("("):
            continue
        number = toks[i + 2]
        if number.type != "integer" or not toks[i + 3].is_op(")"):
            continue
        begin = next(
            (e for e in model.expressions if e.range.contains(model.index.position(tok.start))),
            None,
        )
        column = _own_line_column(model, begin.range.start) if begin else None
        n = int(number.value)
        if column is None or column % 4 or n * 4 == column:
            continue
        yield _finding(
            "KT810",
            model.index.range(number.start, number.end),
            f"indent_except_first({n}) indents the lines after the first by {n * 4} spaces, "
            f"but the {{{{ sits at column {column}: write indent_except_first({column // 4})",
            path,
            instance,
        )


def _own_line_column(model: TemplateModel, start: Position) -> int | None:
    """The column of `{{` when only spaces precede it on its line, else None."""
    before = model.index.line_text(start.line)[: start.column]
    return start.column if before.strip(" ") == "" else None


# -- int32 indices ------------------------------------------------------------------------------


def _extent(spec: TensorSpec) -> int:
    """The elements the tensor's storage spans: its largest offset + 1."""
    if any(s == 0 for s in spec.shape):
        return 0
    return spec.offset + sum((n - 1) * st for n, st in zip(spec.shape, spec.stride)) + 1


def _int32(model: TemplateModel, kernel: _Kernel, path: str, instance: str) -> Iterator[Finding]:
    """KT811: a tensor spanning more than 2**31-1 elements, with template arithmetic that
    stays int32: Inductor picks `INDEX_DTYPE = tl.int64` from the explicit inputs and the
    output, but `tl.program_id(...)` not cast with `.to(INDEX_DTYPE)` is int32 and wraps."""
    tensors = [*kernel.inputs, *([("the output", kernel.output)] if kernel.output else [])]
    big = [(n, s, e) for n, s in tensors if (e := _extent(s)) > INT32_MAX]
    if not big:
        return
    said = ", ".join(f"{n} ({e:,} elements)" for n, _, e in big)
    for tok in model.tokens:
        if tok.type != "data":
            continue
        for match in _PROGRAM_ID.finditer(tok.value):
            start = tok.start + match.start()
            yield _finding(
                "KT811",
                model.index.range(start, tok.start + match.end()),
                f"{said} spans more than 2**31-1 elements: Inductor renders INDEX_DTYPE as "
                "tl.int64 for this kernel (it counts only the explicit inputs and the output; "
                "a tensor a score_mod captures is not counted), but this tl.program_id is int32 "
                "and offsets computed from it wrap; write .to(INDEX_DTYPE)",
                path,
                instance,
            )
