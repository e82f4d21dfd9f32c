"""Which template line produced each line of a rendered Triton module.

Inductor's render runs in another process and finishes its placeholders by string
replacement, so Jinja's own positions do not survive it. Triton templates are mostly literal
Python, which makes the map recoverable line by line:
1. a rendered line equal to a template line without `{{ }}` came from it (the longest common
   subsequence of the two texts, so repeated lines are matched in order);
2. between two such anchors, a template line with `{{ }}` spans matches a rendered line when
   its literal text matches with each span standing for any text (`M = {{size("A", 0)}}`
   matches `M = 256`), in order;
3. the lines a placeholder or helper expanded into (`<DEF_KERNEL>`'s imports and decorator,
   a `store_output`) belong to the `{{ }}` line of that gap that matched nothing, else to the
   nearest line with `{{ }}` before them; lines before the first anchor belong to
   `def_kernel`'s line.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass
from difflib import SequenceMatcher

_SPAN = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}")


def _literal(line: str) -> str | None:
    """The line's text when it has no Jinja span (None when it has one)."""
    return None if _SPAN.search(line) else line.strip()


def _pattern(line: str) -> re.Pattern[str]:
    parts = _SPAN.split(line.strip())
    return re.compile(".*?".join(re.escape(p) for p in parts) + r"\Z", re.DOTALL)


_DEF_KERNEL = re.compile(r"\{\{-?\s*def_kernel\(")
_DEF_LINE = re.compile(r"def \w+\((.*)\):$")


def _kernel_headers(t_lines: list[str], out: list[int | None], r0: int, r1: int) -> dict[int, int]:
    """The unplaced rendered lines right before a `def` line matched to a def_kernel line:
    the header it expanded into (imports, Inductor's decorator), by rendered line."""
    header: dict[int, int] = {}
    owner: int | None = None
    for r in reversed(range(r0, r1)):
        placed = out[r]
        if placed is not None:
            owner = placed if _DEF_KERNEL.search(t_lines[placed]) else None
        elif owner is not None:
            header[r] = owner
    return header


@dataclass(frozen=True)
class _Holder:
    """A template line with `{{ }}` spans, as step 2 matches rendered lines against it
    (made once an alignment, not once a comparison)."""

    pattern: re.Pattern[str] | None  # None: its first span closes on a later line
    literal: bool  # literal text around the spans, which alone places it
    names: tuple[str, ...]  # the string arguments of its first span's call
    def_kernel: bool

    @classmethod
    def of(cls, t_lines: list[str], t: int) -> _Holder:
        line = t_lines[t]
        closed = "}}" in line[line.index("{{") :]
        return cls(
            pattern=_pattern(line) if closed else None,
            literal=closed and bool(_SPAN.sub("", line).strip()),
            names=tuple(_string_arguments(_span_call(t_lines, t))),
            def_kernel=bool(_DEF_KERNEL.search(line)),
        )

    def matches(self, rendered: str) -> bool:
        """Whether the line rendered as `rendered` (stripped). A line that is one span and
        nothing else (or opens a span closed on a later line) matches any text, so it must
        also agree by name: a `def_kernel(...)` only the kernel's `def` whose arguments are
        its names (the branch's def_kernel that rendered), another call only a line naming
        one of its string arguments (`assign("B_STRIDE_N", ...)` the line of B_STRIDE_N,
        `store_output(("rm", "rn"), ...)` a line naming rm or rn)."""
        if self.pattern is not None:
            if not self.pattern.match(rendered):
                return False
            if self.literal:
                return True  # literal text around the spans already placed it
        if self.def_kernel:
            found = _DEF_LINE.match(rendered)
            if found is None:
                return False
            params = [p.strip() for p in found.group(1).split(",")]
            return [p.removeprefix("arg_") for p in params if p.startswith("arg_")] == list(
                self.names
            )
        return not self.names or any(name and name in rendered for name in self.names)


