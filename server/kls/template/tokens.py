"""Jinja tokens with exact character offsets.

Jinja's lexer reports only line numbers. Its raw token stream (`Lexer.tokeniter`) yields the exact
source text of every token except data stripped by whitespace control, which is still a contiguous
substring; so a forward search from a cursor recovers each token's offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
from jinja2.exceptions import TemplateSyntaxError

from kls.positions import LineIndex, Range

# Token types that carry no meaning for the model.
SKIP = frozenset({"whitespace"})


@dataclass(frozen=True)
class Token:
    type: str
    value: str
    start: int
    end: int

    def is_op(self, value: str) -> bool:
        return self.type == "operator" and self.value == value


@dataclass
class TokenizeResult:
    tokens: list[Token]
    error: TemplateSyntaxError | None
    index: LineIndex
    # The text's Jinja shape: every raw token (line, type, text), with the text of each data
    # token that holds more than whitespace left out; two texts of one shape parse to the
    # same Jinja AST but for that data. None after a lexing error.
    shape: tuple[tuple[int, str, str | None], ...] | None = None

    def range(self, token: Token) -> Range:
        return self.index.range(token.start, token.end)


def tokenize(env: jinja2.Environment, source: str) -> TokenizeResult:
    """All tokens of `source` with offsets; a lexing error stops the stream and is returned."""
    index = LineIndex(source)
    tokens: list[Token] = []
    shape: list[tuple[int, str, str | None]] = []
    cursor = 0
    error: TemplateSyntaxError | None = None
    try:
        for lineno, kind, value in env.lexer.tokeniter(source, None):
            if kind == "data" and value and not value.isspace():
                shape.append((lineno, kind, None))
            else:
                shape.append((lineno, kind, value))
            if not value:
                continue
            found = source.find(value, cursor)
            if found < 0:  # should not happen; keep going without moving the cursor
                continue
            cursor = found + len(value)
            if kind in SKIP:
                continue
            if kind.endswith("_end"):  # `-%}` swallows the whitespace after it
                value = value.rstrip()
            tokens.append(Token(kind, value, found, found + len(value)))
    except TemplateSyntaxError as exc:
        error = exc
    return TokenizeResult(tokens, error, index, tuple(shape) if error is None else None)
