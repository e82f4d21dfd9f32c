"""kls's Triton instances beside Inductor's own max-autotune choice and cuBLAS, kernel against
kernel: every side timed with kls.bench.graph_timing (CUDA-graph replays, L2 warm and L2
flushed) in one run, on the same uniform[-1, 1] inputs, each verified against float64 first.

- **kls**: the instance's module as kls renders it, launched through Inductor's own launcher
  (the benchmark request of the choice torch.compile generates with the instance's config
  pinned: benchmarks/triton_conformance.py), so the launch is Inductor's and the kernel kls's;
- **Inductor max-autotune**: `torch.compile(mode="max-autotune-no-cudagraphs")` of the op with
  Inductor's defaults (ATen and Triton backends), whatever it picks; the graph replays its
  kernels only, so the compiled wrapper's Python launch overhead is not counted;
- **cuBLAS**: `torch.mm`/`torch.bmm` with `out=`.

    PYTHONPATH=server python3 benchmarks/triton_kernel_vs_kernel.py --out FILE [--config TOML]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kls.bench.graph_timing import l2_flushed, l2_warm
from triton_conformance import OPS, inductor_module, launcher, template_of, tensors

ROOT = Path(__file__).resolve().parent.parent


def kls_side(torch: Any, spec: Any, inputs: list[Any], out: Any) -> Any:
    """A launch of kls's render of `spec` through Inductor's launcher."""
    from kls.profiles.triton.worker import template_kernel
    from kls.sandbox.workers import render_isolated

    rendered = render_isolated(spec)
    if rendered.text is None:
        raise RuntimeError(f"kls render failed: {[f.message for f in rendered.findings]}")
    choice, _pin = inductor_module(torch, spec, inputs)
    found = template_kernel(rendered.text)
    kernel = found[0] if found else choice.bmreq.kernel_name
    text = rendered.text
    # Made at each call: Inductor's run function takes the stream current when it is made,
    # and inside a graph capture that is the capture's stream.
    return lambda: launcher(choice, text, kernel, inputs, out)()


def inductor_side(torch: Any, op: Any, inputs: list[Any]) -> tuple[Any, str]:
    """Inductor's own max-autotune pick for the op, and what it picked (from its log)."""
    from torch._inductor import config

    torch._dynamo.reset()
    with config.patch({"max_autotune_gemm_backends": "ATEN,TRITON", "fx_graph_cache": False}):
        compiled = torch.compile(lambda a, b: op(a, b), mode="max-autotune-no-cudagraphs")
        compiled(*inputs)
    return (lambda: compiled(*inputs)), "torch.compile max-autotune"


def row_for(torch: Any, name: str, spec: Any) -> dict[str, Any]:
    op = getattr(torch, OPS[template_of(spec)])
    generator = torch.Generator(device="cuda").manual_seed(0)
    *inputs, out_like = tensors(torch, spec, generator)
    want = op(*(x.double() for x in inputs))
    scale = want.abs().max().item()
    outs = {side: torch.empty_like(out_like) for side in ("kls", "cuBLAS")}
    sides: dict[str, Any] = {
        "kls": kls_side(torch, spec, inputs, outs["kls"]),
        "cuBLAS": lambda: op(*inputs, out=outs["cuBLAS"]),
    }
    inductor, _ = inductor_side(torch, op, inputs)
    sides["Inductor max-autotune"] = inductor
    shape = [list(t.shape) for t in spec.tensors.values()]
    row: dict[str, Any] = {"case": name, "shapes": shape, "config": dict(spec.variables)}
    for side, fn in sides.items():
        got = fn() if side == "Inductor max-autotune" else (fn(), outs[side])[1]
        torch.cuda.synchronize()
        err = ((got.double() - want).abs().max() / scale).item()
        warm, flushed = l2_warm(fn), l2_flushed(fn)
        row[side] = {
            "max_rel_err": err,
            "l2_warm_us": warm.as_list(),
            "l2_flushed_us": flushed.as_list(),
        }
        print(
            f"{name:34s} {side:22s} err {err:.1e}  warm {warm.median_us:8.2f} us  "
            f"flushed {flushed.median_us:8.2f} us",
            flush=True,
        )
    return row


def geomeans(rows: list[dict[str, Any]]) -> dict[str, float]:
    summary = {}
    for side in ("kls", "Inductor max-autotune"):
        for key in ("l2_warm_us", "l2_flushed_us"):
            ratios = [r["cuBLAS"][key][0] / r[side][key][0] for r in rows if side in r]
            if ratios:
                summary[f"{side} vs cuBLAS, {key}"] = math.exp(
                    sum(map(math.log, ratios)) / len(ratios)
                )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=ROOT / "templates" / "kls.toml")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    from kls.instances import load_instances

    instances = {
        name: spec
        for name, spec in load_instances(args.config).instances.items()
        if _supported(spec)
    }
    rows = []
    for name, spec in instances.items():
        try:
            rows.append(row_for(torch, name, spec))
        except Exception as exc:
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            print(name, rows[-1]["error"], flush=True)
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "method": "CUDA graph replays (kls.bench.graph_timing): L2 warm 100 launches; "
        "L2 flushed 50 (flush, launch) pairs less 50 flushes; median/min/max of 15 replays",
        "rows": rows,
        "geomean_speedups": geomeans([r for r in rows if "error" not in r]),
    }
    print(json.dumps(result["geomean_speedups"], indent=1))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _supported(spec: Any) -> bool:
    try:
        return template_of(spec) in OPS
    except KeyError:
        return False


if __name__ == "__main__":
    sys.exit(main())
