"""Positions in a template's own text: 0-based (line, column), columns in characters."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    line: int
    column: int


@dataclass(frozen=True)
class Range:
    start: Position
    end: Position

    @staticmethod
    def of_line(line: int, length: int = 0) -> Range:
        return Range(Position(line, 0), Position(line, length))

    def contains(self, pos: Position) -> bool:
        return self.start <= pos <= self.end

    def to_json(self) -> dict[str, dict[str, int]]:
        return {
            "start": {"line": self.start.line, "column": self.start.column},
            "end": {"line": self.end.line, "column": self.end.column},
        }


class LineIndex:
    """Converts between character offsets and (line, column) positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self.starts, offset) - 1
        return Position(line, offset - self.starts[line])

    def offset(self, pos: Position) -> int:
        if pos.line >= len(self.starts):
            return len(self.text)
        return min(self.starts[pos.line] + pos.column, len(self.text))

    def range(self, start: int, end: int) -> Range:
        return Range(self.position(start), self.position(end))

    def line_text(self, line: int) -> str:
        if line >= len(self.starts):
            return ""
        start = self.starts[line]
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end]

    @property
    def line_count(self) -> int:
        return len(self.starts)
