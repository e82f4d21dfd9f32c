"""Which cutlass_library element types a torch dtype matches (Inductor's `dtype_match`), and
the words the op filters use for an op's operands and layouts."""

from __future__ import annotations

from typing import Any

# torch dtype name -> cutlass_library DataType names it matches (utils.dtype_match).
DTYPE_MATCH = {
    "float32": ("f32", "tf32"),
    "float16": ("f16",),
    "bfloat16": ("bf16",),
    "int8": ("s8",),
    "uint8": ("u8",),
    "int32": ("s32",),
    "float8_e4m3fn": ("e4m3",),
    "float8_e5m2": ("e5m2",),
}
XW_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "int8", "float8_e5m2")  # utils.XW_DTYPES
# The tensor that fills each operand of a GEMM op.
OPERANDS = (("A", "X"), ("B", "W"), ("D", "Y"))
LAYOUT_WORDS = {"RowMajor": "row-major ('t')", "ColumnMajor": "column-major ('n')"}


def element_name(element: Any) -> str:
    return str(getattr(element, "name", element))


def matches(torch_dtype: str, element: Any) -> bool:
    return element_name(element) in DTYPE_MATCH.get(torch_dtype, ())


def element_refusal(op: Any, dtypes: dict[str, str]) -> str:
    """Why the op's A, B or D element does not fit tensor X, W or Y ('' when they all do)."""
    for operand, tensor in OPERANDS:
        element = getattr(op, operand).element
        if tensor in dtypes and not matches(dtypes[tensor], element):
            return (
                f"its {operand} element (for tensor {tensor}) is {element_name(element)}; "
                f"tensor {tensor} is {dtypes[tensor]}"
            )
    return ""


def accumulator_refusal(op: Any, x_dtype: str) -> str:
    """Inductor accumulates in f32 (s32 for int8 X)."""
    want = "s32" if x_dtype == "int8" else "f32"
    got = element_name(op.accumulator_type())
    return "" if got == want else f"it accumulates in {got}; Inductor wants {want}"


def layout_word(layout: Any) -> str:
    name = element_name(layout)
    return LAYOUT_WORDS.get(name, name)
