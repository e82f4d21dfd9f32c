"""Which of a Triton instance's tensors is the output (the others are the inputs, in
kls.toml's order: def_kernel's order)."""

from __future__ import annotations

from kls.instances.schema import InstanceSpec

OUTPUT_NAMES = ("out", "output", "Y")


def output_name(instance: InstanceSpec) -> str | None:
    """The tensor that is the template's output: `out` (or `output`, `Y`), else the last."""
    names = list(instance.tensors)
    return next((n for n in OUTPUT_NAMES if n in instance.tensors), names[-1] if names else None)
