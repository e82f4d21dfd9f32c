"""Find the line of a key path in TOML text, so config errors point at the line to fix.

`tomllib` keeps no positions; this scanner understands table headers, dotted keys and inline
tables well enough to find the line a key is written on.
"""

from __future__ import annotations

import re

from kls.positions import Position, Range

HEADER = re.compile(r"^\s*\[\[?\s*(?P<path>[^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"""^\s*(?P<key>"[^"]*"|'[^']*'|[A-Za-z0-9_.\-" ']+?)\s*=""")


def split_key(text: str) -> tuple[str, ...]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_\-]+)', text)
    return tuple(a or b or c for a, b, c in parts)


class TomlLocator:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers: list[tuple[int, tuple[str, ...]]] = []
        for i, line in enumerate(self.lines):
            m = HEADER.match(line)
            if m and "=" not in m.group("path"):
                self.headers.append((i, split_key(m.group("path"))))

    def find(self, path: tuple[str, ...]) -> Range:
        line = self._line_of(path)
        text = self.lines[line] if line < len(self.lines) else ""
        col = self._column_of(text, path[-1]) if path else 0
        return Range(Position(line, col), Position(line, len(text)))

    def _line_of(self, path: tuple[str, ...]) -> int:
        if not path:
            return 0
        # An exact table header for the path.
        for line, hpath in self.headers:
            if hpath == path:
                return line
        # The deepest header that is a prefix, then the key inside its body.
        best_line, best_len = -1, -1
        for line, hpath in self.headers:
            if path[: len(hpath)] == hpath and len(hpath) > best_len:
                best_line, best_len = line, len(hpath)
        rest = path[best_len:] if best_len >= 0 else path
        start = best_line + 1
        end = self._body_end(best_line)
        for i in range(start, end):
            m = KEY.match(self.lines[i])
            if not m:
                continue
            key = split_key(m.group("key"))
            if key and key[0] == rest[0]:
                if len(key) > 1 and rest[: len(key)] != key:
                    continue
                return i
        return max(best_line, 0)

    def _body_end(self, header_line: int) -> int:
        for line, _ in self.headers:
            if line > header_line:
                return line
        return len(self.lines)

    @staticmethod
    def _column_of(text: str, key: str) -> int:
        m = re.search(rf"(?<![\w\-]){re.escape(key)}\s*=|\"{re.escape(key)}\"\s*=", text)
        if m:
            return m.start()
        return len(text) - len(text.lstrip())
