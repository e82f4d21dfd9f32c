"""Tensor element types: the names a kls.toml may use and their C, CUTLASS and size facts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str  # canonical, torch-style
    cpp: str  # what Inductor's DTYPE_TO_CPP emits
    cutlass: str  # what Inductor's DTYPE_TO_CUTLASS_TYPE emits
    size: int  # bytes per element


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", "float", "float", 4),
        DType("float16", "half", "cutlass::half_t", 2),
        DType("bfloat16", "bfloat16", "cutlass::bfloat16_t", 2),
        DType("float64", "double", "double", 8),
        DType("int8", "int8_t", "int8_t", 1),
        DType("uint8", "uint8_t", "uint8_t", 1),
        DType("int32", "int32_t", "int32_t", 4),
        DType("int64", "int64_t", "int64_t", 8),
        DType("float8_e4m3fn", "float8_e4m3fn", "cutlass::float_e4m3_t", 1),
        DType("float8_e5m2", "float8_e5m2", "cutlass::float_e5m2_t", 1),
    )
}

ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "fp32": "float32",
    "float": "float32",
    "f32": "float32",
    "fp64": "float64",
    "double": "float64",
    "e4m3": "float8_e4m3fn",
    "fp8": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


def lookup_dtype(name: str) -> DType | None:
    key = name.strip().lower()
    return DTYPES.get(ALIASES.get(key, key))


def known_dtype_names() -> list[str]:
    return sorted(set(DTYPES) | set(ALIASES))
