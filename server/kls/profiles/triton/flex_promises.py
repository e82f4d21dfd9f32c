"""Flex attention's two promises about a mask, decided from the mask itself and the kernel's
tile size (torch worker).

`BLOCKS_ARE_CONTIGUOUS` promises that the key blocks each query block visits (and, in the
backward, the query blocks each key block visits) are consecutive: the kernel then steps to
the next block instead of reading the block list, and a gap makes it read the wrong keys. The
partial and the full lists are walked separately, so each must be consecutive on its own.

`ROWS_GUARANTEED_SAFE` lets the forward kernels skip their guard for a row whose running
maximum is still -inf. The running maximum starts at -inf and a tile where a row sees no key
leaves it there; with the guard gone, the next rescale is exp2(-inf - -inf), NaN, and the row
stays NaN. So the promise holds when, for every row, the first BLOCK_N keys the kernel visits
(the first partial block's, else the first full block's, which are all unmasked) include one
the row attends to. A query block with no block at all runs no tile and is written as zeros
either way. Flex decoding restarts the running maximum at each split of the keys: there the
first tile of every split must hold a key for every row. Its splits walk the partial list in
BLOCK_N tiles, at most one a BLOCK_N of keys, a tile past the last key included (it sees
nothing); with the render's SPLIT_KV kls checks each split's first tile, else every tile a
split may start on. The backward kernel does not read the flag.

The mask is the instance's mask_mod over [Sq, Skv] for batch 0 and head 0, as the render's
block mask is made (batch and heads broadcast), in flex's blocks of 128, evaluated one strip of
128 query rows at a time (memory O(128 x Skv)); positions past Sq or Skv count as masked, as
create_block_mask pads them. A mask_mod that reads the batch or head index has no single
block mask: its promises stay undecided. A score_mod that returns -inf is not analysed.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROWS_SAFE = "ROWS_GUARANTEED_SAFE"
CONTIGUOUS = "BLOCKS_ARE_CONTIGUOUS"
PROMISES = (ROWS_SAFE, CONTIGUOUS)
BLOCK = 128  # flex's default block mask block size, as the render uses
EMPTY, PARTIAL, FULL = 0, 1, 2
_CACHE: dict[tuple[Any, ...], dict[str, str | None]] = {}
_READS: dict[tuple[Any, ...], bool] = {}


class Undecided(Exception):
    """kls cannot decide the promises for this mask; the message says why."""


def promises_of(op: str) -> tuple[str, ...]:
    """The promises the op's kernel reads."""
    return (CONTIGUOUS,) if op == "flex_attention_backward" else PROMISES


