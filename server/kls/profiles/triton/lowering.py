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
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Lowering:
    """Inductor's lowering that reaches a template, and the settings under which it does."""

    module: str
    function: str
    settings: dict[str, Any] = field(default_factory=dict)

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
    """While active, TritonTemplate.generate answers the lowering: the instance's template is
    generated once, from `template` (the editor's text) with the pinned config; every other
    request is declined."""

    def __init__(self, template: Any, req: dict[str, Any]) -> None:
        self.template = template
        self.req = req
        self.choice: Any = None
        self.asked = False

    def __enter__(self) -> _Pin:
        from torch._inductor.select_algorithm import TritonTemplate

        self.original = TritonTemplate.generate
        pin = self

        def generate(template: Any, **kwargs: Any) -> Any:
            if template.name != pin.template.name or pin.asked:
                return None
            pin.asked = True
            pin.choice = pin.original(pin.template, **pinned_kwargs(kwargs, pin.req))
            return pin.choice

        TritonTemplate.generate = generate
        return self

    def __exit__(self, *exc: object) -> None:
        from torch._inductor.select_algorithm import TritonTemplate

        TritonTemplate.generate = self.original


def lowered_choice(template: Any, nodes: list[Any], req: dict[str, Any]) -> Any:
    """The choice Inductor's lowering generates for `template` over `nodes` with the
    instance's config, or None where kls knows no lowering for it or the lowering never asked
    for it. Runs inside the caller's graph handler. An error raised while the template itself
    renders is the template's and propagates."""
    from torch._inductor import config

    lowering = LOWERINGS.get(template.name)
    if lowering is None:
        return None
    with config.patch({**COMMON_SETTINGS, **lowering.settings}), _Pin(template, req) as pin:
        try:
            lowering.resolve()(*nodes)
        except Exception:
            # Raised while the template rendered: the template's error. Before it was asked
            # for, or after it rendered (choosing among choices): not the template's.
            if pin.asked and pin.choice is None:
                raise
    return pin.choice
