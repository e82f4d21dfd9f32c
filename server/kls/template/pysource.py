"""Templates held in string constants of Python files, read with `ast` (never imported or run).

Inductor keeps its templates as module-level constants (`GEMM_TEMPLATE_CUTLASS_3X = r"..."`).
`python_constants(text)` finds every module-level `NAME = <literal>` of a Python file and, for
each string constant, its value and where each of its characters is written in the file: the
value of `"a\\tb"` has 3 characters written over 4, a raw string's characters are written one
for one, implicit concatenation (`"ab" "cd"`) jumps over the quotes and whitespace between the
parts, and a backslash at the end of a line inside a non-raw string writes nothing. `PyConstant`
maps positions both ways between the template's own text (what the pipeline sees) and the file.

A constant may also be joined with `+` from string literals and the file's earlier string
constants (`r'...' + LOOP_BODY + '...'`): each character maps to where it is written, so a shared
piece maps to its own lines. Templates registered by a call (`TritonTemplate(name="mm_plus_mm",
source=...)`, kls.template.pyregistered) are read the same way, under their registered name.
A constant whose value needs the file to run (`%`, `.format(...)`, an f-string, a call) becomes a
`PyProblem` that says so and how to fix it.
"""

from __future__ import annotations

import ast
import bisect
import functools
import io
import itertools
import tokenize
import unicodedata
import warnings
from dataclasses import dataclass

from kls.positions import LineIndex, Position, Range
from kls.template.pyregistered import registered_templates

_SIMPLE_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"


@dataclass(frozen=True)
class PyConstant:
    """A module-level string constant: its value (the template text) and, for each character
    k of the value, the file offsets where its spelling starts (`starts[k]`) and ends
    (`ends[k]`). Offsets count characters of the file's text with line ends as `\\n`."""

    name: str
    value: str
    line: int  # 0-based line of the assignment's target
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    end: int  # the file offset just after the last character (the closing quote)
    file_index: LineIndex
    raw: bool  # every part is a raw string (r"..."): characters are written one for one

    @functools.cached_property
    def index(self) -> LineIndex:
        return LineIndex(self.value)

    def file_offset(self, offset: int) -> int:
        """Where the value's character at `offset` starts in the file (its end: `self.end`)."""
        if offset >= len(self.starts):
            return self.end
        return self.starts[max(offset, 0)]

    def to_file(self, pos: Position) -> Position:
        """A template position as a position in the file."""
        return self.file_index.position(self.file_offset(self._offset(pos)))

    def range_to_file(self, rng: Range) -> Range:
        start = self._offset(rng.start)
        end = max(self._offset(rng.end), start)
        first = self.file_offset(start)
        # An end is the end of the character before it, so a range ending at a part's last
        # character does not run over the quotes to the next part.
        last = self.ends[end - 1] if end > start and end - 1 < len(self.ends) else first
        if end > start and end - 1 >= len(self.ends):
            last = self.end
        return Range(self.file_index.position(first), self.file_index.position(last))

    def from_file(self, pos: Position) -> Position | None:
        """The template position written at a file position, or None outside the string's
        characters (its prefix, quotes, or what lies between concatenated parts). A position
        right after a character (an editor cursor at the end of a word) belongs to it."""
        if not self.starts:
            return None
        line_text = self.file_index.line_text(pos.line)
        if pos.line >= self.file_index.line_count or pos.column > len(line_text):
            return None
        offset = self.file_index.offset(pos)
        if not self._in_file_order:
            return self._from_file_joined(offset)
        k = bisect.bisect_right(self.starts, offset) - 1
        if k < 0:
            return None
        if offset < self.ends[k]:
            return self.index.position(k)
        if offset == self.ends[k] and (k + 1 == len(self.starts) or self.starts[k + 1] > offset):
            return self.index.position(k + 1)
        return None

    @functools.cached_property
    def _in_file_order(self) -> bool:
        """False for a joined template whose pieces are written out of order (a shared
        constant defined above the call that joins it in)."""
        return all(a <= b for a, b in itertools.pairwise(self.starts))

    def _from_file_joined(self, offset: int) -> Position | None:
        """from_file for a joined template: the first use of the character written at
        `offset` (a piece joined in twice maps to its first use)."""
        for k, (start, end) in enumerate(zip(self.starts, self.ends, strict=True)):
            if start <= offset < end:
                return self.index.position(k)
        for k, end in enumerate(self.ends):
            if end == offset:
                return self.index.position(k + 1)
        return None

    def _offset(self, pos: Position) -> int:
        """A template position as an offset into the value, clamped to its line."""
        index = self.index
        if pos.line >= index.line_count:
            return len(self.value)
        line = max(pos.line, 0)
        return index.starts[line] + min(max(pos.column, 0), len(index.line_text(line)))


@dataclass(frozen=True)
class PyProblem:
    """A module-level name that is not a string kls can read without running the file."""

    name: str
    line: int  # 0-based
    message: str


