"""What each Triton template helper renders to and the mistake kls reports for it, in kls's
own words (docs/TEMPLATE_API.md, hover)."""

from __future__ import annotations

HELPER_DOCS: dict[str, tuple[str, str]] = {
    "def_kernel": (
        "the kernel's header, filled in last: imports, Inductor's decorator, `@triton.jit`, "
        "`def NAME(arg_A, ..., out_ptr0):`, the constexpr lines, `A = arg_A` aliases",
        "a name count other than the instance's inputs (KT803); a second call (KT805)",
    ),
    "size": (
        "one size of a buffer (None: the output) as a literal, or a symbol when dynamic",
        "a buffer def_kernel did not name (KT802)",
    ),
    "stride": (
        "one stride, or every stride joined by `, ` for tuple unpacking",
        "a buffer def_kernel did not name (KT802)",
    ),
    "load_input": (
        "a placeholder, later the index line and the `tl.load` of one input",
        "a second call for the same input (KT805)",
    ),
    "store_output": (
        "a placeholder, later the index line and `tl.store` (and fused epilogues)",
        "an index rank other than the output's (Inductor asserts: KT103 with the reason)",
    ),
    "make_load": ("a `tl.load` expression of a buffer at given indices", "-"),
    "modification": ("a score_mod/mask_mod subgraph inlined as Triton code", "-"),
    "gen_argdefs": ("the kernel's argument list (a placeholder)", "-"),
    "gen_defines": ("the constexpr lines of the config (a placeholder)", "-"),
}

INSTANCE_EXAMPLE = """\
[instances.mm_bf16]
profile = "triton"
template = "torch:_inductor/kernel/templates/triton_mm.py.jinja"
tensors.A = { shape = [256, 512], dtype = "bf16" }
tensors.B = { shape = [512, 128], dtype = "bf16", layout = "col" }
tensors.out = { shape = [256, 128], dtype = "bf16" }   # the output: `out`, else the last
num_warps = 4
num_stages = 3
device = { cc = 90, sm_count = 132 }   # the default: an H200

[instances.mm_bf16.vars]   # the config: Jinja names and the kernel's constexprs, in order
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
GROUP_M = 8
EVEN_K = true
ALLOW_TF32 = false
USE_FAST_ACCUM = false
ACC_TYPE = "tl.float32"
"""
