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


def dtype_choices() -> str:
    """The names a kls.toml may use, canonical first with their short aliases."""
    short = {canon: sorted(a for a, c in ALIASES.items() if c == canon) for canon in DTYPES}
    return ", ".join(
        f"{name} ({'/'.join(short[name])})" if short[name] else name for name in DTYPES
    )


def suggest_dtype(word: str) -> str:
    """` (did you mean 'bf16'?)` by meaning as well as spelling: a prefix of a name
    ('bfloat' -> bfloat16), a known spelling of a type ('bfloat16_t', 'nv_bfloat16',
    'torch.float16', 'cutlass::half_t'), else the closest spelling."""
    import difflib

    key = word.strip().lower()
    for junk in ("torch.", "cutlass::", "nv_", "__nv_", "std::"):
        key = key.removeprefix(junk)
    key = key.removesuffix("_t")
    meaning = {d.cpp.lower(): d.name for d in DTYPES.values()}
    meaning.update(
        {
            d.cutlass.lower().removeprefix("cutlass::").removesuffix("_t"): d.name
            for d in DTYPES.values()
        }
    )
    meaning.update(
        {
            "bfloat": "bfloat16",
            "brain": "bfloat16",
            "bf": "bfloat16",
            "fp": "float32",
            "single": "float32",
            "int": "int32",
            "long": "int64",
            "char": "int8",
            "byte": "uint8",
            "fp8_e4m3": "float8_e4m3fn",
        }
    )
    found = lookup_dtype(key)
    canon = found.name if found is not None else meaning.get(key)
    if canon is None:
        prefixed = [n for n in DTYPES if n.startswith(key) and len(key) >= 3]
        canon = prefixed[0] if len(prefixed) == 1 else None
    if canon is None:
        close = difflib.get_close_matches(key, known_dtype_names(), n=1, cutoff=0.6)
        canon = (lookup_dtype(close[0]) or DTYPES["float32"]).name if close else None
    if canon is None:
        return ""
    alias = [a for a, c in ALIASES.items() if c == canon]
    return f" (did you mean '{alias[0] if alias else canon}'?)"
