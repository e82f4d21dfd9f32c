"""A template source: where a template's text comes from, and how its positions reach the file.

A template is either a file of its own (`gemm.cu.jinja`) or a module-level string constant of a
Python file, named `file.py::CONSTANT` (Inductor keeps its templates that way). The pipeline
works on the template's text and positions in it; its identity in the pipeline (the render's
file name, a Site's or an Origin's path, a Finding's path before it is shown) is the source id:
the file's path, or `"<file.py path>::CONSTANT"`. At the edges (findings shown to people or an
editor, nvcc errors, hover and definition ranges), `TemplateSource.to_file` turns a range in the
template into the same characters in the Python file, and `findings_to_file` does it for a list
of findings. kls reads the Python file with `ast` (kls.template.pysource): it never imports or
runs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kls.findings import Finding, Related
from kls.input_limits import MAX_TEMPLATE_BYTES
from kls.positions import Position, Range
from kls.sourcemap import Origin, SourceMap
from kls.suggest import did_you_mean
from kls.template.pysource import PyConstant, PyModule, python_constants

SEPARATOR = "::"
PYTHON_SUFFIXES = (".py", ".pyi")
_REF = re.compile(r"^(?P<file>.+?)::(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")
# A Python file holding templates is read up to the bound of a template file: 1 MiB parses
# with ast in ~0.3 s (torch 2.11's gemm_template.py, 79 KB: 36 ms with its tokens).
MAX_PYTHON_BYTES = MAX_TEMPLATE_BYTES


class SourceError(Exception):
    """A template source that cannot be read; `line` is the 0-based line in its file."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass(frozen=True)
class TemplateRef:
    """A template's source: a file, or a string constant in a Python file."""

    file: Path
    constant: str | None = None

    @staticmethod
    def parse(ref: str | Path) -> TemplateRef:
        """`"x.py::NAME"` (as written in kls.toml, or a source id) or a plain path."""
        match = _REF.match(str(ref))
        if match is None:
            return TemplateRef(Path(ref))
        return TemplateRef(Path(match.group("file")), match.group("name"))

    @property
    def id(self) -> str:
        """The source id the pipeline uses as this template's path."""
        return f"{self.file}{SEPARATOR}{self.constant}" if self.constant else str(self.file)

    @property
    def path(self) -> Path:
        """The source id as a Path (what InstanceSpec.template holds)."""
        return Path(self.id)

    def resolve(self) -> TemplateRef:
        return TemplateRef(self.file.resolve(), self.constant)

    def __str__(self) -> str:
        return self.id


def is_python_ref(ref: str | Path) -> bool:
    """Whether `ref` names a constant in a Python file (`x.py::NAME`)."""
    return TemplateRef.parse(ref).constant is not None


def python_file(ref: str | Path) -> Path:
    """The file that holds `ref`'s text (itself for a template file)."""
    return TemplateRef.parse(ref).file


def is_python_file(path: Path) -> bool:
    return path.name.endswith(PYTHON_SUFFIXES)


@dataclass(frozen=True)
class TemplateSource:
    """One template's text and, for a Python constant, the map to its file's positions."""

    ref: TemplateRef
    text: str
    constant: PyConstant | None = None

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def file(self) -> Path:
        return self.ref.file

    def to_file(self, rng: Range) -> Range:
        """A range in the template as the same characters in its file."""
        return self.constant.range_to_file(rng) if self.constant is not None else rng

    def position_to_file(self, pos: Position) -> Position:
        return self.constant.to_file(pos) if self.constant is not None else pos

    def from_file(self, pos: Position) -> Position | None:
        """The template position at a position in its file (None outside the template's
        characters: elsewhere in the Python file)."""
        return self.constant.from_file(pos) if self.constant is not None else pos


def read_file_text(path: Path, overrides: Mapping[Path, str] | None = None) -> str:
    """A file's text (editor text in `overrides` wins), refusing more than the bound."""
    if overrides:
        text = overrides.get(path) or overrides.get(path.resolve())
        if text is not None:
            if len(text) > MAX_PYTHON_BYTES:  # editor text: at least one byte a character
                raise _too_large(path)
            return text
    with path.open("rb") as f:
        data = f.read(MAX_PYTHON_BYTES + 1)
    if len(data) > MAX_PYTHON_BYTES:
        raise _too_large(path)
    return data.decode("utf-8")


def _too_large(path: Path) -> SourceError:
    return SourceError(
        f"{path.name} is larger than {MAX_PYTHON_BYTES // 1024} KiB; kls reads templates "
        "from Python files up to that size: move the templates into a smaller module"
    )


