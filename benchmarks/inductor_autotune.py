"""Inductor's own max-autotune choice on the tune suite's shapes, timed beside cuBLAS.

For each shape (an instance's `[tune] shapes`, or --shapes), `x @ w` with X (M, K) row-major
and W (K, N) column-major bf16 is compiled by torch.compile(mode="max-autotune-no-cudagraphs")
with Inductor's default GEMM backends (ATen and Triton), and what Inductor chose is read from
the code it generated. Then the compiled call and cuBLAS (`torch.mm` on the same tensors) are
timed the same way, interleaved: CUDA events around each launch, a 256 MiB L2 flush before
each, the median of the samples. The answer is written after every shape (--out), so a run
stopped by a time limit keeps what it measured.

    python3 benchmarks/inductor_autotune.py --config templates/kls.toml \
        --instance torch211_sm90_bf16_4096 --out results.json [--wait-for FILE]

`--wait-for FILE`: compile every shape first, then wait until FILE exists before timing (so
the timing does not share the CPUs with builds started beside it).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def shapes_of(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    if args.shapes:
        return [tuple(int(v) for v in s.split("x")) for s in args.shapes]  # type: ignore[misc]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
    from kls.instances import load_instances
    from kls.tune.space import load_space

    spec = load_instances(args.config).instances[args.instance]
    return list(load_space(spec).shapes)


def choice_of(code: str) -> str:
    """What the generated wrapper calls for the product: ATen's mm or a Triton template (its
    block sizes are in Inductor's autotune log, which this run prints)."""
    if "extern_kernels.mm" in code:
        return "aten mm (cuBLAS)"
    m = re.search(r"(triton_\w*mm\w*)", code)
    return f"triton {m.group(1) if m else 'template'}"


def time_interleaved(fns: dict[str, Any], samples: int) -> dict[str, dict[str, float]]:
    import torch

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm up
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    for _ in range(samples):
        for name, fn in fns.items():
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    out = {}
    for name, t in times.items():
        q = statistics.quantiles(t, n=4)
        med = statistics.median(t)
        out[name] = {"median_ms": med, "spread": (q[2] - q[0]) / med, "samples": len(t)}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path, default=Path("templates/kls.toml"))
    p.add_argument("--instance", default="torch211_sm90_bf16_4096")
    p.add_argument("--shapes", nargs="*", help="MxNxK ... (default: the instance's tune shapes)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--wait-for", type=Path, default=None)
    args = p.parse_args()

    import torch
    from torch._inductor.utils import run_and_get_code

    shapes = shapes_of(args)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "backends": "ATEN,TRITON (Inductor's default max_autotune_gemm_backends)",
        "method": "CUDA events per launch, 256 MiB L2 flush before each, interleaved with "
        f"cuBLAS, {args.samples} samples each, median",
        "shapes": {},
    }
    compiled: dict[str, Any] = {}
    for m, n, k in shapes:
        key = f"{m}x{n}x{k}"
        torch.manual_seed(0)
        x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1).t()
        torch._dynamo.reset()
        fn = torch.compile(lambda a, b: a @ b, mode="max-autotune-no-cudagraphs", dynamic=False)
        t0 = time.perf_counter()
        out, code = run_and_get_code(fn, x, w)
        seconds = time.perf_counter() - t0
        ref = (x.double() @ w.double()).float()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        compiled[key] = (fn, x, w)
        result["shapes"][key] = {
            "choice": choice_of("\n".join(code)),
            "compile_s": round(seconds, 1),
            "rel_error": err,
        }
        print(key, result["shapes"][key], flush=True)
        args.out.write_text(json.dumps(result, indent=1))
    if args.wait_for is not None:
        while not args.wait_for.exists():
            time.sleep(1)
    for key, (fn, x, w) in compiled.items():
        timed = time_interleaved(
            {"inductor": lambda f=fn, a=x, b=w: f(a, b), "cublas": lambda a=x, b=w: torch.mm(a, b)},
            args.samples,
        )
        row = result["shapes"][key]
        row.update(timed)
        row["inductor_vs_cublas"] = timed["cublas"]["median_ms"] / timed["inductor"]["median_ms"]
        print(key, row["choice"], {k: round(v["median_ms"] * 1000, 1) for k, v in timed.items()},
              round(row["inductor_vs_cublas"], 3), flush=True)  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