@dataclass(frozen=True)
class PyModule:
    """The module-level names of a Python file: string constants, and the names kls cannot
    read (with why). `error` is set when the file does not parse as Python."""

    constants: dict[str, PyConstant | PyProblem]
    error: str | None = None
    error_line: int = 0

    def strings(self) -> list[str]:
        """The names of the string constants, in file order."""
        return [n for n, c in self.constants.items() if isinstance(c, PyConstant)]


def normalize_newlines(text: str) -> str:
    """Line ends as `\\n` (what Python reads; columns do not move)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


@functools.lru_cache(maxsize=8)
def python_constants(text: str) -> PyModule:
    """The module-level constants of the Python source `text` (parsed once per text)."""
    text = normalize_newlines(text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes warn; Python still reads them
            tree = ast.parse(text)
    except SyntaxError as exc:
        line = max((exc.lineno or 1) - 1, 0)
        return PyModule({}, f"it does not parse as Python: {exc.msg} (line {line + 1})", line)
    except (ValueError, RecursionError, MemoryError) as exc:
        return PyModule({}, f"it does not parse as Python: {exc}", 0)
    index = LineIndex(text)
    strings = _string_tokens(text, index)
    out: dict[str, PyConstant | PyProblem] = {}
    for stmt in tree.body:
        for name, value in _assignments(stmt):
            line = stmt.lineno - 1
            out.pop(name, None)  # the last assignment wins, and keeps its place in file order
            out[name] = _constant(name, value, line, text, index, strings, out)
    for found in registered_templates(tree):
        if found.name not in out:  # a module-level name of the same spelling wins
            source = _constant(found.name, found.source, found.line, text, index, strings, out)
            out[found.name] = source
    return PyModule(out)


def _assignments(stmt: ast.stmt) -> list[tuple[str, ast.expr]]:
    if isinstance(stmt, ast.Assign):
        return [(t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name)]
    if (
        isinstance(stmt, ast.AnnAssign)
        and stmt.value is not None
        and isinstance(stmt.target, ast.Name)
    ):
        return [(stmt.target.id, stmt.value)]
    return []


def _constant(
    name: str,
    value: ast.expr,
    line: int,
    text: str,
    index: LineIndex,
    strings: list[tuple[int, int, str]],
    known: dict[str, PyConstant | PyProblem],
) -> PyConstant | PyProblem:
    """The constant `name` written as `value`: one literal, or (`+`) literals joined with the
    file's string constants defined before it (`known`)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        found = _literal(name, value, line, text, index, strings)
        return found if found is not None else _unlocated(name, line)
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return PyProblem(name, line, _why_not_a_literal(name, value))
    pieces: list[PyConstant] = []
    for part in _added(value):
        piece: PyConstant | PyProblem | None
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            piece = _literal(name, part, line, text, index, strings)
            if piece is None:
                return _unlocated(name, line)
        elif isinstance(part, ast.Name):
            piece = known.get(part.id)
        else:
            piece = None
        if not isinstance(piece, PyConstant):
            return PyProblem(name, line, _why_not_joinable(name, part))
        pieces.append(piece)
    return PyConstant(
        name,
        "".join(p.value for p in pieces),
        line,
        tuple(itertools.chain.from_iterable(p.starts for p in pieces)),
        tuple(itertools.chain.from_iterable(p.ends for p in pieces)),
        pieces[-1].end,
        index,
        all(p.raw for p in pieces),
    )