def constant_in(module: PyModule, name: str, file: Path) -> PyConstant:
    """The constant `name` of `module`, or a SourceError that says why it cannot be read."""
    if module.error is not None:
        raise SourceError(f"cannot read {file.name}: {module.error}", module.error_line)
    found = module.constants.get(name)
    if isinstance(found, PyConstant):
        return found
    if found is not None:
        raise SourceError(found.message, found.line)
    strings = module.strings()
    hint = did_you_mean(name, strings)
    listed = ", ".join(strings[:8]) + (", ..." if len(strings) > 8 else "")
    have = f"; its string constants: {listed}" if strings else "; it has no string constants"
    raise SourceError(f"{file.name} has no module-level constant '{name}'{hint}{have}")


def read_source(
    ref: TemplateRef | str | Path, overrides: Mapping[Path, str] | None = None
) -> TemplateSource:
    """The template's text with its position map. Raises SourceError (a constant that is
    missing or computed at import time, a file that does not parse), OSError or
    UnicodeDecodeError."""
    ref = ref if isinstance(ref, TemplateRef) else TemplateRef.parse(ref)
    text = read_file_text(ref.file, overrides)
    if ref.constant is None:
        return TemplateSource(ref, text)
    constant = constant_in(python_constants(text), ref.constant, ref.file)
    return TemplateSource(ref, constant.value, constant)


def source_for_mapping(
    ref: TemplateRef, overrides: Mapping[Path, str] | None = None
) -> TemplateSource | None:
    """The source whose map places `ref`'s findings, or None when there is nothing to map
    (a template file). A constant that cannot be read maps to its assignment line, or the
    file's first line."""
    if ref.constant is None:
        return None
    try:
        return read_source(ref, overrides)
    except (SourceError, OSError, UnicodeDecodeError):
        return None


def _unreadable_line(ref: TemplateRef, overrides: Mapping[Path, str] | None) -> int:
    try:
        module = python_constants(read_file_text(ref.file, overrides))
        constant_in(module, str(ref.constant), ref.file)
    except SourceError as exc:
        return exc.line
    except (OSError, UnicodeDecodeError):
        return 0
    return 0


class FileMapper:
    """Maps ranges of source ids to their files, reading each Python file once."""

    def __init__(self, overrides: Mapping[Path, str] | None = None) -> None:
        self.overrides = {p.resolve(): t for p, t in (overrides or {}).items()}
        self.sources: dict[str, TemplateSource | None] = {}

    def source(self, path: str) -> TemplateSource | None:
        if path not in self.sources:
            ref = TemplateRef.parse(path)
            self.sources[path] = source_for_mapping(ref, self.overrides)
        return self.sources[path]

    def locate(self, path: str, rng: Range) -> tuple[str, Range]:
        """`(file, range in the file)` for a range in the template `path` (a source id)."""
        ref = TemplateRef.parse(path)
        if ref.constant is None:
            return path, rng
        source = self.source(path)
        if source is None:
            return str(ref.file), Range.of_line(_unreadable_line(ref, self.overrides))
        return str(ref.file), source.to_file(rng)

    def origin(self, o: Origin) -> Origin:
        """A source-map origin (a template line) as the file line that writes that line."""
        if SEPARATOR not in o.path:
            return o
        path, rng = self.locate(o.path, Range.of_line(o.line))
        return Origin(path, rng.start.line)

    def finding(self, f: Finding) -> Finding:
        if SEPARATOR not in f.path and not any(SEPARATOR in r.path for r in f.related):
            return f
        path, rng = self.locate(f.path, f.range) if f.path else (f.path, f.range)
        related = tuple(Related(*self.locate(r.path, r.range), r.message) for r in f.related)
        return Finding(f.code, f.severity, rng, f.message, path, f.instance, f.source, related)


def source_map_to_file(
    source_map: SourceMap, overrides: Mapping[Path, str] | None = None
) -> SourceMap:
    """A source map whose origins in Python constants are the files' own lines (for people
    and for `#line` directives; the pipeline keeps template lines)."""
    mapper = FileMapper(overrides)
    return SourceMap([mapper.origin(o) if o is not None else None for o in source_map.origins])


def findings_to_file(
    findings: Iterable[Finding], overrides: Mapping[Path, str] | None = None
) -> list[Finding]:
    """Findings whose path is a Python constant's source id, moved to the file's own lines and
    columns (others unchanged)."""
    mapper = FileMapper(overrides)
    return [mapper.finding(f) for f in findings]
