"""On a GPU: flex_decoding with ROWS_GUARANTEED_SAFE, against kls's verdict. Sq = 1 (one new
token), B = H = 1, Skv not a multiple of 128, so the last key block has a BLOCK_N tile wholly
past Skv; with many splits (SPLIT_KV 66..264, Inductor's own choice for B*Hkv <= 4 on 132 SMs)
a split starts on that tile, sees no key, and (with the promise) writes NaN, which the
reduction carries into the output. "predicted_nan" is what a CPU model of the decode
kernel's loop predicted; "kls_says" is kls's verdict (None: kept) at that SPLIT_KV (any split
where the SPLIT_KV is Inductor's own choice).

Usage (repo root, torch 2.11, one GPU):
    python3 benchmarks/flex_decode_promise_gpu.py --out flex_decode_promise_gpu.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

CASES = [
    # name, Skv, mask (query 0 is token Skv-1), BLOCK_N, SPLIT_KV (None: Inductor's), predicted NaN
    ("window128_at_4000", 4000, "window128", 64, None, True),
    ("window128_at_4000_split4", 4000, "window128", 64, 4, False),
    ("window128_at_4000_split66", 4000, "window128", 64, 66, True),
    ("kv_from_2944_at_4000_bn32", 4000, "kv_from_2944", 32, 132, True),
    ("kv_from_2944_at_4000_bn64", 4000, "kv_from_2944", 64, None, True),
    ("window128_at_4096", 4096, "window128", 64, None, False),
    ("causal_at_4000", 4000, "causal", 64, None, False),
    ("sinks4_window256_at_4096_split4", 4096, "sinks_window", 64, 4, False),
    ("sinks4_window256_at_4096", 4096, "sinks_window", 64, None, True),
]


def mask_of(name: str, skv: int) -> Any:
    last = skv - 1
    return {
        "window128": lambda b, h, q, kv: (q + last >= kv) & (q + last - kv < 128),
        "kv_from_2944": lambda b, h, q, kv: kv >= 2944,
        "causal": lambda b, h, q, kv: q + last >= kv,
        "sinks_window": lambda b, h, q, kv: (kv < 4) | ((q + last >= kv) & (q + last - kv < 256)),
    }[name]


def run(torch: Any, case: tuple[Any, ...]) -> dict[str, Any]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    name, skv, mask_name, block_n, split_kv, predicted = case
    mask = mask_of(mask_name, skv)
    torch.manual_seed(0)
    q = torch.randn(1, 1, 1, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 1, skv, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    block = create_block_mask(mask, None, None, 1, skv, device="cuda")
    compiled = torch.compile(flex_attention, dynamic=False)
    outs = {}
    for safe in (False, True):
        options: dict[str, Any] = {"ROWS_GUARANTEED_SAFE": safe, "BLOCK_N": block_n}
        if split_kv is not None:
            options["SPLIT_KV"] = split_kv
        outs[safe] = compiled(q, k, v, block_mask=block, kernel_options=options).float()
    try:
        from kls.profiles.triton.flex_promises import promise_breaks

        verdict = promise_breaks(torch, mask, 1, skv, "flex_decoding", block_n, None, split_kv)
        kls = verdict["ROWS_GUARANTEED_SAFE"]
    except Exception as exc:  # kls not importable here
        kls = f"not run: {type(exc).__name__}: {exc}"
    return {
        "case": name,
        "BLOCK_N": block_n,
        "SPLIT_KV": split_kv or "Inductor's",
        "nan_with_promise": bool(torch.isnan(outs[True]).any()),
        "nan_without": bool(torch.isnan(outs[False]).any()),
        "predicted_nan": predicted,
        "kls_says": kls,
    }


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = [run(torch, c) for c in CASES]
    found = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(found, indent=1))
    for r in results:
        print(r)


if __name__ == "__main__":
    main()
