"""A flex attention template is three files: Inductor registers the forward as
`flex_attention.py.jinja + utilities.py.jinja + common.py.jinja` (decode: `flex_decode` in
place of the first; backward: `flex_backwards + utilities`). kls renders the concatenation and
maps each of its lines back to the file and line it came from.

The parts are read beside the instance's template (in the torch source, or in the project for
a copy), the editor's unsaved text in place of a part's file.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from kls.instances.flex_files import FLEX_PARTS, flex_op, part_paths
from kls.instances.schema import InstanceSpec
from kls.template.source import read_source

__all__ = ["FLEX_PARTS", "Concatenation", "concatenation", "flex_op"]


@dataclass(frozen=True)
class Concatenation:
    """The text Inductor renders for one flex template, and where each part starts."""

    paths: tuple[str, ...]
    starts: tuple[int, ...]  # the first line of each part in `text` (0-based)
    text: str

    def origin(self, line: int) -> tuple[str, int]:
        """The file and 0-based line of line `line` of the concatenation."""
        part = max(bisect.bisect_right(self.starts, line) - 1, 0)
        return self.paths[part], line - self.starts[part]

    def line_of(self, path: str, line: int) -> int:
        """The concatenation's line of `line` of the part `path` (its first part's line when
        `path` is not a part)."""
        part = self.paths.index(path) if path in self.paths else 0
        return self.starts[part] + line


def concatenation(instance: InstanceSpec, op: str, overrides: dict[Path, str]) -> Concatenation:
    """The parts read (unsaved text first) and joined as Inductor joins them (its files end
    with a newline; a part without one runs into the next part's first line, which is then
    that part's). Raises OSError, UnicodeDecodeError or ValueError when a part cannot be read."""
    texts: list[str] = []
    starts: list[int] = []
    line = 0
    paths = part_paths(instance, op)
    for path in paths:
        text = read_source(path, overrides).text
        starts.append(line)
        texts.append(text)
        line += text.count("\n")
    return Concatenation(tuple(str(p) for p in paths), tuple(starts), "".join(texts))
