"""Parse nvcc's text output and bring each message home to the template line that caused it.

nvcc (cudafe/EDG) writes `file(LINE): error: text`, then the offending source line and a caret,
and for template instantiations `detected during ... at line N of FILE`. The host compiler
writes `file:LINE:COL: error: text`. kls compiles the rendered text as written (no #line), so
lines in the source file are rendered lines and the source map maps them to template lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kls.findings import Finding, Related, Severity
from kls.positions import Position, Range
from kls.render import RenderResult
from kls.template.model import parse_template
from kls.template.source import SourceError, read_source

EDG = re.compile(
    r"^(?P<file>[^\s(][^()]*)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
    r"(?: #(?P<id>[\w-]+))?(?:-D)?: (?P<msg>.*)$"
)
GCC = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning)"
    r": (?P<msg>.*)$"
)
AT_LINE = re.compile(r'at line (\d+) of "?([^"\s]+?)"?\s*$')
# clang: `file:LINE:COL: note: in instantiation of ... requested here` (innermost first).
CLANG_SITE = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:\d+:)? note: (?:in instantiation of|in "
    r"evaluation of|while substituting|in call to|during template argument deduction|"
    r"(?:.* )?requested here)"
)
WRONG_SIDE = re.compile(r"note: .*call to __\w+__ function from __\w+__ function")
# EDG's detail lines under a message, e.g. "            argument types are: (float *, int)",
# "operand types are: float + at::BFloat16", "object type is: const T".
DETAIL = re.compile(r"^\s{4,}(?P<text>[a-z][\w ]*? (?:is|are): .+?)\s*$")
MAX_DETAIL = 300
ECHO_INDENT = 2
MAX_MESSAGE = 300
MAX_FINDINGS = 20


@dataclass
class NvccMessage:
    file: str
    line: int  # 1-based, as nvcc prints it
    severity: str
    text: str
    column: int | None = None  # 0-based, from the caret line when there is one
    sites: list[tuple[str, int]] = field(default_factory=list)  # instantiation chain
    details: list[str] = field(default_factory=list)  # "argument types are: (...)" lines
    # clang only: a note says a candidate was refused for being on the wrong side (a __host__
    # function called from device code): CUDA semantics nvcc judges differently.
    wrong_side: bool = False

    @property
    def is_error(self) -> bool:
        return "error" in self.severity


def parse_nvcc(log: str) -> list[NvccMessage]:
    messages: list[NvccMessage] = []
    lines = log.splitlines()
    for line in lines:
        m = EDG.match(line) or GCC.match(line)
        if m is not None:
            col = m.groupdict().get("col")
            messages.append(
                NvccMessage(
                    m.group("file"),
                    int(m.group("line")),
                    m.group("sev"),
                    m.group("msg").strip(),
                    int(col) - 1 if col else None,
                )
            )
            continue
        if not messages:
            continue
        current = messages[-1]
        at = AT_LINE.search(line)
        detail = DETAIL.match(line) if current.column is None else None
        if at is not None:
            current.sites.append((at.group(2), int(at.group(1))))
        elif detail is not None:
            current.details.append(detail.group("text"))
        elif line.strip() == "^" and current.column is None:
            # nvcc echoes the source line indented by two spaces, then the caret under it.
            current.column = max(line.index("^") - ECHO_INDENT, 0)
    return messages


@dataclass(frozen=True)
class Tool:
    """Who reported a message: how its findings are labelled (code, message prefix, source)."""

    name: str  # the editor's diagnostic source
    prefix: str
    error_code: str
    warning_code: str


NVCC = Tool("nvcc", "nvcc", "KT601", "KT602")
CLANG = Tool("clang", "quick check (clang)", "KT606", "KT606")


def parse_clang(log: str) -> list[NvccMessage]:
    """clang's `file:LINE:COL: error: text` messages, each with the instantiation chain that
    its notes name (so an error inside a CUTLASS header comes home to the template line that
    instantiated it, as nvcc's `detected during ... at line N` does)."""
    messages: list[NvccMessage] = []
    for line in log.splitlines():
        m = GCC.match(line)
        if m is not None:
            col = m.group("col")
            messages.append(
                NvccMessage(
                    m.group("file"),
                    int(m.group("line")),
                    m.group("sev"),
                    m.group("msg").strip(),
                    int(col) - 1 if col else None,
                )
            )
            continue
        if messages and WRONG_SIDE.search(line):
            messages[-1].wrong_side = True
            continue
        site = CLANG_SITE.match(line)
        if site is not None and messages:
            messages[-1].sites.append((site.group("file"), int(site.group("line"))))
    return messages


def is_mappable(msg: NvccMessage, source: Path) -> bool:
    """The message is on a line of the compiled file or names one in its instantiation chain."""
    return _is_source(msg.file, source) or any(_is_source(f, source) for f, _ in msg.sites)


def map_messages(
    messages: list[NvccMessage],
    source: Path,
    render: RenderResult,
    limit: int = MAX_FINDINGS,
    tool: Tool = NVCC,
) -> list[Finding]:
    """Findings on template lines; the first error first, duplicates dropped, count capped."""
    findings: list[Finding] = []
    seen: set[tuple[str, int, str]] = set()
    ordered = [m for m in messages if m.is_error] + [m for m in messages if not m.is_error]
    for msg in ordered:
        finding = _map_one(msg, source, render, tool)
        if finding is None:
            continue
        key = (finding.path, finding.range.start.line, finding.message)
        if key in seen:
            continue
        seen.add(key)
        findings.append(finding)
        if len(findings) >= limit:
            break
    return findings


def _is_source(file: str, source: Path) -> bool:
    return file == str(source) or Path(file).name == source.name


def _map_one(msg: NvccMessage, source: Path, render: RenderResult, tool: Tool) -> Finding | None:
    if not msg.is_error and not _is_source(msg.file, source):
        return None  # warnings inside CUTLASS headers are noise for the template author
    text = msg.text if len(msg.text) <= MAX_MESSAGE else msg.text[:MAX_MESSAGE] + " …"
    if msg.details:  # what nvcc says the types were: the half of the message that explains it
        detail = "; ".join(msg.details)
        detail = detail if len(detail) <= MAX_DETAIL else detail[:MAX_DETAIL] + " …"
        text = text.rstrip(":") + f" ({detail})"
    related: tuple[Related, ...] = ()
    rendered_line: int | None = None
    column = msg.column
    if _is_source(msg.file, source):
        rendered_line = msg.line - 1
    else:
        ours = [line for file, line in msg.sites if _is_source(file, source)]
        if ours:
            rendered_line = ours[-1] - 1
            column = None
        header = Range.of_line(max(msg.line - 1, 0))
        related = (Related(msg.file, header, f"{msg.severity} reported here"),)
        text = f"{text} (in {Path(msg.file).name}:{msg.line})"
    code = tool.error_code if msg.is_error else tool.warning_code
    severity = Severity.ERROR if msg.is_error else Severity.WARNING
    origin = (
        render.source_map.origin(rendered_line)
        if (render.source_map is not None and rendered_line is not None)
        else None
    )
    if origin is None:
        path = str(render.instance.template)
        message = f"{tool.prefix}: {text}"
        return Finding(
            code, severity, Range.of_line(0), message, path, related=related, source=tool.name
        )
    rng = _template_range(render, rendered_line or 0, origin.path, origin.line, column)
    return Finding(
        code,
        severity,
        rng,
        f"{tool.prefix}: {text}",
        origin.path,
        related=related,
        source=tool.name,
    )


def _template_range(
    render: RenderResult, rendered_line: int, path: str, line: int, column: int | None
) -> Range:
    """The whole template line, or the exact token when the line was copied verbatim."""
    try:
        template_text = read_source(path).text  # a file, or a Python constant (file.py::NAME)
    except (OSError, UnicodeDecodeError, SourceError):
        return Range.of_line(line)
    model = parse_template(template_text)
    text = model.index.line_text(line)
    rendered = (render.text or "").split("\n")
    same = rendered_line < len(rendered) and rendered[rendered_line] == text
    if column is not None and same and column < len(text):
        end = column
        while end < len(text) and (text[end].isalnum() or text[end] == "_"):
            end += 1
        return Range(Position(line, column), Position(line, max(end, column + 1)))
    indent = len(text) - len(text.lstrip())
    return Range(Position(line, indent), Position(line, len(text.rstrip())))
