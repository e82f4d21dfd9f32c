"""Source maps: for every rendered line, the template file and line that produced it.

Jinja has no source maps, and kls must not change what a template renders (not even in a
filter, a `set` block or a macro's `caller()`), so the map is taken out of band: kls compiles
templates with `SourceMapCodeGenerator`, Jinja's code generator with one change. Every write
that goes straight to the output stream (a frame without a buffer) becomes
`yield environment.kls_out(WHERE, value)`, where WHERE is a constant `(path, line, kind)`: the
file, the 0-based template line where the written node starts, and whether the value is
template data (whose newlines are the template's own, so line k of it is template line
`line + k`) or the value of an expression or block (all of whose lines map to `line`).
`kls_out` stores WHERE and returns the value unchanged; the consumer of the stream
(`render._Renderer.generate`) takes the stored WHERE with each chunk it receives. The template
never sees any of this: the text of every chunk, buffer and filter argument is exactly plain
Jinja's.

Writes into buffers (`{% set %}` blocks, `{% filter %}` bodies, macros, `caller()`) carry no
position; their text reaches the output as the value of the statement or expression that emits
it (`{{ body }}`, `{{ m() }}`, `{% filter %}`, `{% call %}`), so those lines map to that
statement's line. Included templates write to the stream with their own path. Sub-templates
rendered by a runtime helper (`template.render_gemm_arguments`) return a string; when an
expression emits exactly that string, its lines map into the sub-template (`subs`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from io import StringIO
from types import CodeType
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Environment
from jinja2.lexer import TOKEN_DATA, TokenStream
from jinja2.parser import Parser
from jinja2.utils import concat
from markupsafe import Markup

from kls.text_edit import changed_middle

DATA, EXPR = 0, 1  # the kind of a write (see module docstring)
Where = tuple[str, int, int]  # (path, 0-based template line, kind)


@dataclass(frozen=True)
class Origin:
    path: str
    line: int  # 0-based


@dataclass
class SourceMap:
    origins: list[Origin | None]

    def origin(self, rendered_line: int) -> Origin | None:
        if 0 <= rendered_line < len(self.origins):
            return self.origins[rendered_line]
        return None

    def line_directives(self, text: str) -> str:
        """The text with `#line N "file"` before each jump, for nvcc's own messages."""
        out: list[str] = []
        expected: Origin | None = None
        for i, line in enumerate(text.split("\n")):
            origin = self.origin(i)
            if origin is not None and origin != expected and not _continues_directive(out):
                out.append(f'#line {origin.line + 1} "{origin.path}"')
            out.append(line)
            expected = Origin(origin.path, origin.line + 1) if origin else None
        return "\n".join(out)


def _continues_directive(out: list[str]) -> bool:
    """A `#line` after a backslash-continued line would break the macro it continues."""
    return bool(out) and out[-1].endswith("\\")


