"""Flex attention, kls's render against Inductor's own: the text, the outputs and the time.

For each case (templates/kls.toml's flex instances: forward bf16 causal 4x16x4096x128, and
decode bf16, one query against 4096 keys):

1. **kls's text**: the instance rendered by kls's torch worker (`render_isolated`: Inductor's
   lowering of the flex op over fake CUDA tensors, the device model in place of a GPU, kls's
   sandbox in place of Inductor's Jinja environment).
2. **Inductor's text** (`gpu`): `torch.compile(flex_attention)` on real tensors of the
   instance's shapes, the instance's mask_mod/score_mod, and the same kernel_options (its
   vars, num_warps, num_stages, BACKEND); `TritonTemplate.generate` is hooked to keep the
   module (`choice.bmreq.module_path`) of every choice generated for the template
   (Inductor's caches start empty, so it lowers). The config is pinned, so every choice is
   one text (counted).
   (`cpu`): the same lowering as kls's worker but with Inductor's own Jinja environment and
   template text, in this process: the sandbox's equivalence, checked without a GPU.
3. The texts are compared after normalising only what Inductor generates per process (the
   kernel's function name, inductor_meta's kernel_name, the Triton build's backend_hash); the
   first differing line is reported.
4. (`gpu`) Both modules run through Inductor's own launcher (the choice's benchmark request,
   `make_run_fn`; kls's with its module path swapped) on the same inputs (normal(0, 1), the
   block mask's real values); every output and written buffer compared bitwise.
5. (`gpu`) Timed with kls.bench.graph_timing's one method (a CUDA graph of N launches
   replayed, per launch, L2 warm; median, min, max over repeats), in one run: kls's kernel
   (kls's config), torch.compile(flex_attention) with kls's config (the whole op: for decode
   the split-KV reduction too), torch.compile(flex_attention) with Inductor's default config,
   optionally its max-autotune choice, and SDPA with the cuDNN and Flash backends.

    PYTHONPATH=server python3 benchmarks/triton_flex_gpu.py gpu --out flex_gpu.json  (H200)
    PYTHONPATH=server .venv/bin/python benchmarks/triton_flex_gpu.py cpu --out flex_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kls.bench.graph_timing import l2_warm
from triton_conformance import first_difference, normalize, with_module

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "templates" / "kls.toml"
CASES = ("triton_flex_attention_causal_bf16", "triton_flex_decoding_bf16")
# The CPU check covers the backward too (its GPU run needs the forward's outputs: not here).
CPU_CASES = (*CASES, "triton_flex_attention_backward_causal_bf16")


@dataclass(frozen=True)
class Case:
    """One flex instance: what kls renders and what torch.compile is asked for."""

    name: str
    op: str
    shapes: dict[str, list[int]]
    kernel_options: dict[str, Any]
    mask_mod: str | None
    score_mod: str | None
    request: dict[str, Any]  # kls's torch worker request (its text left out)

    @property
    def causal(self) -> bool:
        return self.mask_mod is not None

    def flops(self) -> float:
        """Forward attention's matmul FLOPs (4·B·H·Sq·Skv·D), halved under a causal mask."""
        b, h, sq, d = self.shapes["q"]
        skv = self.shapes["k"][2]
        full = 4.0 * b * h * sq * skv * d
        return full / 2 if self.causal and sq == skv else full


def load_cases(config: Path = CONFIG, names: tuple[str, ...] = CASES) -> list[Case]:
    from kls.instances import load_instances
    from kls.profiles.triton.flex import kernel_options
    from kls.profiles.triton.flex_parts import flex_op
    from kls.profiles.triton.flex_render import flex_request

    instances = load_instances(config).instances
    cases = []
    for name in names:
        spec = instances[name]
        op = flex_op(spec)
        assert op is not None, f"{name} is not a flex instance"
        request = flex_request(spec, op, "")
        shapes = {n: t["shape"] for n, t in request["tensors"].items()}
        cases.append(
            Case(name, op, shapes, kernel_options(request), spec.mask_mod, spec.score_mod, request)
        )
    return cases


def kls_text(case: Case) -> tuple[str, float]:
    """kls's render of the case's instance (its torch worker), and the seconds it took."""
    from kls.instances import load_instances
    from kls.sandbox.workers import render_isolated

    spec = load_instances(CONFIG).instances[case.name]
    start = time.perf_counter()
    rendered = render_isolated(spec)
    seconds = time.perf_counter() - start
    assert rendered.text is not None, [f.message for f in rendered.findings]
    return rendered.text, seconds


