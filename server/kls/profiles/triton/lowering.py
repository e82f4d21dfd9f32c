"""Render a Triton template through Inductor's own lowering of its op, in the torch worker.

Inductor passes a template more than its config: the order of the config values (they become
the kernel's constexpr lines in that order), a workspace for TMA descriptors, epilogue and
prefix arguments, the output layout. kls takes all of that from Inductor itself: for a
template whose op it knows (mm, bmm, persistent-TMA mm), it runs Inductor's lowering of the op
(`tuned_mm`, `tuned_bmm`) over the instance's input buffers under max-autotune's settings, and
when the lowering asks the template for a choice, generates it from the editor's text with the
instance's config (its `vars`, `num_warps`, `num_stages`) in place of Inductor's values. Every
other template the lowering tries is declined, so nothing else is rendered or compiled.

Where the lowering never asks for the template (Inductor would not use it for these tensors) or
fails before it does, the caller falls back to calling the template's `generate` directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from kls.profiles.triton.generate_hook import answering


@dataclass(frozen=True)
class Lowering:
    """Inductor's lowering that reaches a template, and the settings under which it does."""

    module: str
    function: str
    settings: dict[str, Any] = field(default_factory=dict)
    out_dtype: bool = False  # the op takes its output's dtype (fp8 in, bf16 out): pass it

    def resolve(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), self.function)  # type: ignore[no-any-return]


# Templates by Inductor's registered name: the lowering that asks for them.
LOWERINGS: dict[str, Lowering] = {
    "mm": Lowering("torch._inductor.kernel.mm", "tuned_mm"),
    "mm_persistent_tma": Lowering(
        "torch._inductor.kernel.mm",
        "tuned_mm",
        {"triton.enable_persistent_tma_matmul": True},
    ),
    "bmm": Lowering("torch._inductor.kernel.bmm", "tuned_bmm"),
    "scaled_mm_device_tma_epilogue_scaling": Lowering(
        "torch._inductor.kernel.mm",
        "tuned_scaled_mm",
        {"triton.enable_persistent_tma_matmul": True},
        out_dtype=True,
    ),
    "scaled_mm_device_tma_main_loop_scaling": Lowering(
        "torch._inductor.kernel.mm",
        "tuned_scaled_mm",
        {"triton.enable_persistent_tma_matmul": True},
        out_dtype=True,
    ),
    "mm_plus_mm": Lowering("torch._inductor.kernel.mm_plus_mm", "tuned_mm_plus_mm"),
}

# Only the Triton templates, one config each (kls's config replaces it).
COMMON_SETTINGS = {"max_autotune_gemm_backends": "TRITON", "test_configs.max_mm_configs": 1}


def pinned_kwargs(inductor: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    """generate()'s arguments as Inductor passes them, the instance's config in place of
    Inductor's values (a value Inductor does not pass is added after its own)."""
    kwargs = dict(inductor)
    kwargs["num_warps"] = int(req["num_warps"])
    kwargs["num_stages"] = int(req["num_stages"])
    kwargs.update(req.get("vars", {}))
    return kwargs


class _Pin:
    """The lowering's generate answered (generate_hook): the instance's template is
    generated once, from `template` (the editor's text) with the pinned config; every other
    request is declined."""

    def __init__(self, template: Any, req: dict[str, Any]) -> None:
        self.template = template
        self.req = req
        self.choice: Any = None
        self.asked = False

    def __call__(self, original: Callable[..., Any], template: Any, **kwargs: Any) -> Any:
        if template.name != self.template.name or self.asked:
            return None
        self.asked = True
        self.choice = original(self.template, **pinned_kwargs(kwargs, self.req))
        return self.choice


class _Record:
    """The lowering's generate answered (generate_hook): the configs asked of the template
    `name` are recorded and every request declined, so nothing is rendered."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.configs: list[dict[str, Any]] = []

    def __call__(self, original: Callable[..., Any], template: Any, **kwargs: Any) -> Any:
        if template.name == self.name:
            self.configs.append(config_of(kwargs))
        return None


def config_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A config as kls.toml holds it: num_warps, num_stages and the template's variables
    (generate()'s plain values: numbers, booleans, strings), in Inductor's order."""
    keep = (bool, int, float, str)
    config: dict[str, Any] = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    config.update(
        (k, v)
        for k, v in kwargs.items()
        if k not in config and k not in GENERATE_PLUMBING and isinstance(v, keep)
    )
    return config


# generate()'s arguments that are not the template's config.
GENERATE_PLUMBING = frozenset(
    {"generate_with_caching", "hint_override", "prefix_args", "suffix_args", "epilogue_fn_hash"}
)


def inductor_configs(
    template: Any, nodes: list[Any], exhaustive: bool = False
) -> list[dict[str, Any]]:
    """The configs Inductor's lowering would try for `template` over `nodes` (its template
    heuristics for the device model and these shapes; `exhaustive`: its EXHAUSTIVE search
    space), none rendered; [] where kls knows no lowering for the template."""
    from torch._inductor import config

    lowering = LOWERINGS.get(template.name)
    if lowering is None:
        return []
    settings = {
        **COMMON_SETTINGS,
        **lowering.settings,
        "test_configs.max_mm_configs": None,
        "max_autotune_gemm_search_space": "EXHAUSTIVE" if exhaustive else "DEFAULT",
    }
    # With every choice declined the lowering may fail after asking: expected.
    record = _Record(template.name)
    with config.patch(settings), answering(record), suppress(Exception):
        lowering.resolve()(*nodes)
    unique: dict[str, dict[str, Any]] = {}
    for found in record.configs:
        unique.setdefault(repr(sorted(found.items())), found)
    return list(unique.values())


def _padded(layout: Any) -> bool:
    """Whether `layout`'s strides are not the contiguous ones for its size."""
    from kls.instances.schema import contiguous_strides

    if layout is None:
        return False
    size = tuple(int(n) for n in layout.size)
    return [int(n) for n in layout.stride] != list(contiguous_strides(size))


def lowered_choice(template: Any, nodes: list[Any], req: dict[str, Any], layout: Any = None) -> Any:
    """The choice Inductor's lowering generates for `template` over `nodes` with the
    instance's config and output `layout` (the lowering's `layout=`, as for an `out=` call:
    without it Inductor makes the output contiguous, whatever kls.toml declares), or None
    where kls knows no lowering for it or the lowering never asked for it. Runs inside the
    caller's graph handler. An error raised while the template itself renders is the
    template's and propagates."""
    from torch._inductor import config

    lowering = LOWERINGS.get(template.name)
    if lowering is None:
        return None
    # Only a layout Inductor would not make itself is passed: some registered lowerings
    # (bmm's) take no layout through their type-promotion wrapper, and fall back below.
    keywords: dict[str, Any] = {"layout": layout} if _padded(layout) else {}
    if lowering.out_dtype and req.get("output"):
        import torch

        keywords["out_dtype"] = getattr(torch, req["output"]["dtype"])
    pin = _Pin(template, req)
    with config.patch({**COMMON_SETTINGS, **lowering.settings}), answering(pin):
        try:
            lowering.resolve()(*nodes, **keywords)
        except Exception:
            # Raised while the template rendered: the template's error. Before it was asked
            # for, or after it rendered (choosing among choices): not the template's.
            if pin.asked and pin.choice is None:
                raise
    return pin.choice
