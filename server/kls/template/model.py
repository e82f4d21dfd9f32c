"""Parse a template into what checks and editor features need, with exact ranges.

The model is built from Jinja's own lexer (tokens with offsets, see `tokens.py`) and parser
(syntax errors, free variables), so it agrees with what Jinja will render.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

from kls.positions import LineIndex, Position, Range
from kls.template.retokenize import tokenize_edited
from kls.template.tokens import Token, TokenizeResult

HELPER_OWNERS = ("kernel", "template")
BLOCK_TAGS = {"for", "if", "block", "macro", "call", "filter", "set", "with", "raw", "autoescape"}
NOQA = re.compile(r"kls:\s*noqa(?::?\s*(?P<codes>KT\d+(?:[\s,]+KT\d+)*))?", re.IGNORECASE)


@dataclass(frozen=True)
class NameRef:
    """A bare name used as a value (e.g. a buffer `X`), or `None`."""

    name: str | None
    range: Range


@dataclass(frozen=True)
class Argument:
    keyword: str | None
    text: str
    range: Range
    value_range: Range
    value_tokens: tuple[Token, ...]

    def literal(self) -> Any:
        """The Python literal this argument spells, or raise ValueError."""
        if not self.value_tokens:
            raise ValueError("empty argument")
        return ast.literal_eval(self.value_text)

    @property
    def value_text(self) -> str:
        if self.keyword is None:
            return self.text
        return self.text.split("=", 1)[1].strip()

    def name_ref(self) -> NameRef | None:
        toks = self.value_tokens
        if len(toks) == 1 and toks[0].type == "name":
            name = None if toks[0].value in ("None", "none") else toks[0].value
            return NameRef(name, self.value_range)
        return None

    def name_list(self, index: LineIndex) -> list[NameRef] | None:
        """`[X, W, None]` as name references with their ranges, or None if not that shape."""
        toks = self.value_tokens
        if len(toks) < 2 or not (toks[0].is_op("[") and toks[-1].is_op("]")):
            return None
        refs: list[NameRef] = []
        expect_name = True
        for tok in toks[1:-1]:
            if expect_name and tok.type == "name":
                name = None if tok.value in ("None", "none") else tok.value
                refs.append(NameRef(name, index.range(tok.start, tok.end)))
                expect_name = False
            elif not expect_name and tok.is_op(","):
                expect_name = True
            else:
                return None
        return refs


@dataclass(frozen=True)
class HelperCall:
    """`kernel.ptr(X)`: owner `kernel`, helper `ptr`, its arguments and what follows it."""

    owner: str
    helper: str
    range: Range
    name_range: Range
    args: tuple[Argument, ...]
    called: bool
    followed_by: str | None  # attribute accessed on the result, e.g. "getvalue"
    open_paren: Position | None = None

    def positional(self) -> list[Argument]:
        return [a for a in self.args if a.keyword is None]

    def keyword(self, name: str) -> Argument | None:
        for arg in self.args:
            if arg.keyword == name:
                return arg
        return None

    def arg(self, position: int, name: str) -> Argument | None:
        """The argument bound to parameter `name` at `position`, as Python would bind it."""
        positional = self.positional()
        if position < len(positional):
            return positional[position]
        return self.keyword(name)


@dataclass(frozen=True)
class Statement:
    """A `{% tag ... %}` with the name it defines or loads, if any."""

    tag: str
    range: Range
    target: str | None = None
    target_range: Range | None = None


@dataclass(frozen=True)
class Expression:
    """A `{{ ... }}` with its inner source text."""

    range: Range
    inner: str
    inner_range: Range


@dataclass(frozen=True)
class SyntaxProblem:
    message: str
    range: Range


DEF_KERNEL = frozenset({"def_kernel"})  # a Triton template's plain def_kernel(...)


@dataclass
class TemplateModel:
    source: str
    index: LineIndex
    tokens: list[Token]
    syntax_error: SyntaxProblem | None
    calls: list[HelperCall] = field(default_factory=list)
    expressions: list[Expression] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    name_uses: dict[str, list[Range]] = field(default_factory=dict)
    noqa: dict[int, frozenset[str]] = field(default_factory=dict)
    # Jinja's AST, shared by the texts of one shape (kls.template.tokens): its TemplateData
    # nodes may hold another such text's data; `source` is this text.
    ast: nodes.Template | None = None

    @functools.cached_property
    def free_variables(self) -> frozenset[str]:
        """Names the template reads but never sets (on demand: this runs Jinja's code
        generator, which costs as much as parsing)."""
        if self.ast is None:
            return frozenset()
        return frozenset(jinja2.meta.find_undeclared_variables(self.ast))

    def calls_to(self, owner: str, helper: str) -> list[HelperCall]:
        return [c for c in self.calls if c.owner == owner and c.helper == helper]

    def kernel_declarations(self) -> list[Range]:
        """Where the template declares its kernel: its `kernel.def_kernel(...)` calls, else a
        Triton template's plain `def_kernel(...)`, else (a torch-2.11 GEMM, whose def_kernel
        Inductor ran before rendering) its `{{kernel_call_signature}}`. Lenses, hints, the
        kls-bench and kls-tune diagnostics and unplaced sanitizer findings go there."""
        calls = self.calls_to("kernel", "def_kernel") or self.bare_calls(DEF_KERNEL)
        if calls:
            return [c.range for c in calls]
        return list(self.name_uses.get("kernel_call_signature", []))[:1]

    def includes(self) -> list[Statement]:
        return [s for s in self.statements if s.tag in ("include", "import", "from", "extends")]

    def is_silenced(self, code: str, line: int) -> bool:
        codes = self.noqa.get(line)
        return codes is not None and (not codes or code in codes)

    def bare_calls(self, names: frozenset[str]) -> list[HelperCall]:
        """Calls of plain names inside Jinja code (`size("A", 0)`: the helpers a Triton
        template gets as Jinja variables), with owner "" and exact argument ranges."""
        toks = self.tokens
        out: list[HelperCall] = []
        for i, tok in enumerate(toks):
            if tok.type != "name" or tok.value not in names or _after_dot(toks, i):
                continue
            if i + 1 >= len(toks) or not toks[i + 1].is_op("("):
                continue
            close, args = _arguments(toks, i + 1, self.index)
            end = toks[close].end if close < len(toks) else toks[-1].end
            rng = self.index.range(tok.start, tok.end)
            follows = None
            if (
                close + 2 < len(toks)
                and toks[close + 1].is_op(".")
                and toks[close + 2].type == "name"
            ):
                follows = toks[close + 2].value
            out.append(
                HelperCall(
                    owner="",
                    helper=tok.value,
                    range=self.index.range(tok.start, end),
                    name_range=rng,
                    args=tuple(args),
                    called=True,
                    followed_by=follows,
                    open_paren=self.index.position(toks[i + 1].start),
                )
            )
        return out

    def call_at(self, pos: Position) -> HelperCall | None:
        """The innermost helper call whose range contains `pos`."""
        best: HelperCall | None = None
        for call in self.calls:
            if call.range.contains(pos) and (best is None or best.range.start <= call.range.start):
                best = call
        return best


def make_environment() -> jinja2.Environment:
    """The Jinja configuration Inductor renders with (no autoescape, default delimiters)."""
    return jinja2.Environment(undefined=jinja2.StrictUndefined)


_ENV = make_environment()


# A model is thousands of objects that every full garbage collection walks: keep few (the
# editor asks for the current text of a few documents; `kls check` for each file once).
@functools.lru_cache(maxsize=16)
def parse_template(source: str) -> TemplateModel:
    """The model of a template text (cached by text: treat the result as read-only)."""
    env = _ENV
    lexed = tokenize_edited(env, source)  # typing in a line: the last text's tokens, moved
    model = TemplateModel(source, lexed.index, lexed.tokens, None)
    _collect(model, lexed)
    parsed = _parse_shape(env, source, lexed.shape)
    if isinstance(parsed, TemplateSyntaxError):
        model.syntax_error = _locate_syntax_error(model, parsed)
    else:
        model.ast = parsed
    if model.syntax_error is None and lexed.error is not None:
        model.syntax_error = _locate_syntax_error(model, lexed.error)
    return model


# Jinja's parse by shape (TokenizeResult.shape): an edit of template data only (the text
# outside {{ }}, {% %} and {# #}, on the same lines) parses nothing again.
_PARSES: dict[tuple[Any, ...], nodes.Template | TemplateSyntaxError] = {}
_PARSES_KEEP = 64
_PARSES_LOCK = threading.Lock()  # models are parsed on several threads


def _parse_shape(
    env: jinja2.Environment, source: str, shape: tuple[Any, ...] | None
) -> nodes.Template | TemplateSyntaxError:
    """Jinja's AST of `source` (its template data may be another text's of the same shape),
    or the syntax error its parse raises (the same for every text of the shape: the parser
    sees tokens, and of data only whether it is empty or blank, which the shape keeps)."""
    if shape is not None:
        with _PARSES_LOCK:
            found = _PARSES.pop(shape, None)
            if found is not None:
                _PARSES[shape] = found  # the most recently used
                return found
    try:
        parsed: nodes.Template | TemplateSyntaxError = env.parse(source)
    except TemplateSyntaxError as exc:
        parsed = exc
    if shape is not None:
        with _PARSES_LOCK:
            while len(_PARSES) >= _PARSES_KEEP:
                del _PARSES[next(iter(_PARSES))]
            _PARSES[shape] = parsed
    return parsed


def _collect(model: TemplateModel, lexed: TokenizeResult) -> None:
    toks = lexed.tokens
    index = lexed.index
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.type == "variable_begin":
            end = _find(toks, i, "variable_end")
            _add_expression(model, toks, i, end)
        elif tok.type == "block_begin":
            end = _find(toks, i, "block_end")
            _add_statement(model, toks, i, end)
        elif tok.type == "comment":
            _add_noqa(model, tok)
        if tok.type == "name" and tok.value in HELPER_OWNERS and not _after_dot(toks, i):
            call = _helper_call(toks, i, index)
            if call is not None:
                model.calls.append(call)
        if tok.type == "name" and not _after_dot(toks, i) and not _is_keyword_name(toks, i):
            model.name_uses.setdefault(tok.value, []).append(index.range(tok.start, tok.end))
        i += 1


def _find(toks: list[Token], start: int, kind: str) -> int:
    for j in range(start + 1, len(toks)):
        if toks[j].type == kind:
            return j
        if toks[j].type in ("variable_begin", "block_begin", "data"):
            return j - 1
    return len(toks) - 1


def _after_dot(toks: list[Token], i: int) -> bool:
    return i > 0 and toks[i - 1].is_op(".")


def _is_keyword_name(toks: list[Token], i: int) -> bool:
    """`names_str=` inside a call: a parameter name, not a use of a variable."""
    return (
        i + 1 < len(toks)
        and toks[i + 1].is_op("=")
        and i > 0
        and (toks[i - 1].is_op("(") or toks[i - 1].is_op(","))
    )


def _add_expression(model: TemplateModel, toks: list[Token], begin: int, end: int) -> None:
    first, last = toks[begin], toks[end]
    inner_start = first.end
    inner_end = last.start if last.type == "variable_end" else last.end
    model.expressions.append(
        Expression(
            model.index.range(first.start, last.end),
            model.source[inner_start:inner_end],
            model.index.range(inner_start, inner_end),
        )
    )


def _add_statement(model: TemplateModel, toks: list[Token], begin: int, end: int) -> None:
    if begin + 1 > end or toks[begin + 1].type != "name":
        return
    tag = toks[begin + 1].value
    target: Token | None = None
    body = toks[begin + 2 : end + 1]
    if (tag in ("block", "macro", "set", "for") and body and body[0].type == "name") or (
        tag in ("include", "import", "from", "extends") and body and body[0].type == "string"
    ):
        target = body[0]
    rng = model.index.range(toks[begin].start, toks[end].end)
    if target is None:
        model.statements.append(Statement(tag, rng))
        return
    value = target.value
    if target.type == "string":
        value = value[1:-1]
    model.statements.append(Statement(tag, rng, value, model.index.range(target.start, target.end)))


def _add_noqa(model: TemplateModel, tok: Token) -> None:
    match = NOQA.search(tok.value)
    if not match:
        return
    codes = match.group("codes")
    line = model.index.position(tok.start).line
    parsed = frozenset(re.findall(r"KT\d+", codes.upper())) if codes else frozenset()
    previous = model.noqa.get(line)
    if previous is not None:
        parsed = frozenset() if not previous or not parsed else previous | parsed
    model.noqa[line] = parsed


def _helper_call(toks: list[Token], i: int, index: LineIndex) -> HelperCall | None:
    if i + 2 >= len(toks) or not toks[i + 1].is_op(".") or toks[i + 2].type != "name":
        return None
    owner, helper = toks[i], toks[i + 2]
    j = i + 3
    args: list[Argument] = []
    called = j < len(toks) and toks[j].is_op("(")
    open_paren: Position | None = None
    end_offset = helper.end
    if called:
        open_paren = index.position(toks[j].start)
        close, args = _arguments(toks, j, index)
        end_offset = toks[close].end if close < len(toks) else toks[-1].end
        j = close + 1
    followed_by = None
    if j + 1 < len(toks) and toks[j].is_op(".") and toks[j + 1].type == "name":
        followed_by = toks[j + 1].value
    return HelperCall(
        owner=owner.value,
        helper=helper.value,
        range=index.range(owner.start, end_offset),
        name_range=index.range(helper.start, helper.end),
        args=tuple(args),
        called=called,
        followed_by=followed_by,
        open_paren=open_paren,
    )


def _arguments(toks: list[Token], open_idx: int, index: LineIndex) -> tuple[int, list[Argument]]:
    """Split the call's arguments on top-level commas; returns the index of `)` and the args."""
    depth = 0
    args: list[Argument] = []
    current: list[Token] = []
    j = open_idx + 1
    while j < len(toks):
        tok = toks[j]
        if tok.type in ("variable_end", "block_end", "data", "variable_begin", "block_begin"):
            break  # unterminated call: stop at the tag's end
        if tok.type == "operator" and tok.value in "([{":
            depth += 1
        elif tok.type == "operator" and tok.value in ")]}":
            if depth == 0:
                _push_argument(args, current, index)
                return j, args
            depth -= 1
        elif tok.is_op(",") and depth == 0:
            _push_argument(args, current, index)
            current = []
            j += 1
            continue
        current.append(tok)
        j += 1
    _push_argument(args, current, index)
    return j - 1, args