def compare(inductor: str, kls: str) -> dict[str, Any]:
    a, b = normalize(inductor), normalize(kls)
    return {
        "identical": a == b,
        "first_difference": first_difference(a, b),
        "kls_sha256": hashlib.sha256(b.encode()).hexdigest(),
        "inductor_sha256": hashlib.sha256(a.encode()).hexdigest(),
        "lines": len(b.split("\n")),
    }


# -- cpu: Inductor's own Jinja environment, no GPU ------------------------------------------


def inductor_env_text(case: Case) -> str:
    """The case's module from the same lowering kls's worker runs, with Inductor's own template
    text and Jinja environment (no sandbox), under kls's device model."""
    import torch

    from kls.profiles.triton import worker
    from kls.profiles.triton.flex import render_flex

    worker._patch_device(torch)
    worker._Device.props = worker.device_props(case.request.get("device", {}))
    return str(render_flex(torch, None, case.request)["module"])


def run_cpu(cases: list[Case]) -> dict[str, Any]:
    rows = []
    for case in cases:
        kls, seconds = kls_text(case)
        row = {"case": case.name, "op": case.op, "kls_render_s": round(seconds, 3)}
        rows.append(row | compare(inductor_env_text(case), kls))
    return {"mode": "cpu", "rows": rows}


# -- gpu: torch.compile, bitwise outputs, timings -------------------------------------------


@contextlib.contextmanager
def generated(name: str) -> Iterator[list[Any]]:
    """Every choice Inductor generates for the template `name` while active."""
    from torch._inductor.select_algorithm import TritonTemplate

    original = TritonTemplate.generate
    seen: list[Any] = []

    def generate(template: Any, *args: Any, **kwargs: Any) -> Any:
        choice = original(template, *args, **kwargs)
        if template.name == name and hasattr(choice, "bmreq"):
            seen.append(choice)
        return choice

    TritonTemplate.generate = generate  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        TritonTemplate.generate = original  # type: ignore[method-assign]


def _mod(ref: str | None) -> Callable[..., Any] | None:
    from kls.profiles.triton.flex import load_mod

    return load_mod(ref)


def inputs(torch: Any, case: Case) -> tuple[Any, Any, Any, Any]:
    """q, k, v (normal(0, 1), seeded) and the block mask (None: flex's own)."""
    from torch.nn.attention.flex_attention import create_block_mask

    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = [
        torch.randn(case.shapes[n], generator=gen, device="cuda", dtype=torch.bfloat16)
        for n in ("q", "k", "v")
    ]
    mask = _mod(case.mask_mod)
    sq, skv = case.shapes["q"][2], case.shapes["k"][2]
    block = create_block_mask(mask, None, None, sq, skv, device="cuda") if mask else None
    return (*qkv, block)


def compiled_flex(torch: Any, options: dict[str, Any] | None, mode: str | None = None) -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=False, mode=mode)

    def call(q: Any, k: Any, v: Any, block: Any, score: Any) -> Any:
        gqa = q.shape[1] != k.shape[1]
        return compiled(q, k, v, score, block, kernel_options=options, enable_gqa=gqa)

    return call


def buffers(torch: Any, metas: list[Any], ints: list[Any], device: str = "cuda") -> list[Any]:
    """Tensors for a benchmark request's input metas: floats normal(0, 1) (seeded), int32 the
    block mask's own tensors where the shapes agree (else zeros)."""
    gen = torch.Generator(device=device).manual_seed(1)
    pool = [t for t in ints if t is not None]
    out = []
    for meta in metas:
        t = torch.empty_strided(meta.sizes, meta.strides, dtype=meta.dtype, device=device)
        if t.dtype.is_floating_point:
            t.normal_(generator=gen)
        else:
            match = next((p for p in pool if list(p.shape) == list(meta.sizes)), None)
            t.copy_(match) if match is not None else t.zero_()
            if match is not None:
                pool.remove(match)
        out.append(t)
    return out


def same_bits(torch: Any, a: Any, b: Any) -> bool:
    """Equal bit for bit (NaN included: floats compared as integers of their width)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        width = as_int[a.element_size()]
        return bool(torch.equal(a.view(width), b.view(width)))
    return bool(torch.equal(a, b))


def bitwise(torch: Any, bmreq: Any, kls: Any, block: Any) -> tuple[bool, Callable[[], None]]:
    """Both modules on the same inputs: every buffer (output and written inputs) equal bit for
    bit; and kls's launch, for timing."""
    ints = [getattr(block, a, None) for a in ("kv_num_blocks", "kv_indices")]
    ints += [getattr(block, a, None) for a in ("full_kv_num_blocks", "full_kv_indices")]
    base = buffers(torch, list(bmreq.input_tensor_meta), ints)
    meta = bmreq.output_tensor_meta
    results = []
    for request in (bmreq, kls):
        ins = [t.clone() for t in base]
        out = torch.zeros(meta.sizes, dtype=meta.dtype, device="cuda")
        request.make_run_fn(*ins, out=out)()
        torch.cuda.synchronize()
        results.append([*ins, out])
    same = all(same_bits(torch, a, b) for a, b in zip(*results, strict=True))

    def launch() -> None:
        # made per call: the launcher binds the current stream (the graph's while capturing)
        kls.make_run_fn(*results[1][:-1], out=results[1][-1])()

    return same, launch


