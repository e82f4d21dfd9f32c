"""How Inductor's autotuner launches a rendered template module, read from its benchmark
request (torch worker): the arguments after the tensors, the workspace, the grid; and for
flex, the buffers its lowering made besides q, k and v, and how the benchmark fills them.

A flex kernel takes, in def_kernel's order, q, k, v, the statistics it writes (logsumexp and
row maxima; decode: its split partials; backward: also the gradients), the block mask's
tensors, then the output. The block mask's tensors are made from the instance's mask_mod on
the GPU (`fill = "block:<BlockMask attribute>"`); every other buffer gets seeded data (the
kernel writes the statistics before it reads them).
"""

from __future__ import annotations

from typing import Any

# The names each flex template's def_kernel gives its tensors, in order (the output follows).
FLEX_ARGS = {
    "flex_attention": (
        "Q", "K", "V", "LSE", "MAX",
        "KV_NUM_BLKS", "KV_IDX", "FULL_KV_NUM_BLKS", "FULL_KV_IDX",
    ),
    "flex_decoding": (
        "Q", "K", "V", "M", "L",
        "KV_NUM_BLKS", "KV_IDX", "FULL_KV_NUM_BLKS", "FULL_KV_IDX",
    ),
    "flex_attention_backward": (
        "Q", "K", "V", "LSE", "DELTA", "DO", "DQ", "DV",
        "KV_NUM_BLKS", "KV_IDX", "Q_NUM_BLKS", "Q_IDX",
        "FULL_KV_NUM_BLKS", "FULL_KV_IDX", "FULL_Q_NUM_BLKS", "FULL_Q_IDX",
    ),
}  # fmt: skip
QKV = ("Q", "K", "V")


def block_attribute(name: str) -> str | None:
    """The BlockMask attribute a block-mask argument holds (FULL_KV_IDX: full_kv_indices)."""
    for suffix, attribute in (("_NUM_BLKS", "num_blocks"), ("_IDX", "indices")):
        if name.endswith(suffix):
            return f"{name.removesuffix(suffix).lower()}_{attribute}"
    return None


def launch_of(template: str, bmreq: Any) -> dict[str, Any]:
    """The arguments after the tensors (its size arguments, the workspace, then the grid's
    three values, as TritonBenchmarkRequest passes them) and the workspace it allocates."""
    from torch._inductor.select_algorithm import WORKSPACE_ARG_PLACEHOLDER

    extra = [
        "workspace" if a == WORKSPACE_ARG_PLACEHOLDER else int(a) for a in list(bmreq.extra_args)
    ]
    return {
        "template": template,
        "kernel": str(bmreq.kernel_name),
        "extra_args": extra,
        "workspace_bytes": getattr(bmreq, "workspace_size", None),
        "workspace_zero": bool(getattr(bmreq, "workspace_zero_fill", False)),
    }


def _meta(meta: Any) -> dict[str, Any]:
    return {
        "shape": [int(s) for s in meta.sizes],
        "stride": [int(s) for s in meta.strides],
        "dtype": str(meta.dtype).removeprefix("torch."),
    }


def flex_launch(op: str, bmreq: Any) -> dict[str, Any]:
    """The flex kernel's launch: its arguments by def_kernel's names then `out`, and the
    buffers Inductor made (every one but Q, K and V) with their layouts and fills."""
    names = FLEX_ARGS[op]
    metas = list(bmreq.input_tensor_meta)
    if len(metas) != len(names):  # the render stands; only a benchmark needs the launch
        problem = f"Inductor's {op} kernel takes {len(metas)} input tensors, kls knows {names}"
        return {**launch_of(op, bmreq), "problem": problem}
    made: dict[str, dict[str, Any]] = {}
    for name, meta in zip(names, metas):
        if name in QKV:
            continue
        attribute = block_attribute(name)
        made[name] = {**_meta(meta), "fill": f"block:{attribute}" if attribute else ""}
    made["out"] = {**_meta(bmreq.output_tensor_meta), "fill": ""}
    return {**launch_of(op, bmreq), "tensors": [*names, "out"], "made": made}
