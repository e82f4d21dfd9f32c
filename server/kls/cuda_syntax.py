"""tree-sitter-cuda's parse of rendered CUDA: where it finds errors (KT501, kls.checks.syntax).

tree-sitter is slower than linear on some texts, can take gigabytes doing it and holds the GIL
throughout (a 200 KB text of `a<a<...` took 46 s and 16 GB): it runs only in render workers
(kls.sandbox.child), under their memory limit, a deadline and the parent's hard kill, never in
the server or the CLI. Light on imports for the same reason.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kls.text_edit import changed_middle

# Attribute-like macros tree-sitter cannot expand; blanked to spaces so columns stay put.
ATTRIBUTE_MACROS = re.compile(
    r"(?<!#define )\b(PT_EXPORT|CUTLASS_HOST_DEVICE|CUTLASS_DEVICE|CUTLASS_GLOBAL)\b"
)
# The same names found fast (a pattern that starts with its literals, not a lookbehind or \b,
# lets the regex engine scan for them: 0.19 -> ~0.05 ms on a rendered CUTLASS instance); the
# word start and the `#define ` before are checked on each match (`blank_attribute_macros`).
_MACRO_NAMES = re.compile(r"(?:PT_EXPORT|CUTLASS_HOST_DEVICE|CUTLASS_DEVICE|CUTLASS_GLOBAL)\b")
_WORD_CHAR = re.compile(r"\w")
# A parse's deadline (a clean parse of a rendered CUTLASS instance takes ~1 ms, 16 MB of
# realistic CUDA well under a second); past it the parse stops and KT501 says so.
PARSE_SECONDS = 2.0
# Texts up to this size keep their tree for the next parse of the same instance (an
# incremental parse); larger ones are parsed afresh and not kept.
INCREMENTAL_MAX_CHARS = 1024 * 1024

# (0-based row, node type, whether tree-sitter inserted it as missing), in tree order.
ErrorNode = tuple[int, str, bool]


_THREAD = threading.local()


def _parser() -> Any:
    """This thread's parser: a tree-sitter Parser must not parse in two threads at once (the
    server checks documents in a pool of threads)."""
    parser = getattr(_THREAD, "parser", None)
    if parser is None:
        import tree_sitter

        parser = _THREAD.parser = tree_sitter.Parser(_language())
    return parser


@functools.lru_cache(maxsize=1)
def _language() -> Any:
    import tree_sitter
    import tree_sitter_cuda

    return tree_sitter.Language(tree_sitter_cuda.language())


# The last parse of each key (an instance, in a render worker): text and tree, for an
# incremental parse of the next text. Not thread-safe: render workers are single-threaded.
_LAST: dict[str, tuple[bytes, Any]] = {}
_LAST_KEEP = 16


class ParseTimeout(Exception):
    """The parse passed its deadline (tree-sitter is slower than linear on some texts)."""


@dataclass(frozen=True)
class ParseOutcome:
    """What a bounded parse of a rendered text found: its error nodes, or why there are none
    to report (`stopped`: a limit ended the parse; `unavailable`: tree-sitter-cuda cannot be
    loaded, KT501 is off)."""

    errors: list[ErrorNode] = field(default_factory=list)
    stopped: str | None = None
    unavailable: str | None = None


def stopped_by_time(seconds: float) -> ParseOutcome:
    return ParseOutcome(stopped=f"tree-sitter was stopped after {seconds:g} s")


def parse_bounded(text: str, key: str | None, seconds: float) -> ParseOutcome:
    """`error_nodes` within `seconds`, as a ParseOutcome (never raises, but for MemoryError
    the caller's process may not survive: only render workers call this)."""
    if len(text) > INCREMENTAL_MAX_CHARS:
        key = None
    try:
        return ParseOutcome(error_nodes(text, key, time.monotonic() + seconds))
    except ParseTimeout:
        return stopped_by_time(seconds)
    except MemoryError:
        return ParseOutcome(stopped="tree-sitter ran out of memory")
    except (ImportError, OSError) as exc:
        return ParseOutcome(unavailable=str(exc))
    except Exception as exc:  # a parser failure is the parser's, not the template's
        return ParseOutcome(stopped=f"tree-sitter failed ({type(exc).__name__}: {exc})")


def error_nodes(
    text: str, key: str | None = None, deadline: float | None = None
) -> list[ErrorNode]:
    """Every error or missing node of `text`'s parse, outermost first, in tree order.

    With `key`, the parse reuses the tree of the key's previous text (tree-sitter's
    incremental parse: the edit is the changed middle between a common prefix and suffix);
    only a clean result is taken from it, and any error is looked for by a fresh parse, so
    the errors are exactly a fresh parse's. With `deadline` (time.monotonic()), a parse
    still running then stops with ParseTimeout."""
    blanked = blank_attribute_macros(text).encode("utf-8")
    parser = _parser()
    tree = _reparse(parser, key, blanked, deadline) if key is not None else None
    if tree is None:
        tree = _parse(parser, blanked, None, deadline)
    if key is not None:
        _LAST.pop(key, None)
        while len(_LAST) >= _LAST_KEEP:
            del _LAST[next(iter(_LAST))]
        _LAST[key] = (blanked, tree)
    if not tree.root_node.has_error:
        return []
    return [(n.start_point[0], n.type, n.is_missing) for n in _errors(tree.root_node)]


def blank_attribute_macros(text: str) -> str:
    """`ATTRIBUTE_MACROS.sub` with spaces of the same length (the same matches)."""
    out: list[str] = []
    at = 0
    for m in _MACRO_NAMES.finditer(text):
        start = m.start()
        if start > 0 and _WORD_CHAR.match(text, start - 1) is not None:
            continue  # no word start (`\b`)
        if text.endswith("#define ", 0, start):
            continue
        out.append(text[at:start])
        out.append(" " * (m.end() - start))
        at = m.end()
    if not out:
        return text
    out.append(text[at:])
    return "".join(out)


def _parse(parser: Any, data: bytes, old: Any, deadline: float | None) -> Any:
    with_old = () if old is None else (old,)
    if deadline is None:
        return parser.parse(data, *with_old)

    def past_deadline(*_: Any) -> bool:
        return time.monotonic() > deadline

    # tree-sitter calls progress_callback only when it reads the text through a callback.
    try:
        return parser.parse(
            lambda at, _point: data[at : at + 65536], *with_old, progress_callback=past_deadline
        )
    except ValueError as exc:  # what a halted parse raises
        parser.reset()  # else the next parse would resume this one, not parse its own text
        raise ParseTimeout(str(exc)) from None


def _reparse(parser: Any, key: str, new: bytes, deadline: float | None = None) -> Any:
    """An incremental parse of `new` from the key's last tree, if clean; else None."""
    last = _LAST.get(key)
    if last is None:
        return None
    old, tree = last
    if old == new:
        return None if tree.root_node.has_error else tree
    start, old_end, new_end = changed_middle(old, new)
    tree.edit(
        start, old_end, new_end, _point(old, start), _point(old, old_end), _point(new, new_end)
    )
    fresh = _parse(parser, new, tree, deadline)
    return None if fresh.root_node.has_error else fresh


def _point(data: bytes, offset: int) -> tuple[int, int]:
    return data.count(b"\n", 0, offset), offset - (data.rfind(b"\n", 0, offset) + 1)


def _errors(root: Any) -> Iterator[Any]:
    """Error and missing nodes, outermost first, in tree order: a walk with its own stack
    (rendered CUDA can nest deeper than Python's recursion limit)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            yield node
        elif node.has_error:
            stack.extend(reversed(node.children))
