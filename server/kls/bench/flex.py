"""Flex attention in the benchmark worker (torch and triton here, on the GPU): the block
mask's tensors made from the instance's mask_mod, and the reference the output is verified
against, torch's own flex_attention with the same mods over the same inputs in float32.

The mods are the project's Python, imported here as a user's reference is: the worker runs
only on an explicit `kls bench` or the Benchmark lens of a trusted workspace.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kls.bench.launch import StageError


def block_mask(torch: Any, flex: dict[str, Any], views: dict[str, Any]) -> Any:
    """The BlockMask the render was made with, on the GPU: the instance's mask_mod over
    [Sq, Skv] (batch and heads broadcast) in blocks of `flex["block"]`, or flex's own
    one-block mask where there is no mask_mod."""
    from torch.nn.attention import flex_attention as flex_api

    from kls.profiles.triton.flex import ModError, load_mod

    q, k = views[flex["q"]], views[flex["k"]]
    try:
        mask_mod = load_mod(flex.get("mask_mod"))
    except ModError as exc:
        raise StageError("reference", f"mask_mod: {exc}") from exc
    if mask_mod is None:
        return flex_api._create_empty_block_mask(q, k)
    sq, skv, block = q.shape[-2], k.shape[-2], int(flex.get("block", 128))
    return flex_api.create_block_mask(
        mask_mod, None, None, sq, skv, device=q.device, BLOCK_SIZE=block
    )


def block_filled(made: dict[str, Any]) -> dict[str, str]:
    """The kernel's arguments the worker fills from the block mask (their `fill` is
    "block:ATTR"): name -> the BlockMask attribute."""
    fills = {name: str(spec.get("fill", "")) for name, spec in made.items()}
    return {n: f.removeprefix("block:") for n, f in fills.items() if f.startswith("block:")}


def fill_blocks(mask: Any, made: dict[str, Any], views: dict[str, Any]) -> None:
    """Copy the block mask's tensors into the kernel's block arguments (`fill` block:ATTR);
    an argument whose shape differs from the mask's is a setup error, not a wrong result."""
    for name, attribute in block_filled(made).items():
        value = getattr(mask, attribute, None)
        view = views[name]
        if value is None:
            if view.numel():
                raise StageError("setup", f"the block mask has no {attribute} for {name}")
            continue
        if tuple(value.shape) != tuple(view.shape):
            raise StageError(
                "setup",
                f"{name}: the block mask's {attribute} is {tuple(value.shape)}, the kernel "
                f"takes {tuple(view.shape)}",
            )
        view.copy_(value)


def expected_output(torch: Any, flex: dict[str, Any], views: dict[str, Any], mask: Any) -> Any:
    """The forward's output as torch's flex_attention computes it in float32 from the
    kernel's own q, k and v (its mods, its block mask, grouped-query heads as declared), as
    a float64 NumPy array in the output's logical order."""
    from torch.nn.attention.flex_attention import flex_attention

    from kls.profiles.triton.flex import ModError, load_mod

    try:
        score_mod = load_mod(flex.get("score_mod"))
    except ModError as exc:
        raise StageError("reference", f"score_mod: {exc}") from exc
    q, k, v = (views[flex[n]].float() for n in ("q", "k", "v"))
    gqa = q.shape[1] != k.shape[1]
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile": as meant here
            out = flex_attention(q, k, v, score_mod=score_mod, block_mask=mask, enable_gqa=gqa)
    except torch.OutOfMemoryError as exc:
        scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * 4 / 2**30
        raise StageError(
            "reference",
            f"the float32 reference ran out of GPU memory (it holds several [B, H, Sq, Skv] "
            f"score tensors of {scores:.1f} GiB each): verify a smaller instance of the same "
            'template, or set reference = "none" to time this one without verifying',
        ) from exc
    return np.asarray(out.double().cpu().numpy(), dtype=np.float64)
