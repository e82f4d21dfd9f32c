"""What `kls tune` searches for a flex instance, read in the torch worker: Inductor's own
flex configs for the head dim and dtype on the device model (the list its lowering tries
under max-autotune), and which of flex's promises the instance's mask keeps.

Inductor's config tuples name their fields for the kernel option they set: forward
(block_m, block_n), decode (block_n), backward (block_m1, block_n1, block_m2, block_n2), each
with num_stages and num_warps.
"""

from __future__ import annotations

from typing import Any

from kls.profiles.triton.flex import decide_promises
from kls.profiles.triton.flex_promises import Undecided

# The heuristics' method for each flex template.
HEURISTIC = {
    "flex_attention": "get_flex_attention_fwd_configs",
    "flex_decoding": "get_flex_decode_configs",
    "flex_attention_backward": "get_flex_attention_bwd_configs",
}
LAUNCH_FIELDS = ("num_stages", "num_warps")


def as_options(config: Any) -> dict[str, Any]:
    """An Inductor flex config as kernel options: BLOCK_M for block_m, num_warps as is."""
    return {
        (k if k in LAUNCH_FIELDS else k.upper()): int(v)
        for k, v in vars(config).items()
        if isinstance(v, int)
    }


def flex_configs(torch: Any, req: dict[str, Any], exhaustive: bool) -> list[dict[str, Any]]:
    """Inductor's flex configs for the request's q (its head dim and dtype), as max-autotune
    lists them (`exhaustive`: its EXHAUSTIVE flex search space)."""
    from torch._inductor import config
    from torch._inductor.virtualized import V

    q = req["tensors"]["q"]
    dtype = getattr(torch, q["dtype"])
    space = "EXHAUSTIVE" if exhaustive else "DEFAULT"
    method = getattr(V.choices, HEURISTIC[req["op"]])
    with config.patch(max_autotune=True, max_autotune_flex_search_space=space):
        found = method(int(q["shape"][-1]), dtype, "cuda")
    unique: dict[str, dict[str, Any]] = {}
    for options in map(as_options, found):
        unique.setdefault(repr(sorted(options.items())), options)
    return list(unique.values())


def flex_tune_facts(torch: Any, req: dict[str, Any]) -> dict[str, Any]:
    """Inductor's configs and, for each promise the op's kernel reads, where the mask breaks
    it (None: kept) at the smallest BLOCK_N any of them uses (a larger tile starts at the
    same key and holds the smaller one's keys); "undecided" with why where kls cannot tell."""
    configs = flex_configs(torch, req, bool(req.get("exhaustive")))
    widths = [int(c["BLOCK_N"]) for c in configs if "BLOCK_N" in c]
    own = req.get("vars", {}).get("BLOCK_N")
    block_n = min([*widths, *([int(own)] if own is not None else [])], default=16)
    try:
        breaks = decide_promises(torch, req, block_n)
    except Undecided as exc:
        return {"configs": configs, "promises": {}, "undecided": str(exc)}
    return {"configs": configs, "promises": breaks}
