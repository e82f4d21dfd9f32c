"""On a GPU: does kls's ROWS_GUARANTEED_SAFE verdict (kls.profiles.triton.flex_promises) agree
with what torch.compile's flex kernel computes with the promise on? For each mask and BLOCK_N:
the same bf16 inputs ([1, 2, S, 64]) through torch.compile(flex_attention) with the promise
off and on, the rows that come out NaN with it on, the largest difference between the two
outputs, and kls's verdict (None: kept). kls is right where "kls_says" is None exactly when
no row is NaN and the outputs agree.

Usage (repo root, torch 2.11 on a GPU):
    python3 benchmarks/flex_promise_gpu.py --out flex_promise_gpu.json [--block-n 64 128]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

MASKS: dict[str, Callable[..., Any]] = {
    "causal": lambda b, h, q, kv: q >= kv,
    "sliding_window_128": lambda b, h, q, kv: (q >= kv) & (q - kv < 128),
    "prefix_and_window_512": lambda b, h, q, kv: (kv < 128) | ((q >= kv) & (q - kv < 512)),
    "first_query_block_sees_nothing": lambda b, h, q, kv: q >= 128,
    "every_row_attends_but_not_the_first_64_keys": lambda b, h, q, kv: kv >= 64,
}


def compare(torch: Any, name: str, mask_mod: Callable[..., Any], s: int, block_n: int) -> dict:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from kls.profiles.triton.flex_promises import promise_breaks

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, s, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    block = create_block_mask(mask_mod, None, None, s, s, device="cuda")
    compiled = torch.compile(flex_attention, dynamic=False)
    outs = {}
    for safe in (False, True):
        options = {"ROWS_GUARANTEED_SAFE": safe, "BLOCK_M": 64, "BLOCK_N": block_n}
        outs[safe] = compiled(q, k, v, block_mask=block, kernel_options=options).float()
    nan_rows = torch.isnan(outs[True]).any(-1)[0, 0].nonzero().flatten().tolist()
    diff = (outs[True] - outs[False]).abs().nan_to_num(nan=float("inf")).max().item()
    verdict = promise_breaks(torch, mask_mod, s, s, "flex_attention", block_n)
    return {
        "mask": name,
        "S": s,
        "BLOCK_N": block_n,
        "nan_rows_with_promise": len(nan_rows),
        "first_nan_rows": nan_rows[:5],
        "max_abs_diff": diff,
        "kls_says": verdict["ROWS_GUARANTEED_SAFE"],
    }


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--block-n", type=int, nargs="+", default=[64])
    args = parser.parse_args()
    results = [
        compare(torch, name, mask, args.size, block_n)
        for name, mask in MASKS.items()
        for block_n in args.block_n
    ]
    device = torch.cuda.get_device_name()
    found = {"torch": torch.__version__, "device": device, "results": results}
    Path(args.out).write_text(json.dumps(found, indent=1))
    for r in results:
        agrees = (r["kls_says"] is None) == (r["nan_rows_with_promise"] == 0)
        print(f"{'agrees' if agrees else 'DISAGREES'}: {r}")


if __name__ == "__main__":
    main()
