"""Flex attention's two promises about a mask, decided from the mask itself (torch worker).

`ROWS_GUARANTEED_SAFE` promises that every query row attends to at least one key: the kernel
then skips its guard for a row whose running maximum is still -inf, and a row with no key
turns into NaN. `BLOCKS_ARE_CONTIGUOUS` promises that the key blocks each query block visits
(and, in the backward, the query blocks each key block visits) are consecutive: the kernel
then steps to the next block instead of reading the block list, and a gap makes it read the
wrong keys. Neither is checked by torch; a wrong promise is a silently wrong result.

The mask is the instance's mask_mod over [Sq, Skv] for batch 0 and head 0, as the render's
block mask is made (create_block_mask with B and H broadcast), in flex's default blocks of
128. Rows are decided exactly: a query block with a full key block is safe throughout, one
with no block is not, and only the rows of query blocks with partial blocks alone are
evaluated, element by element, over those blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

ROWS_SAFE = "ROWS_GUARANTEED_SAFE"
CONTIGUOUS = "BLOCKS_ARE_CONTIGUOUS"
PROMISES = (ROWS_SAFE, CONTIGUOUS)
BLOCK = 128  # flex's default block mask block size, as the render uses
PLURAL = {"query": "queries", "key": "keys"}


def promise_breaks(
    torch: Any, mask_mod: Callable[..., Any] | None, sq: int, skv: int, backward: bool
) -> dict[str, str | None]:
    """For each promise: None where the mask keeps it, else where it first breaks, in words."""
    if mask_mod is None:  # flex's own mask: every query attends to every key
        return {ROWS_SAFE: None if skv > 0 else "there are no keys", CONTIGUOUS: None}
    from torch.nn.attention.flex_attention import create_block_mask

    blocks = create_block_mask(mask_mod, None, None, sq, skv, device="cpu", BLOCK_SIZE=BLOCK)
    lists = [("key", "query", blocks.kv_num_blocks, blocks.kv_indices)]
    lists.append(("key", "query", blocks.full_kv_num_blocks, blocks.full_kv_indices))
    if backward:
        lists.append(("query", "key", blocks.q_num_blocks, blocks.q_indices))
        lists.append(("query", "key", blocks.full_q_num_blocks, blocks.full_q_indices))
    gap = next((g for g in (_first_gap(*entry) for entry in lists) if g), None)
    return {ROWS_SAFE: _first_unsafe_row(torch, mask_mod, blocks, sq, skv), CONTIGUOUS: gap}


def _first_gap(visited: str, owner: str, counts: Any, indices: Any) -> str | None:
    """The first block whose list of visited blocks skips one, in words (None: none does)."""
    if counts is None or indices is None:
        return None
    for row in range(int(counts.shape[-1])):
        n = int(counts[0, 0, row])
        listed = [int(i) for i in indices[0, 0, row, :n]]
        for a, b in itertools.pairwise(listed):
            if b != a + 1:
                return (
                    f"{owner} block {row} ({PLURAL[owner]} {row * BLOCK}-"
                    f"{(row + 1) * BLOCK - 1}) visits "
                    f"{visited} block {b} after {visited} block {a}"
                )
    return None


def _first_unsafe_row(
    torch: Any, mask_mod: Callable[..., Any], blocks: Any, sq: int, skv: int
) -> str | None:
    """The first query row that attends to no key, in words (None: every row attends)."""
    partial, full = blocks.kv_num_blocks[0, 0], blocks.full_kv_num_blocks
    for qb in range((sq + BLOCK - 1) // BLOCK):
        if full is not None and int(full[0, 0, qb]) > 0:
            continue
        n = int(partial[qb])
        if n == 0:
            return f"query row {qb * BLOCK} attends to no key (its whole block is masked)"
        rows = torch.arange(qb * BLOCK, min((qb + 1) * BLOCK, sq))
        cols = torch.cat(
            [
                torch.arange(int(kb) * BLOCK, min((int(kb) + 1) * BLOCK, skv))
                for kb in blocks.kv_indices[0, 0, qb, :n]
            ]
        )
        attends = _evaluate(torch, mask_mod, rows, cols).any(dim=1)
        if not bool(attends.all()):
            row = int(rows[int((~attends).nonzero()[0, 0])])
            return f"query row {row} attends to no key"
    return None


def _evaluate(torch: Any, mask_mod: Callable[..., Any], rows: Any, cols: Any) -> Any:
    """mask_mod over rows x cols for batch 0 and head 0, vectorised as flex does (vmap over
    the key index, then the query index)."""
    zero = torch.zeros((), dtype=torch.int64)

    def one(q: Any, kv: Any) -> Any:
        return mask_mod(zero, zero, q, kv)

    grid = torch.vmap(torch.vmap(one, in_dims=(None, 0)), in_dims=(0, None))
    return grid(rows, cols).to(torch.bool)
