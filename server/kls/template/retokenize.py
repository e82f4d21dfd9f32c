"""Tokens of an edited text from the tokens of a text shortly before it, when the edit stays
inside one line of one template data token (the Python or C++ between Jinja tags, where
typing mostly happens): the same tokens with that one's text changed and the later ones moved
by the edit's length. Jinja's lexer (about 3 ms a keystroke on a 700-line template such as
Inductor's flex_backwards) runs only for other edits.

The answer is exactly `tokenize`'s (tests/core/test_retokenize.py compares them over random
edits). An edit is taken this way only when nothing Jinja reads can change:
- it lies strictly inside one data token whose ends stay where they were: on each side of the
  edit, text that is not whitespace, or a tag with no whitespace control (`-`, `+`) and no
  trim_blocks / lstrip_blocks in the environment;
- neither the old nor the new text of the edit holds a newline (lines keep their numbers);
- no `{{`, `{%` or `{#` appears in the new text around the edit (nothing opens a tag) and the
  texts hold no carriage return (the lexer rewrites those);
- the environment has no line statement or line comment prefix.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import jinja2

from kls.positions import LineIndex
from kls.template.tokens import Token, TokenizeResult, tokenize

_KEEP = 8  # recent texts remembered (a few open documents, a few versions each)
_RECENT: OrderedDict[tuple[int, str], TokenizeResult] = OrderedDict()
_LOCK = threading.Lock()  # checks tokenize on several threads
_OPENERS = ("{{", "{%", "{#")


def tokenize_edited(env: jinja2.Environment, source: str) -> TokenizeResult:
    """`tokenize(env, source)`, from a remembered text's tokens where the edit allows."""
    with _LOCK:
        recent = [(text, result) for (key, text), result in _RECENT.items() if key == id(env)]
    result = None
    if env.line_statement_prefix is None and env.line_comment_prefix is None:
        for old, old_result in reversed(recent):
            result = _patched(env, old, old_result, source)
            if result is not None:
                break
    if result is None:
        result = tokenize(env, source)
    if result.error is None:
        with _LOCK:
            _RECENT[(id(env), source)] = result
            _RECENT.move_to_end((id(env), source))
            while len(_RECENT) > _KEEP:
                _RECENT.popitem(last=False)
    return result


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix (slice comparisons: C speed)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the longest common suffix, at most `limit`."""
    low, high = 0, min(len(a), len(b), limit)
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            low = mid
        else:
            high = mid - 1
    return low


def _patched(
    env: jinja2.Environment, old: str, old_result: TokenizeResult, new: str
) -> TokenizeResult | None:
    """The tokens of `new` from those of `old`, or None when the edit is not a plain one."""
    if old_result.error is not None or old_result.shape is None or "\r" in new:
        return None
    prefix = common_prefix(old, new)
    if prefix == len(old) == len(new):
        return old_result
    suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
    old_end, new_end = len(old) - suffix, len(new) - suffix
    if "\n" in old[prefix:old_end] or "\n" in new[prefix:new_end]:
        return None
    window = new[max(prefix - 1, 0) : new_end + 1]
    if any(opener in window for opener in _OPENERS):
        return None
    at = _data_token_around(env, old_result.tokens, old, prefix, old_end)
    if at is None:
        return None
    delta = len(new) - len(old)
    tokens = old_result.tokens
    edited = tokens[at]
    moved = [Token(t.type, t.value, t.start + delta, t.end + delta) for t in tokens[at + 1 :]]
    data = Token("data", new[edited.start : edited.end + delta], edited.start, edited.end + delta)
    if edited.value.isspace() or data.value.isspace():
        return None  # the text's shape keeps a blank data token's text: it changes
    return TokenizeResult(
        [*tokens[:at], data, *moved],
        None,
        _moved_index(old_result.index, new, prefix, delta),
        old_result.shape,  # same raw tokens on the same lines; data values are not in it
    )


def _data_token_around(
    env: jinja2.Environment, tokens: list[Token], old: str, start: int, end: int
) -> int | None:
    """The index of the data token that holds old[start:end] strictly inside, and whose ends
    nothing strips differently after the edit (see `_fixed_start`, `_fixed_end`); None if
    there is none."""
    low, high = 0, len(tokens)
    while low < high:  # the last token starting before `start`
        mid = (low + high) // 2
        if tokens[mid].start < start:
            low = mid + 1
        else:
            high = mid
    at = low - 1
    if at < 0:
        return None
    token = tokens[at]
    if token.type != "data" or token.end <= end or token.start >= start:
        return None
    if not (_fixed_start(env, old, token, start) and _fixed_end(env, old, token, end)):
        return None
    return at


def _fixed_start(env: jinja2.Environment, old: str, token: Token, start: int) -> bool:
    """Whether the data token starts where it did whatever the edit: text that is not
    whitespace before the edit, or a tag before it that strips nothing."""
    if old[token.start : start].strip() or token.start == 0:
        return True
    before = old[max(token.start - 3, 0) : token.start]
    closes = before.endswith(("}}", "%}", "#}")) and not before.startswith("-")
    return closes and not before.startswith("+") and not env.trim_blocks


def _fixed_end(env: jinja2.Environment, old: str, token: Token, end: int) -> bool:
    """Whether the data token ends where it did whatever the edit: text that is not
    whitespace after the edit, or a tag after it that strips nothing."""
    if old[end : token.end].strip():
        return True
    after = old[token.end : token.end + 3]
    opens = after.startswith(("{{", "{%", "{#")) and after[2:] not in ("-", "+")
    return opens and not env.lstrip_blocks


def _moved_index(index: LineIndex, new: str, edit_start: int, delta: int) -> LineIndex:
    """`index` for `new`: the same lines, those after the edited one `delta` characters on."""
    moved = LineIndex.__new__(LineIndex)
    moved.text = new
    moved.starts = [s if s <= edit_start else s + delta for s in index.starts]
    return moved
