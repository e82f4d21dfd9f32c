"""The context names the CUTLASS profiles share, by what adds them."""

from __future__ import annotations

COMMON = frozenset({"kernel", "template", "input_reorder", "alpha", "beta"})
# The 2023 CUTLASSGemmTemplate.render's options, besides the buffers.
GEMM_2023 = frozenset(
    {
        "instance_definition",
        "instance_type",
        "argument_template",
        "epilogue_template",
        "should_swap_xw",
        "epilogue_args",
        "op_conf_name",
    }
)
# What render_gemm_arguments adds for the argument/epilogue sub-templates.
SUB_TEMPLATE = frozenset({"M", "N", "epilogue_arguments", "split_k"})