def _added(value: ast.expr) -> list[ast.expr]:
    """The operands of a chain of `+`, left to right."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return [*_added(value.left), *_added(value.right)]
    return [value]


def _literal(
    name: str,
    value: ast.Constant,
    line: int,
    text: str,
    index: LineIndex,
    strings: list[tuple[int, int, str]],
) -> PyConstant | None:
    """One string literal (implicit concatenation included) with its characters' places, or
    None when its tokens cannot be matched to its value."""
    start = _node_offset(text, index, value.lineno, value.col_offset)
    assert value.end_lineno is not None and value.end_col_offset is not None
    end = _node_offset(text, index, value.end_lineno, value.end_col_offset)
    lo = bisect.bisect_left(strings, (start, -1, ""))
    parts = []
    for token in strings[lo:]:
        if token[0] >= end:
            break
        parts.append(token)
    decoded = _decode_parts(parts)
    if decoded is None or decoded[0] != value.value:
        return None
    chars, starts, ends, raw = decoded
    last = parts[-1]
    close = last[1] - _quote_length(last[2])
    return PyConstant(name, chars, line, starts, ends, close, index, raw)


def _unlocated(name: str, line: int) -> PyProblem:
    return PyProblem(
        name,
        line,
        f"kls could not locate the characters of '{name}' in the file; write it as one "
        'plain or raw string literal (r"""...""")',
    )


def _why_not_joinable(name: str, part: ast.expr) -> str:
    what = f"'{part.id}'" if isinstance(part, ast.Name) else "a part"
    return (
        f"'{name}' is joined with + from {what}, which is not a string literal nor a string "
        "constant defined above it in this file; kls reads a template joined from those only, "
        "without running the file"
    )


def _why_not_a_literal(name: str, value: ast.expr) -> str:
    fix = (
        'write the whole template as one string literal (e.g. r"""...""") so kls can read it '
        "without running the file"
    )
    if isinstance(value, ast.JoinedStr):
        return (
            f"'{name}' is an f-string: its value exists only when Python runs the file (and its "
            "{...} fields would clash with Jinja's); " + fix
        )
    if isinstance(value, ast.Constant):
        return f"'{name}' is a {type(value.value).__name__} constant, not a string"
    if isinstance(value, ast.BinOp):
        how = {ast.Add: "concatenation (+)", ast.Mod: "%-formatting"}.get(
            type(value.op), "an operator"
        )
        return f"'{name}' is built by {how} when Python runs the file; {fix}"
    if isinstance(value, ast.Call):
        func = value.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "a call")
        first = value.args[0] if value.args else None
        if called == "load_kernel_template" and isinstance(first, ast.Constant):
            stem = str(first.value)
            return (
                f"'{name}' is read by load_kernel_template({stem!r}) from the file "
                f"templates/{stem}.py.jinja beside this one; name that file as the template"
            )
        return f"'{name}' is computed by {called}(...) when Python runs the file; {fix}"
    if isinstance(value, ast.Name):
        return f"'{name}' is another name ('{value.id}'); name that constant instead"
    return f"'{name}' is not a string literal; {fix}"


def _node_offset(text: str, index: LineIndex, lineno: int, col_offset: int) -> int:
    """An ast (1-based line, UTF-8 byte column) as a character offset into `text`."""
    line = lineno - 1
    line_text = index.line_text(line)
    column = len(line_text.encode("utf-8")[:col_offset].decode("utf-8", errors="ignore"))
    return index.offset(Position(line, column))


def _string_tokens(text: str, index: LineIndex) -> list[tuple[int, int, str]]:
    """Every STRING token of `text` as (start offset, end offset, token text), in order."""
    out: list[tuple[int, int, str]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING:
                start = index.offset(Position(tok.start[0] - 1, tok.start[1]))
                end = index.offset(Position(tok.end[0] - 1, tok.end[1]))
                out.append((start, end, tok.string))
    except (tokenize.TokenError, SyntaxError):
        pass  # ast parsed it; a tokenizer quirk only leaves constants unmapped
    return out


def _prefix_length(token: str) -> int:
    n = 0
    while n < len(token) and token[n] not in "'\"":
        n += 1
    return n


def _quote_length(token: str) -> int:
    body = token[_prefix_length(token) :]
    return 3 if body[:3] in ('"""', "'''") and len(body) >= 6 else 1


def _decode_parts(
    parts: list[tuple[int, int, str]],
) -> tuple[str, tuple[int, ...], tuple[int, ...], bool] | None:
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    all_raw = True
    for start, _end, token in parts:
        plen = _prefix_length(token)
        prefix = token[:plen].lower()
        if "b" in prefix or "f" in prefix:
            return None
        q = _quote_length(token)
        body = token[plen + q : len(token) - q]
        base = start + plen + q
        raw = "r" in prefix
        all_raw = all_raw and raw
        if not _decode_body(body, base, raw, chars, starts, ends):
            return None
    return "".join(chars), tuple(starts), tuple(ends), all_raw


def _decode_body(
    body: str, base: int, raw: bool, chars: list[str], starts: list[int], ends: list[int]
) -> bool:
    def emit(value: str, i: int, j: int) -> None:
        for ch in value:
            chars.append(ch)
            starts.append(base + i)
            ends.append(base + j)

    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if raw or c != "\\" or i + 1 >= n:
            emit(c, i, i + 1)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "\n":  # a line continuation writes nothing
            i += 2
        elif nxt in _SIMPLE_ESCAPES:
            emit(_SIMPLE_ESCAPES[nxt], i, i + 2)
            i += 2
        elif nxt in _OCTAL:
            j = i + 1
            while j < n and j < i + 4 and body[j] in _OCTAL:
                j += 1
            emit(chr(int(body[i + 1 : j], 8)), i, j)
            i = j
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                return False
            emit(chr(int(digits, 16)), i, i + 2 + width)
            i += 2 + width
        elif nxt == "N" and body[i + 2 : i + 3] == "{":
            close = body.find("}", i + 3)
            if close < 0:
                return False
            try:
                emit(unicodedata.lookup(body[i + 3 : close]), i, close + 1)
            except KeyError:
                return False
            i = close + 1
        else:  # an unknown escape keeps its backslash; the next character is read as usual
            emit("\\", i, i + 1)
            i += 1
    return True
