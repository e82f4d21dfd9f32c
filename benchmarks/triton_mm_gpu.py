"""A Triton instance on the GPU, kernel against kernel: kls renders templates/kls.toml's
triton_mm instance through Inductor (the torch worker), the module's @triton.jit kernel is
launched on the instance's tensors (uniform[-1, 1]), verified against a float64 matmul, and
timed beside torch.mm (cuBLAS) the same way: a CUDA graph of N launches replayed, per-launch
time (L2 warm), median and spread over repeats, in one run.

    PYTHONPATH=server python3 benchmarks/triton_mm_gpu.py [--instance NAME] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kls.bench.graph_timing import l2_warm

ROOT = Path(__file__).resolve().parent.parent


def kernel_of(module_text: str) -> object:
    """The module's @triton.jit kernel, Inductor's autotuning decorator taken off."""
    from kls.profiles.triton.worker import template_kernel, without_template_decorator

    found = template_kernel(module_text)
    assert found is not None, "no Inductor template kernel in the module"
    name = found[0]
    folder = Path(tempfile.mkdtemp())
    (folder / "k.py").write_text(without_template_decorator(module_text))
    spec = importlib.util.spec_from_file_location("k", folder / "k.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instance", default="triton_mm_bf16_2048")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch
    import triton

    from kls.instances import load_instances
    from kls.sandbox.workers import render_isolated

    spec = load_instances(ROOT / "templates" / "kls.toml").instances[args.instance]
    rendered = render_isolated(spec)
    assert rendered.text is not None, [f.message for f in rendered.findings]
    kernel = kernel_of(rendered.text)
    a_spec, b_spec, out_spec = (spec.tensors[n] for n in ("A", "B", "out"))
    assert a_spec and b_spec and out_spec
    gen = torch.Generator(device="cuda").manual_seed(0)

    def tensor(t: Any) -> Any:
        dtype = getattr(torch, t.dtype.name)
        base = torch.empty_strided(t.shape, t.stride, dtype=dtype, device="cuda")
        return base.uniform_(-1, 1, generator=gen)

    a, b = tensor(a_spec), tensor(b_spec)
    out = torch.empty_strided(out_spec.shape, out_spec.stride, dtype=a.dtype, device="cuda")
    m, n = out_spec.shape
    bm, bn = spec.variables["BLOCK_M"], spec.variables["BLOCK_N"]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1)

    def launch() -> None:
        kernel[grid](a, b, out, num_warps=spec.num_warps, num_stages=spec.num_stages)  # type: ignore[index]

    launch()
    torch.cuda.synchronize()
    want = (a.double() @ b.double()).to(torch.float64)
    err = ((out.double() - want).abs().max() / want.abs().max()).item()
    ref = torch.empty_like(out)
    kls_t = l2_warm(launch).as_list()
    cublas_t = l2_warm(lambda: torch.mm(a, b, out=ref)).as_list()
    flops = 2 * m * n * a_spec.shape[1]
    row = {
        "instance": args.instance,
        "shape": [m, n, a_spec.shape[1]],
        "device": torch.cuda.get_device_name(0),
        "verified_max_rel_err": err,
        "verified": err < 1e-2,
        "method": "CUDA graph of 100 launches replayed, per-launch time, L2 warm; "
        "median/min/max of 15",
        "triton_template_us": kls_t,
        "cublas_us": cublas_t,
        "triton_tflops": flops / kls_t[0] / 1e6,
        "cublas_tflops": flops / cublas_t[0] / 1e6,
    }
    print(json.dumps(row, indent=1))
    if args.out:
        args.out.write_text(json.dumps(row, indent=1))
    return 0 if row["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
