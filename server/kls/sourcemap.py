"""Source maps: for every rendered line, the template file and line that produced it.

Jinja has no source maps. kls plants an invisible marker at the start of every template data
chunk, before every `{{`, and after every newline inside a chunk, *after* Jinja's lexer has
applied whitespace control
(`{%-`, `-%}`), so markers never change what is stripped. Expression output (`{{ ... }}`) carries
no markers and inherits the line of the text before it: the line of the expression. Sub-templates
plant markers with their own file id, so their lines map home through the main output.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream

MARK_OPEN, MARK_CLOSE = "\x1e", "\x1f"
MARKER = re.compile("\x1e(\\d+):(\\d+)\x1f")
LEADING_MARKERS = re.compile("(?:\x1e\\d+:\\d+\x1f)+")


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


class FileIds:
    """Small integers for file paths, so markers stay short."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._ids: dict[str, int] = {}

    def id_of(self, path: str) -> int:
        if path not in self._ids:
            self._ids[path] = len(self.paths)
            self.paths.append(path)
        return self._ids[path]


class SourceMapExtension(Extension):
    """Plants line markers in data tokens (see module docstring)."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        ids: FileIds | None = getattr(self.environment, "kls_file_ids", None)
        path = stream.filename or stream.name or "<template>"
        for token in stream:
            if ids is None:
                yield token
            elif token.type == "data":
                yield Token(
                    token.lineno, "data", mark(token.value, ids.id_of(path), token.lineno - 1)
                )
            elif token.type == "variable_begin":
                # Expression output starts on the expression's line, even with no text before.
                yield Token(token.lineno, "data", mark("", ids.id_of(path), token.lineno - 1))
                yield token
            else:
                yield token


def mark(text: str, file_id: int, line: int) -> str:
    parts = text.split("\n")
    out = [f"{MARK_OPEN}{file_id}:{line}{MARK_CLOSE}{parts[0]}"]
    for offset, part in enumerate(parts[1:], start=1):
        out.append(f"{MARK_OPEN}{file_id}:{line + offset}{MARK_CLOSE}{part}")
    return "\n".join(out)


def strip_markers(marked: str, files: list[str]) -> tuple[str, SourceMap]:
    """Remove markers; each rendered line takes the marker at its start, else the last seen."""
    origins: list[Origin | None] = []
    lines: list[str] = []
    current: Origin | None = None
    for raw in marked.split("\n"):
        # The last of the markers before any visible text says where the line comes from.
        leading = LEADING_MARKERS.match(raw)
        line_origin = current
        if leading is not None:
            fid, line = MARKER.findall(leading.group(0))[-1]
            line_origin = Origin(files[int(fid)], int(line))
        all_marks = MARKER.findall(raw)
        if all_marks:
            fid, line = all_marks[-1]
            current = Origin(files[int(fid)], int(line))
        origins.append(line_origin)
        lines.append(MARKER.sub("", raw))
    return "\n".join(lines), SourceMap(origins)
