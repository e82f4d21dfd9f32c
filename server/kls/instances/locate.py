"""Find the line of a key path in TOML text, so config errors point at the line to fix.

`tomllib` keeps no positions; this scanner understands table headers, dotted keys and inline
tables well enough to find the line a key is written on.
"""

from __future__ import annotations

import re
from pathlib import Path

from kls.positions import Position, Range

HEADER = re.compile(r"^\s*\[\[?\s*(?P<path>[^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"""^\s*(?P<key>"[^"]*"|'[^']*'|[A-Za-z0-9_.\-" ']+?)\s*=""")


def split_key(text: str) -> tuple[str, ...]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_\-]+)', text)
    return tuple(a or b or c for a, b, c in parts)


class TomlLocator:
    """Lines of key paths in one TOML text. Lookups cost O(depth of the path + lines of one
    table body), not O(tables), so a config with thousands of instances loads in linear time."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.header_lines: dict[tuple[str, ...], int] = {}
        self.body_ends: dict[int, int] = {}  # header line -> the line the next table starts
        previous = -1
        for i, line in enumerate(self.lines):
            m = HEADER.match(line)
            if m and "=" not in m.group("path"):
                self.header_lines.setdefault(split_key(m.group("path")), i)
                self.body_ends[previous] = i
                previous = i
        self.body_ends[previous] = len(self.lines)

    def find(self, path: tuple[str, ...]) -> Range:
        line = self._line_of(path)
        text = self.lines[line] if line < len(self.lines) else ""
        col = self._column_of(text, path[-1]) if path else 0
        return Range(Position(line, col), Position(line, len(text)))

    def _line_of(self, path: tuple[str, ...]) -> int:
        if not path:
            return 0
        # An exact table header for the path, else the deepest header that is a prefix, then
        # the key inside its body.
        for depth in range(len(path), -1, -1):
            header_line = self.header_lines.get(path[:depth], -1) if depth else -1
            if depth == len(path) and header_line >= 0:
                return header_line
            if header_line >= 0 or depth == 0:
                found = self._key_in_body(header_line, path[depth:])
                return found if found is not None else max(header_line, 0)
        return 0

    def _key_in_body(self, header_line: int, rest: tuple[str, ...]) -> int | None:
        for i in range(header_line + 1, self.body_ends.get(header_line, len(self.lines))):
            m = KEY.match(self.lines[i])
            if not m:
                continue
            key = split_key(m.group("key"))
            if key and key[0] == rest[0]:
                if len(key) > 1 and rest[: len(key)] != key:
                    continue
                return i
        return None

    @staticmethod
    def _column_of(text: str, key: str) -> int:
        for candidate in (f'"{key}"', key):
            start = 0
            while (at := text.find(candidate, start)) >= 0:
                before = text[at - 1] if at > 0 else " "
                after = text[at + len(candidate) :].lstrip()
                if not (before.isalnum() or before in "_-") and after.startswith("="):
                    return at
                start = at + 1
        return len(text) - len(text.lstrip())


def instance_key_range(config_path: Path, config_text: str, instance: str, *keys: str) -> Range:
    """Where the config file writes `keys` of instance `instance` (in pyproject.toml, under
    [tool.kls])."""
    prefix = ("tool", "kls") if config_path.name == "pyproject.toml" else ()
    return TomlLocator(config_text).find((*prefix, "instances", instance, *keys))
