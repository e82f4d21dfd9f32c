"""Which instructions of a Triton kernel's PTX or SASS came from which line of the rendered
module, read from the listing's own line info: PTX's `.file`/`.loc` directives, and the
`//## File "...", line N` comments nvdisasm prints with `-g`.

The torch worker compiles the module from a file named `kernel.py` whose lines are the module's
(kls.profiles.triton.worker), so a line of that file is a line of the rendered module. Lines of
other files (Triton's own library, inlined) belong to no module line.
"""

from __future__ import annotations

import re
from typing import Literal

ListingKind = Literal["ptx", "sass"]
MODULE_FILE = "kernel.py"

_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_SASS_FILE = re.compile(r'File "([^"]*)", line (\d+)')
_SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/")


def module_lines(listing: str, kind: ListingKind) -> dict[int, list[int]]:
    """Module line (0-based) -> the listing lines (0-based) of its instructions."""
    if kind == "ptx":
        return _ptx_lines(listing)
    return _sass_lines(listing)


def _ptx_lines(listing: str) -> dict[int, list[int]]:
    lines = listing.split("\n")
    module_files = {
        m.group(1)
        for line in lines
        if (m := _PTX_FILE.match(line)) and m.group(2).endswith(MODULE_FILE)
    }
    out: dict[int, list[int]] = {}
    current: int | None = None
    for i, line in enumerate(lines):
        loc = _PTX_LOC.match(line)
        if loc is not None:
            current = int(loc.group(2)) - 1 if loc.group(1) in module_files else None
            continue
        if current is not None and _is_ptx_instruction(line):
            out.setdefault(current, []).append(i)
    return out


def _is_ptx_instruction(line: str) -> bool:
    text = line.strip()
    if not text or text.startswith(("//", ".", "$", "{", "}", ")", "(")):
        return False
    return not text.endswith(":")


def _sass_lines(listing: str) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    current: int | None = None
    for i, line in enumerate(listing.split("\n")):
        if line.lstrip().startswith("//##"):
            # `File "a", line 3 inlined at "kernel.py", line 40`: the module's line is the
            # outermost frame in kernel.py.
            frames = [(f, int(n)) for f, n in _SASS_FILE.findall(line)]
            frames += [(f, int(n)) for f, n in re.findall(r'at "([^"]*)", line (\d+)', line)]
            ours = [n for f, n in frames if f.endswith(MODULE_FILE)]
            current = ours[-1] - 1 if ours else None
            continue
        if current is not None and _SASS_INSTRUCTION.match(line):
            out.setdefault(current, []).append(i)
    return out
