"""compute-sanitizer's report, read: each error it prints (memcheck's invalid or misaligned
accesses and hardware exceptions, racecheck's shared-memory races) as one `Access` with the
kernel, the PC and the source line the device code's line info names.

The report is lines behind a prefix (`========= ` by default); one error is a block of them
separated by a bare prefix line. Locations come in the forms the tool has printed over its
versions: `at kernel+0x1a0 in /path/file.py:62` (current), `at 0x1a0 in /path/file.py:62:kernel`
(older), `at 0x1a0 in kernel(...)` (no line info).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_PREFIX = re.compile(r"^=+ ?")
_LOCATION = re.compile(
    r"\bat (?P<where>\S+) in (?P<rest>.+?)(?:\s+\[(?P<hazards>[\d,]+) hazards?\])?$"
)
_FILE_LINE = re.compile(r"^(?P<file>.+?\.[A-Za-z0-9_]+):(?P<line>\d+)(?::(?P<function>.+))?$")
_THREAD = re.compile(r"by thread (?P<thread>\([\d, ]+\)) in block (?P<block>\([\d, ]+\))")
_ADDRESS = re.compile(r"^Address (?P<address>0x[0-9a-fA-F]+) (?P<what>.+)$")
_RACE = re.compile(
    r"^(?P<level>Error|Warning): Race reported between (?P<first>\w+) access (?P<at>at .+)$"
)
_RACE_SECOND = re.compile(r"^and (?P<second>\w+) access (?P<at>at .+)$")
_HAZARD = re.compile(r"^(?P<level>ERROR|WARNING|WARN)\S*: Potential (?P<kind>\w+) hazard")
_FRAME = re.compile(r"^Device Frame:\s*(?P<rest>.+)$")
_HOST_ERROR = re.compile(r"^Program hit (?P<error>.+)$")
_SUMMARY = re.compile(r"^(?:ERROR|RACECHECK|LEAK) SUMMARY: .+$")
_MEMCHECK_ERRORS = (
    "Invalid ",
    "Misaligned ",
    "Out-of-range ",
    "Warp ",
    "Lane ",
    "Illegal ",
    "Hardware ",
    "Malloc",
    "Free ",
    "Cuda ",
)


@dataclass(frozen=True)
class Location:
    kernel: str
    pc: str
    file: str | None = None
    line: int | None = None  # 1-based, in `file`


@dataclass(frozen=True)
class Access:
    """One error of the report, or several alike (same tool, what and source line)."""

    tool: str
    what: str  # "Invalid __global__ read of size 2 bytes", "race: Write then Read", ...
    location: Location | None
    other: Location | None = None  # racecheck: the other access of the pair
    thread: str = ""  # "(32,0,0) in block (3,0,0)": the first one reported
    detail: str = ""  # "Address 0x7f00 is out of bounds", "4096 hazards", the API error
    count: int = 1  # reports merged into this one
    # The device frames under the access (code inlined into the kernel): the access's PC may
    # name the inlined function's file (triton's language), a frame the kernel's own line.
    frames: tuple[Location, ...] = ()


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line.rstrip("\n")).strip()


def blocks(text: str) -> list[list[str]]:
    """The report's records: a header line (flush after the prefix) and the indented lines
    under it, up to a bare prefix line or the next header; the program's own lines skipped."""
    out: list[list[str]] = []
    current: list[str] = []
    for raw in text.splitlines():
        prefix = _PREFIX.match(raw)
        if prefix is None:
            continue  # the program's own output, interleaved
        rest = raw[prefix.end() :].rstrip()
        header = bool(rest) and not rest[0].isspace()
        if (not rest or header) and current:
            out.append(current)
            current = []
        if rest:
            current.append(rest.strip())
    if current:
        out.append(current)
    return out


def location(text: str) -> Location | None:
    """`at WHERE in REST`: WHERE is `kernel+0xPC` or `0xPC`; REST is `file:line`,
    `file:line:function` or a function's name."""
    found = _LOCATION.search(text)
    if found is None:
        return None
    where, rest = found.group("where"), found.group("rest").strip()
    kernel, _, pc = where.rpartition("+") if "+" in where else ("", "", where)
    source = _FILE_LINE.match(rest)
    if source is None:
        return Location(kernel or rest, pc)
    function = source.group("function") or ""
    return Location(kernel or function, pc, source.group("file"), int(source.group("line")))


