"""How kls.toml names a file of the torch source: `torch:<path under the torch package>`,
optionally with `::CONSTANT` for a string constant of a Python file, e.g.
`torch:_inductor/codegen/cutlass/gemm_template.py::GEMM_TEMPLATE_CUTLASS_3X`."""

from __future__ import annotations

TORCH_PREFIX = "torch:"


def is_torch_ref(value: str) -> bool:
    return value.startswith(TORCH_PREFIX)


def torch_ref(relative: str, constant: str | None = None) -> str:
    """The reference kls.toml writes for `relative` (to the torch package folder)."""
    return f"{TORCH_PREFIX}{relative}" + (f"::{constant}" if constant else "")
