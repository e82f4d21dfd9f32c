"""kls's CUTLASS GEMM, Inductor's own max-autotune choice and cuBLAS, kernel against kernel:
every side timed with kls.bench.graph_timing (CUDA-graph replays, L2 warm and L2 flushed)
in one run, on the same bf16 uniform[-1, 1] inputs, each verified against float64 first.

kls's side is templates/kls.toml's torch211_sm90_bf16_4096 (torch 2.11's own 3.x template
with the op the tune suite chose), built once with `kls compile --mode build`: M, N, K and
the swizzle are runtime arguments, so the one library serves every shape.

    PYTHONPATH=server python3 benchmarks/kernel_vs_kernel.py --out results.json [--shapes ...]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kls.bench.graph_timing import l2_flushed, l2_warm

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(128, 4096, 4096), (128, 6144, 4096), (128, 4096, 14336), (2048, 4096, 4096)]
INSTANCE = "torch211_sm90_bf16_4096"


def kls_library() -> tuple[Any, Any]:
    from kls.compile import CompileOptions, compile_instance
    from kls.instances import load_instances

    spec = load_instances(ROOT / "templates" / "kls.toml").instances[INSTANCE]
    built = compile_instance(spec, CompileOptions(mode="build"))
    if not built.ok or built.artifact is None:
        raise SystemExit(f"kls build failed: {[f.message for f in built.findings]}")
    return spec, ctypes.CDLL(str(built.artifact))


def kls_call(spec: Any, lib: Any, shape: tuple[int, int, int], a: Any, b: Any, c: Any) -> Any:
    """A launch of kls's library at `shape`: pointers in def_kernel's order, then the sizes,
    offsets and swizzle the torch-2.11 entry takes (what Inductor's call_kernel passes)."""
    import torch

    from kls.bench import marshal
    from kls.render import render
    from kls.tune.candidates import at_shape

    shaped = render(at_shape(spec, shape))
    assert shaped.kernel is not None
    params = [p.buffer for p in shaped.params]
    extra = shaped.kernel.extra_args()  # type: ignore[attr-defined]
    fn = getattr(lib, spec.kernel_name)
    fn.restype = ctypes.c_int
    types = [getattr(ctypes, marshal.EXTRA_CTYPES[t]) for t, _ in extra]
    fn.argtypes = [ctypes.c_void_p] * len(params) + types + [ctypes.c_void_p] * 3
    tensors = {"X": a, "W": b, "Y": c}
    ptrs = [tensors[p].data_ptr() for p in params]
    values = [v for _, v in extra]
    size = ctypes.c_size_t(0)
    rc = fn(*ptrs, *values, ctypes.addressof(size), None, None)
    assert rc == 0, f"workspace query returned {rc}"
    workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")

    def launch() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        rc = fn(*ptrs, *values, None, workspace.data_ptr(), stream)
        if rc != 0:
            raise RuntimeError(f"kls kernel returned {rc}")

    return launch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    import torch
    import torch._inductor.config as inductor_config

    inductor_config.max_autotune_gemm_backends = "ATEN,TRITON"
    t0 = time.time()
    spec, lib = kls_library()
    print(f"kls build {time.time() - t0:.0f} s", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for m, n, k in SHAPES:
        a = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
        a = a.uniform_(-1, 1, generator=gen)
        b = (
            torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
            .uniform_(-1, 1, generator=gen)
            .t()
        )
        want = a.double() @ b.double()
        scale = want.abs().max().item()
        sides: dict[str, Any] = {}
        out_cublas = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        sides["cuBLAS"] = lambda a=a, b=b, o=out_cublas: torch.mm(a, b, out=o)
        out_kls = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        sides["kls CUTLASS"] = kls_call(spec, lib, (m, n, k), a, b, out_kls)
        if not args.no_inductor:
            compiled = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
            compiled(a, b)  # autotunes
            sides["Inductor max-autotune"] = lambda a=a, b=b, f=compiled: f(a, b)
        row: dict[str, Any] = {"shape": [m, n, k]}
        for name, fn in sides.items():
            fn()
            torch.cuda.synchronize()
            got = out_cublas if name == "cuBLAS" else out_kls if name == "kls CUTLASS" else None
            if got is None:
                got = compiled(a, b)
            err = ((got.double() - want).abs().max() / scale).item()
            warm = l2_warm(fn)
            flushed = l2_flushed(fn)
            row[name] = {
                "max_rel_err": err,
                "l2_warm_us": warm.as_list(),
                "l2_flushed_us": flushed.as_list(),
            }
            print(
                f"{m}x{n}x{k} {name:22s} err {err:.1e}  warm {warm.median_us:7.2f} us  "
                f"flushed {flushed.median_us:7.2f} us",
                flush=True,
            )
        rows.append(row)
    summary = {}
    for name in ("kls CUTLASS", "Inductor max-autotune"):
        for key in ("l2_warm_us", "l2_flushed_us"):
            ratios = [r["cuBLAS"][key][0] / r[name][key][0] for r in rows if name in r]
            if ratios:
                summary[f"{name} vs cuBLAS, {key}"] = math.exp(
                    sum(map(math.log, ratios)) / len(ratios)
                )
        for key in ("l2_warm_us", "l2_flushed_us"):
            if name == "kls CUTLASS" and all("Inductor max-autotune" in r for r in rows):
                ratios = [r["Inductor max-autotune"][key][0] / r[name][key][0] for r in rows]
                summary[f"kls CUTLASS vs Inductor, {key}"] = math.exp(
                    sum(map(math.log, ratios)) / len(ratios)
                )
    result = {
        "device": torch.cuda.get_device_name(0),
        "method": "CUDA graph replays (kls.bench.graph_timing): L2 warm 100 launches; "
        "L2 flushed 50 (flush, launch) pairs less 50 flushes; median/min/max of 15 replays",
        "rows": rows,
        "geomean_speedups": summary,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