def _push_argument(args: list[Argument], toks: list[Token], index: LineIndex) -> None:
    if not toks:
        return
    source = index.text
    keyword = None
    value = toks
    if len(toks) >= 2 and toks[0].type == "name" and toks[1].is_op("="):
        keyword = toks[0].value
        value = toks[2:]
    start, end = toks[0].start, toks[-1].end
    value_range = index.range(value[0].start, value[-1].end) if value else index.range(end, end)
    args.append(
        Argument(
            keyword=keyword,
            text=source[start:end],
            range=index.range(start, end),
            value_range=value_range,
            value_tokens=tuple(value),
        )
    )


def _locate_syntax_error(model: TemplateModel, exc: TemplateSyntaxError) -> SyntaxProblem:
    """Jinja gives a line; find the exact range it means on that line."""
    message = exc.message or "syntax error"
    line = max((exc.lineno or 1) - 1, 0)
    if "unexpected end of template" in message.lower():
        opener = _unclosed_block(model)
        if opener is not None:
            return SyntaxProblem(message, opener)
        unclosed_tag = _last_unclosed_tag(model)
        if unclosed_tag is not None:
            return SyntaxProblem(message, unclosed_tag)
    quoted = re.findall(r"'([^']+)'", message)
    on_line = [
        t for t in model.tokens if model.index.position(t.start).line == line and t.type != "data"
    ]
    for word in quoted:
        for tok in on_line:
            if tok.value == word:
                return SyntaxProblem(message, model.index.range(tok.start, tok.end))
    text = model.index.line_text(line)
    stripped = len(text) - len(text.lstrip())
    return SyntaxProblem(
        message, Range(Position(line, stripped), Position(line, max(len(text), stripped)))
    )


def _unclosed_block(model: TemplateModel) -> Range | None:
    stack: list[Statement] = []
    for stmt in model.statements:
        if stmt.tag.startswith("end"):
            if stack and stack[-1].tag == stmt.tag[3:]:
                stack.pop()
        elif stmt.tag in BLOCK_TAGS and not (stmt.tag == "set" and _is_inline_set(model, stmt)):
            stack.append(stmt)
    return stack[-1].range if stack else None


def _is_inline_set(model: TemplateModel, stmt: Statement) -> bool:
    start = model.index.offset(stmt.range.start)
    end = model.index.offset(stmt.range.end)
    return "=" in model.source[start:end]


def _last_unclosed_tag(model: TemplateModel) -> Range | None:
    """`{{ x` or `{% if` at the end of the text: the opening delimiter."""
    opened: Token | None = None
    for tok in model.tokens:
        if tok.type in ("variable_begin", "block_begin", "comment_begin"):
            opened = tok
        elif tok.type in ("variable_end", "block_end", "comment_end"):
            opened = None
    if opened is None:
        return None
    return model.index.range(opened.start, opened.end)