def promise_breaks(
    torch: Any,
    mask_mod: Callable[..., Any] | None,
    sq: int,
    skv: int,
    op: str,
    block_n: int,
    mask_ref: str | None = None,
    split_kv: int | None = None,
) -> dict[str, str | None]:
    """For each promise the op's kernel reads: None where the mask keeps it at this BLOCK_N
    (and, for decoding, this SPLIT_KV; None: any), else where it first breaks, in words.
    Raises Undecided. Cached by the mods file's content when `mask_ref` ("/abs/file.py:name")
    is given."""
    if mask_mod is None:  # flex's own one-block mask: every query attends to every key
        return dict.fromkeys(promises_of(op))
    key = _cache_key(mask_ref, sq, skv, op, block_n, split_kv)
    if key is not None and key in _CACHE:
        return dict(_CACHE[key])
    if reads_batch_or_head(torch, mask_mod, mask_ref):
        raise Undecided(
            "the mask_mod reads the batch or head index, and kls builds one block mask for "
            "batch 0, head 0"
        )
    classes = np.zeros(((sq + BLOCK - 1) // BLOCK, (skv + BLOCK - 1) // BLOCK), dtype=np.int8)
    unsafe: str | None = None
    splits = split_kv if op == "flex_decoding" else 0
    for qb, strip in _strips(torch, mask_mod, sq, skv):
        classes[qb] = _classify(strip, skv)
        if unsafe is None and ROWS_SAFE in promises_of(op):
            unsafe = _unsafe_row(strip, classes[qb], qb, skv, block_n, splits)
    found: dict[str, str | None] = {CONTIGUOUS: _first_gap(classes, op)}
    if ROWS_SAFE in promises_of(op):
        found = {ROWS_SAFE: unsafe, **found}
    if key is not None:
        _CACHE[key] = dict(found)
    return found


def _cache_key(ref: str | None, *rest: Any) -> tuple[Any, ...] | None:
    if not ref:
        return None
    try:
        digest = hashlib.sha256(Path(ref.rpartition(":")[0]).read_bytes()).hexdigest()
    except OSError:
        return None
    return (ref, digest, *rest)


def mask_reads_batch_or_head(
    torch: Any, mask_mod: Callable[..., Any] | None, mask_ref: str | None = None
) -> bool | None:
    """reads_batch_or_head, None where it cannot be told (or there is no mask_mod: False)."""
    if mask_mod is None:
        return False
    try:
        return reads_batch_or_head(torch, mask_mod, mask_ref)
    except Undecided:
        return None


def reads_batch_or_head(
    torch: Any, mask_mod: Callable[..., Any], mask_ref: str | None = None
) -> bool:
    """Whether the mask_mod's value depends on its batch or head argument (its traced graph
    uses them); a mod that cannot be traced is Undecided. Kept per mods file content when
    `mask_ref` is given (every flex render asks)."""
    key = _cache_key(mask_ref, "reads")
    if key is not None and key in _READS:
        return _READS[key]
    found = _traced_reads(torch, mask_mod)
    if key is not None:
        _READS[key] = found
    return found


def _traced_reads(torch: Any, mask_mod: Callable[..., Any]) -> bool:
    from torch.fx.experimental.proxy_tensor import make_fx

    # One tensor each (one proxy each), of shape (1,): a mask that indexes a captured table
    # with them (a document mask, ids[q_idx] == ids[kv_idx]) traces as it runs under vmap.
    indices = [torch.zeros((1,), dtype=torch.int32) for _ in range(4)]
    try:
        # Through a four-argument function: a mod may take more, with defaults.
        graph = make_fx(lambda b, h, q, kv: mask_mod(b, h, q, kv))(*indices).graph
    except Exception as exc:
        raise Undecided(f"the mask_mod could not be traced ({type(exc).__name__}: {exc})") from exc
    arguments = [n for n in graph.nodes if n.op == "placeholder"]
    return any(len(n.users) > 0 for n in arguments[:2])


def _strips(
    torch: Any, mask_mod: Callable[..., Any], sq: int, skv: int
) -> Iterator[tuple[int, np.ndarray]]:
    """(query block, its rows' mask over every key as a bool array), one block at a time."""
    zero = torch.zeros((), dtype=torch.int64)

    def one(q: Any, kv: Any) -> Any:
        return mask_mod(zero, zero, q, kv)

    grid = torch.vmap(torch.vmap(one, in_dims=(None, 0)), in_dims=(0, None))
    keys = torch.arange(skv)
    for qb in range((sq + BLOCK - 1) // BLOCK):
        rows = torch.arange(qb * BLOCK, min((qb + 1) * BLOCK, sq))
        yield qb, grid(rows, keys).to(torch.bool).numpy()


def block_classes(torch: Any, mask_mod: Callable[..., Any], sq: int, skv: int) -> np.ndarray:
    """[query block, key block] -> EMPTY, PARTIAL or FULL, as create_block_mask classes the
    blocks (its lists hold, in ascending order, the PARTIAL and the FULL ones)."""
    classes = np.zeros(((sq + BLOCK - 1) // BLOCK, (skv + BLOCK - 1) // BLOCK), dtype=np.int8)
    for qb, strip in _strips(torch, mask_mod, sq, skv):
        classes[qb] = _classify(strip, skv)
    return classes


def _classify(strip: np.ndarray, skv: int) -> np.ndarray:
    """Each key block of one query block's strip: EMPTY, PARTIAL or FULL (a block that runs
    past Sq or Skv is padded with masked positions, so it is never FULL)."""
    nkv = (skv + BLOCK - 1) // BLOCK
    padded = np.zeros((BLOCK, nkv * BLOCK), dtype=bool)
    padded[: strip.shape[0], :skv] = strip
    blocks = padded.reshape(BLOCK, nkv, BLOCK)
    seen, whole = blocks.any(axis=(0, 2)), blocks.all(axis=(0, 2))
    return np.where(whole, FULL, np.where(seen, PARTIAL, EMPTY)).astype(np.int8)


def _unsafe_row(
    strip: np.ndarray,
    classes: np.ndarray,
    qb: int,
    skv: int,
    block_n: int,
    split_kv: int | None,
) -> str | None:
    """The first row of this query block that sees no key in a tile the promise needs one in,
    in words (None: every row does). `split_kv`: 0 for the forward (its first tile only),
    else decoding's (None where it is not known: every tile it may start a split on)."""
    partial = np.flatnonzero(classes == PARTIAL)
    if len(partial) == 0:  # full blocks first (all keys), or no tile at all
        return None
    if split_kv == 0:
        tiles = [int(partial[0]) * BLOCK]
    else:
        tiles = _decode_tiles(partial, skv, block_n, split_kv)
    for start in tiles:
        stop = min(start + block_n, skv)
        seen = strip[:, start:stop].any(axis=1) if start < skv else np.zeros(len(strip), bool)
        blind = np.logical_not(seen)
        if blind.any():
            row = qb * BLOCK + int(np.argmax(blind))
            where = f"keys {start}-{start + block_n - 1}, key block {start // BLOCK}"
            if split_kv == 0:
                return (
                    f"query row {row} sees no key in the first BLOCK_N={block_n} keys its "
                    f"block visits ({where})"
                )
            return (
                f"query row {row} sees no key in the BLOCK_N={block_n} tile of {where}, "
                "where a split of flex decoding may start (each split starts its running "
                "maximum afresh)"
            )
    return None


def _decode_tiles(partial: np.ndarray, skv: int, block_n: int, split_kv: int | None) -> list[int]:
    """The key offsets of the tiles flex decoding may start a split on: its partial list
    walked in BLOCK_N tiles (a tile past the last key included), as many as the kernel's cap
    (one a BLOCK_N of keys); with SPLIT_KV known, only each split's first."""
    per_block = BLOCK // block_n
    listed = [int(p) * BLOCK + j * block_n for p in partial for j in range(per_block)]
    listed = listed[: max(_ceil(skv, block_n), 1)]
    if split_kv:
        listed = listed[:: max(_ceil(_ceil(skv, split_kv), block_n), 1)]
    return listed


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def _first_gap(classes: np.ndarray, op: str) -> str | None:
    """The first block whose partial or full list of visited blocks skips one, in words."""
    sides = [("query", "key", classes)]
    if op == "flex_attention_backward":
        sides.append(("key", "query", classes.T))
    for owner, visited, table in sides:
        for row in range(table.shape[0]):
            for kind in (PARTIAL, FULL):
                listed = np.flatnonzero(table[row] == kind)
                for a, b in itertools.pairwise(int(i) for i in listed):
                    if b != a + 1:
                        first, last = row * BLOCK, (row + 1) * BLOCK - 1
                        plural = "queries" if owner == "query" else "keys"
                        return (
                            f"{owner} block {row} ({plural} {first}-{last}) visits {visited} "
                            f"block {b} after {visited} block {a}"
                        )
    return None