class OutputRecorder:
    """The instrumented code's `environment.kls_out`: holds the position of the chunk that is
    about to be yielded until the stream's consumer takes it."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: Where | None = None

    def out(self, where: Where, value: Any) -> Any:
        self.pending = where
        return value

    def take(self) -> Where | None:
        where, self.pending = self.pending, None
        return where


_BODY_STREAM = "yield from template._get_default_module()._body_stream"


class SourceMapCodeGenerator(CodeGenerator):
    """Jinja's code generator, with each direct output write wrapped in `kls_out` (see module
    docstring). The generated code computes the same values in the same order.

    With `kls_slots` (set by `compile_shape`), template data whose text is a slot placeholder
    is read from the module global `kls_data` instead of being written into the code, so one
    compiled code serves every text of the same shape (`template_shape`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kls_path = self.filename or self.name or "<template>"
        self._kls_wrapped: list[bool] = []
        self._kls_include: tuple[nodes.Include, Frame] | None = None
        self.kls_slots: dict[str, int] = {}

    def _output_const_repr(self, group: Any) -> str:
        group = list(group)
        slots = self.kls_slots
        if not slots or not any(isinstance(v, str) and v in slots for v in group):
            return super()._output_const_repr(group)
        # The same string as Jinja's joined constant, with each slot read from the table.
        parts: list[str] = []
        literal: list[Any] = []
        for value in group:
            slot = slots.get(value) if isinstance(value, str) else None
            if slot is None:
                literal.append(value)
                continue
            if literal:
                parts.append(repr(concat(literal)))
                literal = []
            parts.append(f"kls_data[{slot}]")
        if literal:
            parts.append(repr(concat(literal)))
        return parts[0] if len(parts) == 1 else "(" + " + ".join(parts) + ")"

    def visit_TemplateData(self, node: nodes.TemplateData, frame: Frame) -> None:
        slot = self.kls_slots.get(node.data)
        if slot is None:
            super().visit_TemplateData(node, frame)
            return
        ref = f"kls_data[{slot}]"
        try:
            const = node.as_const(frame.eval_ctx)
        except nodes.Impossible:
            self.write(f"(Markup if context.eval_ctx.autoescape else identity)({ref})")
        else:
            self.write(f"Markup({ref})" if isinstance(const, Markup) else ref)

    def _kls_where(self, node: nodes.Node, kind: int) -> str:
        # An expression starts at its first token, which may lie on an earlier line than the
        # node Jinja gives it (a filter's line is the `|`'s, a call's the `(`'s).
        line = node.lineno
        if kind == EXPR:
            line = min([line, *(n.lineno for n in node.find_all(nodes.Node) if n.lineno)])
        return repr((self._kls_path, line - 1, kind))

    def visit_Output(self, node: nodes.Output, frame: Frame) -> None:
        if frame.buffer is not None:
            super().visit_Output(node, frame)
            return
        # Jinja's visit_Output for a frame without a buffer, one write per child (Jinja joins
        # adjacent constants, which would lose where each starts).
        if frame.require_output_check:
            if self.has_known_extends:
                return
            self.writeline("if parent_template is None:")
            self.indent()
        finalize = self._make_finalize()
        for child in node.nodes:
            kind = DATA if isinstance(child, nodes.TemplateData) else EXPR
            where = self._kls_where(child, kind)
            try:
                if not (finalize.const or kind == DATA):
                    raise nodes.Impossible()
                const = self._output_child_to_const(child, frame, finalize)
            except (nodes.Impossible, Exception):
                self.writeline(f"yield environment.kls_out({where}, ", child)
                self._output_child_pre(child, frame, finalize)
                self.visit(child, frame)
                self._output_child_post(child, frame, finalize)
                self.write(")")
            else:
                val = self._output_const_repr([const])
                self.writeline(f"yield environment.kls_out({where}, {val})")
        if frame.require_output_check:
            self.outdent()

    def start_write(self, frame: Frame, node: nodes.Node | None = None) -> None:
        # `{% filter %}`, `{% call %}` and recursive loops write their buffer's value here.
        wrap = frame.buffer is None and node is not None
        self._kls_wrapped.append(wrap)
        if wrap:
            assert node is not None
            self.writeline(f"yield environment.kls_out({self._kls_where(node, EXPR)}, ", node)
        else:
            super().start_write(frame, node)

    def end_write(self, frame: Frame) -> None:
        if self._kls_wrapped.pop():
            self.write(")")
        else:
            super().end_write(frame)

    def visit_Include(self, node: nodes.Include, frame: Frame) -> None:
        self._kls_include = (node, frame)
        try:
            super().visit_Include(node, frame)
        finally:
            self._kls_include = None

    def writeline(self, x: str, node: nodes.Node | None = None, extra: int = 0) -> None:
        include = self._kls_include
        if x == _BODY_STREAM and include is not None and include[1].buffer is None:
            # `{% include ... without context %}` replays a cached module's chunks, whose
            # positions were taken when the module rendered: they map to the include.
            where = self._kls_where(include[0], EXPR)
            x = f"for event in {x[len('yield from ') :]}: yield environment.kls_out({where}, event)"
        super().writeline(x, node, extra)


def line_origins(
    chunks: list[str], wheres: list[Where | None], subs: dict[str, list[Origin | None]]
) -> list[Origin | None]:
    """The origin of each line of `"".join(chunks)`: the origin of the line's first
    non-blank character, or of its first character (its newline, for an empty line) when it is
    all blank. `wheres[i]` is where chunk i was written; None continues the previous chunk's
    position. `subs` maps a sub-template's output to its own origins."""
    origins: list[Origin | None] = []
    at_start = True  # the next character starts a rendered line
    blank = False  # the open rendered line holds only blanks so far
    end: Origin | None = None  # where the previous chunk ended
    cache: dict[tuple[str, int], Origin] = {}

    def at(path: str, line: int) -> Origin:
        key = (path, line)
        found = cache.get(key)
        if found is None:
            found = cache[key] = Origin(path, line)
        return found

    for chunk, where in zip(chunks, wheres, strict=True):
        if not chunk:
            if where is not None:
                end = at(where[0], where[1])
            continue
        newlines = chunk.count("\n")
        # The origin of each line of this chunk: index k is the line after the k-th newline.
        lines: list[Origin | None]
        if where is None:
            lines = [end] * (newlines + 1)
        elif where[2] == DATA:
            lines = [at(where[0], where[1] + k) for k in range(newlines + 1)]
        else:
            sub = subs.get(chunk)
            if sub is not None and len(sub) >= newlines + 1:
                lines = sub[: newlines + 1]
            else:
                lines = [at(where[0], where[1])] * (newlines + 1)
        head = chunk if not newlines else chunk[: chunk.index("\n")]
        if at_start:
            origins.append(lines[0])
            blank = not head.strip()
        elif blank and head.strip():
            origins[-1] = lines[0]  # the open line's first non-blank character is here
            blank = False
        ends_line = chunk.endswith("\n")
        origins.extend(lines[1 : newlines if ends_line else newlines + 1])
        if newlines and not ends_line:
            blank = not chunk[chunk.rindex("\n") + 1 :].strip()
        at_start = ends_line
        end = lines[-1]
    if at_start:
        origins.append(end)
    return origins


# -- one compiled code per template shape ------------------------------------------------------

# A data token's text is replaced by a placeholder no template can produce (it holds a random
# nonce); the code generator reads a placeholder's slot from `kls_data`.
_NONCE = secrets.token_hex(8)
_SLOT = object()  # stands for a slot's text in a shape's key


def _placeholder(slot: int) -> str:
    return f"\x00kls-{_NONCE}-{slot}\x00"


@dataclass(frozen=True)
class Shape:
    """A template text seen as its Jinja tokens with the template data taken out.

    `key` is every raw token (line, type, text), with the text of each data token that holds
    more than whitespace left out (a slot); `data` is those texts, in order. Two texts with
    the same key differ only in that data, so they compile to the same code (data is written
    as is, and every position the source map records is a token's line, kept in the key);
    `kls_data` gives the code its texts. Empty and all-blank data stay in the key: Jinja's
    parser looks at them (an empty one makes no node; a required block must be blank)."""

    key: tuple[tuple[int, str, str | None], ...]
    data: tuple[str, ...]
    raw: tuple[tuple[int, str, str], ...]  # with placeholders, for `compile_shape`
    # Where each slot's raw text lies in the source (start, end), or None if unknown.
    spans: tuple[tuple[int, int], ...] | None = None


# The last text lexed for each file (and lexer), with its shape: an edit inside one slot's
# text is seen without lexing again (`_edited_shape`). Per process; entries are immutable.
_LAST: dict[tuple[str, object], tuple[str, Shape]] = {}
_LAST_KEEP = 64
# An edit that removes or inserts one of these may start or end a tag, or move lines.
_TAG_CHARS = frozenset("{}%#\n\r")


def template_shape(
    env: Environment, source: str, name: str | None, filename: str | None
) -> Shape | None:
    """The shape of `source`, or None where it cannot be taken (a lexing error, which the
    plain compile then reports exactly; extensions, which may rewrite the token stream)."""
    if env.extensions:
        return None
    lexer = env.lexer
    plain = env.line_statement_prefix is None and env.line_comment_prefix is None
    memo = (filename, lexer) if filename and plain else None
    last = _LAST.get(memo) if memo is not None else None
    shape = _edited_shape(last[0], last[1], source, lexer) if last is not None else None
    if shape is None:
        shape = _lex_shape(env, source, name, filename)
    if shape is not None and memo is not None:
        _LAST.pop(memo, None)
        while len(_LAST) >= _LAST_KEEP:
            _LAST.pop(next(iter(_LAST)), None)
        _LAST[memo] = (source, shape)
    return shape


def _lex_shape(
    env: Environment, source: str, name: str | None, filename: str | None
) -> Shape | None:
    lexer = env.lexer
    try:
        tokens = list(lexer.tokeniter(env.preprocess(source), name, filename))
    except Exception:
        return None
    key: list[tuple[int, str, str | None]] = []
    data: list[str] = []
    raw: list[tuple[int, str, str]] = []
    spans: list[tuple[int, int]] | None = []
    cursor = 0
    for token in tokens:
        lineno, kind, value = token
        if value and spans is not None:
            # Every raw token is the source's own text, in order (kls.template.tokens).
            found = source.find(value, cursor)
            if found < 0:
                spans = None
            else:
                cursor = found + len(value)
        if kind == TOKEN_DATA and value and not value.isspace():
            if spans is not None:
                spans.append((cursor - len(value), cursor))
            raw.append((lineno, kind, _placeholder(len(data))))
            # As Jinja's token stream gives it (lexer.wrap).
            data.append(lexer._normalize_newlines(value) if "\r" in value else value)
            key.append((lineno, kind, None))
        else:
            key.append(token)
            raw.append(token)
    return Shape(tuple(key), tuple(data), tuple(raw), tuple(spans) if spans is not None else None)


def _edited_shape(old: str, shape: Shape, new: str, lexer: Any) -> Shape | None:
    """The shape of `new` when it is `old` with an edit strictly inside one slot's text that
    neither removes nor inserts a line, a brace, `%` or `#` (so no tag starts or ends, and
    whitespace control strips the same), and leaves that text non-blank; else None."""
    if new == old:
        return shape
    if shape.spans is None:
        return None
    start, old_end, new_end = changed_middle(old, new)
    if not _TAG_CHARS.isdisjoint(old[start:old_end]) or not _TAG_CHARS.isdisjoint(
        new[start:new_end]
    ):
        return None
    if start > 0 and old[start - 1] == "{":
        return None  # what follows might complete `{{`, `{%` or `{#`
    slot = next(
        (i for i, (first, last) in enumerate(shape.spans) if first < start and old_end < last),
        None,
    )
    if slot is None:
        return None
    first, last = shape.spans[slot]
    delta = len(new) - len(old)
    value = new[first : last + delta]
    if value.isspace():
        return None
    data = list(shape.data)
    data[slot] = lexer._normalize_newlines(value) if "\r" in value else value
    spans = list(shape.spans[:slot])
    spans.append((first, last + delta))
    spans.extend((a + delta, b + delta) for a, b in shape.spans[slot + 1 :])
    return Shape(shape.key, tuple(data), shape.raw, tuple(spans))


def compile_shape(env: Environment, shape: Shape, name: str | None, filename: str) -> CodeType:
    """Code for every text of this shape (its data read from the module global `kls_data`).
    Raises what Jinja raises for such a text (callers compile the text itself then, so
    the error is Jinja's own)."""
    parser = Parser(env, "", name, filename)
    parser.stream = TokenStream(env.lexer.wrap(iter(shape.raw), name, filename), name, filename)
    tree = parser.parse()
    generator = env.code_generator_class(env, name, filename, None, False, env.optimized)
    if not isinstance(generator, SourceMapCodeGenerator):
        raise TypeError("data slots need kls's code generator")
    generator.kls_slots = {_placeholder(i): i for i in range(len(shape.data))}
    generator.visit(tree)
    stream = generator.stream
    assert isinstance(stream, StringIO)  # Jinja's own, as no stream was given
    return compile(stream.getvalue(), filename, "exec")
