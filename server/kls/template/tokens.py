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

    def range(self, token: Token) -> Range:
        return self.index.range(token.start, token.end)


def tokenize(env: jinja2.Environment, source: str) -> TokenizeResult:
    """All tokens of `source` with offsets; a lexing error stops the stream and is returned."""
    index = LineIndex(source)
    tokens: list[Token] = []
    cursor = 0
    error: TemplateSyntaxError | None = None
    try:
        for _lineno, kind, value in env.lexer.tokeniter(source, None):
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
    return TokenizeResult(tokens, error, index)