def parse_report(text: str, tool: str) -> list[Access]:
    """Every error of one tool's report, in order (not merged)."""
    out: list[Access] = []
    for block in blocks(text):
        access = _memcheck(block, tool) or _race(block, tool) or _hazard(block, tool)
        if access is not None:
            out.append(access)
    return out


def _memcheck(block: list[str], tool: str) -> Access | None:
    head = block[0]
    host = _HOST_ERROR.match(head)
    if host is not None:
        return Access(tool, "the program hit a CUDA error", None, detail=host.group("error"))
    if not head.startswith(_MEMCHECK_ERRORS):
        return None
    where = next(
        (loc for line in block[1:] if not _FRAME.match(line) and (loc := location(line))), None
    )
    frames = tuple(loc for line in block[1:] if (loc := frame_location(line)) is not None)
    thread = next((m for line in block[1:] if (m := _THREAD.search(line))), None)
    details = [m.group(0) for line in block[1:] if (m := _ADDRESS.match(line))]
    details += [line for line in block[1:] if line.startswith("and is ")]
    return Access(
        tool,
        head.rstrip(":"),
        where,
        thread=f"{thread.group('thread')} in block {thread.group('block')}" if thread else "",
        detail=" ".join(details),
        frames=frames,
    )


def frame_location(line: str) -> Location | None:
    """A `Device Frame:` line: `kernel+0x1a0 in file.py:62` (current) or
    `file.py:62:function (function : 0x1a0)` (older)."""
    found = _FRAME.match(line)
    if found is None:
        return None
    rest = found.group("rest").strip()
    if " in " in rest:
        return location(f"at {rest}")
    source = _FILE_LINE.match(rest.split(" (", 1)[0])
    if source is None:
        return None
    return Location(
        source.group("function") or "", "", source.group("file"), int(source.group("line"))
    )


def _race(block: list[str], tool: str) -> Access | None:
    first = _RACE.match(block[0])
    if first is None:
        return None
    second = next((m for line in block[1:] if (m := _RACE_SECOND.match(line))), None)
    other = location(second.group("at")) if second else None
    hazards = _LOCATION.search(second.group("at") if second else first.group("at"))
    count = hazards.group("hazards") if hazards and hazards.group("hazards") else None
    what = f"race ({first.group('level').lower()}): {first.group('first')} access"
    if second is not None:
        what += f" and {second.group('second')} access"
    return Access(
        tool,
        what,
        location(first.group("at")),
        other,
        detail=f"{count} hazards" if count else "",
    )


def _hazard(block: list[str], tool: str) -> Access | None:
    """racecheck's hazard mode: a header, then one line per thread's access."""
    head = _HAZARD.match(block[0])
    if head is None:
        return None
    where = [loc for line in block[1:] if (loc := location(line)) is not None]
    return Access(
        tool,
        f"{head.group('kind')} hazard on shared memory",
        where[0] if where else None,
        where[1] if len(where) > 1 else None,
        detail=block[0].split(":", 1)[1].strip() if ":" in block[0] else "",
    )


def summary(text: str) -> list[str]:
    """The report's summary lines (`ERROR SUMMARY: 0 errors`, `RACECHECK SUMMARY: ...`)."""
    return [line for raw in text.splitlines() if _SUMMARY.match(line := strip_prefix(raw))]


def merged(accesses: list[Access]) -> list[Access]:
    """Reports of the same error at the same line (one per faulting thread) as one, counted."""
    found: dict[tuple[object, ...], Access] = {}
    for a in accesses:
        key = (a.tool, a.what, _line_key(a.location), _line_key(a.other))
        seen = found.get(key)
        found[key] = a if seen is None else replace(seen, count=seen.count + a.count)
    return list(found.values())


def _line_key(where: Location | None) -> tuple[str | None, int | None, str] | None:
    if where is None:
        return None
    return (where.file, where.line, where.kernel if where.line is None else "")