def timed(fn: Callable[[], Any], flops: float) -> dict[str, Any]:
    try:
        t = l2_warm(fn)
    except Exception as exc:  # a side that cannot run here is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"us": t.as_list(), "tflops": round(flops / (t.median_us * 1e-6) / 1e12, 1)}


def sdpa(torch: Any, backend: Any, q: Any, k: Any, v: Any, causal: bool) -> Callable[[], Any]:
    from torch.nn.attention import sdpa_kernel

    def call() -> Any:
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def run_gpu_case(torch: Any, case: Case, max_autotune: bool) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    q, k, v, block = inputs(torch, case)
    score = _mod(case.score_mod)
    kls, render_s = kls_text(case)
    torch._dynamo.reset()  # Inductor's on-disk caches are new and empty (main): it lowers
    with generated(case.op) as seen:
        pinned = compiled_flex(torch, case.kernel_options)
        pinned(q, k, v, block, score)
        torch.cuda.synchronize()
    assert seen, f"torch.compile generated no {case.op} choice"
    texts = {Path(c.bmreq.module_path).read_text() for c in seen}
    inductor = Path(seen[0].bmreq.module_path).read_text()
    row: dict[str, Any] = {"case": case.name, "op": case.op, "kls_render_s": round(render_s, 3)}
    row |= {"kernel_options": case.kernel_options, "inductor_texts": len(texts)}
    row |= compare(inductor, kls)
    # The block mask's real values feed the kernels (flex's own one-block mask for none).
    from torch.nn.attention.flex_attention import _create_empty_block_mask

    mask = block if block is not None else _create_empty_block_mask(q, k)
    same, kls_launch = bitwise(torch, seen[0].bmreq, with_module(seen[0].bmreq, kls), mask)
    row["bitwise_equal"] = same
    flops = case.flops()
    times = {"kls_kernel": timed(kls_launch, flops)}
    times["compiled_kls_config"] = timed(lambda: pinned(q, k, v, block, score), flops)
    torch._dynamo.reset()
    default = compiled_flex(torch, None)
    times["compiled_inductor_default"] = timed(lambda: default(q, k, v, block, score), flops)
    if max_autotune:
        torch._dynamo.reset()
        tuned = compiled_flex(torch, None, mode="max-autotune-no-cudagraphs")
        times["compiled_max_autotune"] = timed(lambda: tuned(q, k, v, block, score), flops)
    for label, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", None)):
        chosen = backend if backend is not None else SDPBackend.FLASH_ATTENTION
        times[label] = timed(sdpa(torch, chosen, q, k, v, case.causal), flops)
    row["timings"] = times
    row["flops"] = flops
    return row


def run_gpu(cases: list[Case], max_autotune: bool) -> dict[str, Any]:
    import torch
    import triton

    return {
        "mode": "gpu",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "method": "CUDA graph of 100 launches replayed, per launch, L2 warm; median, min, max "
        "of 15 replays (kls.bench.graph_timing)",
        "rows": [run_gpu_case(torch, c, max_autotune) for c in cases],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("gpu", "cpu"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--case", action="append", help="an instance of templates/kls.toml")
    parser.add_argument("--max-autotune", action="store_true", help="also time max-autotune")
    args = parser.parse_args(argv)
    # Inductor's caches start empty, so torch.compile lowers (and generates) every time; its
    # force_disable_caches would be printed into the module's inductor_meta, unlike kls's.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="kls-flex-inductor-")
    default = CPU_CASES if args.mode == "cpu" else CASES
    cases = load_cases(names=tuple(args.case) if args.case else default)
    result = run_cpu(cases) if args.mode == "cpu" else run_gpu(cases, args.max_autotune)
    args.out.write_text(json.dumps(result, indent=2))
    for row in result["rows"]:
        status = "identical" if row["identical"] else f"differs: {row['first_difference']}"
        extra = f", bitwise {row['bitwise_equal']}" if "bitwise_equal" in row else ""
        print(f"{row['case']}: {status}{extra}", file=sys.stderr)
    return 0 if all(r["identical"] and r.get("bitwise_equal", True) for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
