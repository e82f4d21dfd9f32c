"""'Did you mean' suggestions."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str:
    """` (did you mean 'x'?)` or an empty string."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return f" (did you mean '{matches[0]}'?)" if matches else ""
