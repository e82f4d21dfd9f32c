"""kls's flex attention mods for the shipped flex instances (kls.toml names them as
`mask_mod = "mods.py:causal"`). A mask_mod takes the batch, head, query and key/value indices
and says whether the query attends to that key; a score_mod takes the score first and returns
the new score."""

from __future__ import annotations

from typing import Any


def causal(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    """Each query attends to itself and to the keys before it."""
    return q_idx >= kv_idx