def _span_call(t_lines: list[str], t: int) -> ast.Call | None:
    """The call written in the first `{{ }}` of line `t` (through the line that closes it),
    without its filters; None when it is not one."""
    text = t_lines[t][t_lines[t].index("{{") + 2 :]
    k = t
    while "}}" not in text and k + 1 < len(t_lines) and k - t < 40:
        k += 1
        text += "\n" + t_lines[k]
    body = text.split("}}", 1)[0].strip().strip("-").strip()
    try:
        tree = ast.parse(body.split("|", 1)[0].strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    return tree.body if isinstance(tree.body, ast.Call) else None


def _string_arguments(call: ast.Call | None) -> list[str]:
    """The string literals among a call's positional arguments (one tuple level deep), else
    among its keyword arguments."""
    if call is None:
        return []

    def strings(nodes: list[ast.expr]) -> list[str]:
        out: list[str] = []
        for node in nodes:
            items = node.elts if isinstance(node, ast.Tuple) else [node]
            out += [
                i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
            ]
        return out

    return strings(list(call.args)) or strings([k.value for k in call.keywords])


def align(template: str, rendered: str) -> list[int | None]:
    """For each rendered line, the 0-based template line it came from (None: unknown)."""
    t_lines = template.split("\n")
    r_lines = rendered.split("\n")
    t_keys = [_literal(line) for line in t_lines]
    r_keys = [line.strip() for line in r_lines]
    # Lines with spans never match in step 1: give them keys no rendered line has. Blank
    # lines do match, so a block written twice (a piece a template joins in twice) is one
    # run with the literal lines around the copy that rendered, not broken at each blank.
    step1 = [k if k is not None else f"\x00{i}" for i, k in enumerate(t_keys)]
    matcher = SequenceMatcher(None, step1, r_keys, autojunk=False)
    out: list[int | None] = [None] * len(r_lines)
    anchors: list[tuple[int, int]] = [(-1, -1)]
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            out[block.b + k] = block.a + k
            anchors.append((block.a + k, block.b + k))
    anchors.append((len(t_lines), len(r_lines)))
    holders = {i: _Holder.of(t_lines, i) for i, line in enumerate(t_lines) if "{{" in line}
    spans = list(holders)
    first_call = next((i for i in spans if "def_kernel" in t_lines[i]), spans[0] if spans else 0)
    for (ta, ra), (tb, rb) in itertools.pairwise(anchors):
        prelude = first_call if ta < 0 else None
        _fill_gap(t_lines, r_lines, holders, out, (ta + 1, tb), (ra + 1, rb), prelude)
    return out


def _fill_gap(
    t_lines: list[str],
    r_lines: list[str],
    holders: dict[int, _Holder],
    out: list[int | None],
    t_gap: tuple[int, int],
    r_gap: tuple[int, int],
    prelude: int | None,
) -> None:
    """Rendered lines r0..r1 lie between the same anchors as template lines t0..t1."""
    (t0, t1), (r0, r1) = t_gap, r_gap
    inside = [t for t in range(t0, t1) if t in holders]
    matched: set[int] = set()
    cursor = 0
    for r in range(r0, r1):
        rendered = r_lines[r].strip()
        for k in range(cursor, len(inside)):
            if holders[inside[k]].matches(rendered):
                out[r] = inside[k]
                matched.add(inside[k])
                cursor = k + 1
                break
    expanding = [t for t in inside if t not in matched]
    if any(_DEF_KERNEL.search(t_lines[t]) for t in matched):
        # One def_kernel rendered; the others sit in branches that did not.
        expanding = [t for t in expanding if not _DEF_KERNEL.search(t_lines[t])]
    header = _kernel_headers(t_lines, out, r0, r1)
    last: int | None = prelude
    for r in range(r0, r1):
        if out[r] is not None:
            last = out[r]
            continue
        after = [t for t in expanding if last is None or t >= last]
        if r in header:  # def_kernel's imports and decorator, before its `def` line
            out[r] = header[r]
        elif prelude is not None and r < r1 and not matched:
            out[r] = prelude
        elif after:
            out[r] = after[0]
        elif last is not None and last in matched:  # the rest of the expansion just matched
            out[r] = last
        elif expanding:
            out[r] = expanding[-1]
        else:
            out[r] = last if last is not None else (t0 if t0 < len(t_lines) else None)
