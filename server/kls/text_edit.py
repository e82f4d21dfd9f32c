"""The one edit that turns one text into another: the changed middle between their common
prefix and suffix (for an editor's edit, exactly what was typed or deleted)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def changed_middle(old: Sequence[object], new: Sequence[object]) -> tuple[int, int, int]:
    """(start, old_end, new_end): old[start:old_end] became new[start:new_end]. The prefix and
    suffix are found by bisection on slice comparisons (C-speed compares, O(log n) of them)."""
    limit = min(len(old), len(new))
    start = _largest(lambda n: old[:n] == new[:n], limit)
    # The common suffix, not overlapping the prefix.
    end = _largest(lambda n: old[len(old) - n :] == new[len(new) - n :], limit - start)
    return start, len(old) - end, len(new) - end


def _largest(same: Callable[[int], bool], limit: int) -> int:
    """The largest n <= limit with same(n) (same holds up to some n, then never)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if same(mid):
            low = mid
        else:
            high = mid - 1
    return low
