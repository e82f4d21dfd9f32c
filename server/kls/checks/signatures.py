"""Signatures and docs of the helpers templates may call (static arity checks, completion),
per profile: which helpers a profile has comes from kls.runtime.profiles (the runtime classes'
TEMPLATE_API), what each takes and renders is written here."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kls.runtime.profiles import DEFAULT, PROFILES


@dataclass(frozen=True)
class Param:
    name: str
    required: bool = True


@dataclass(frozen=True)
class HelperSig:
    owner: str
    name: str
    params: tuple[Param, ...]
    doc: str
    # Other accepted parameter lists (torch 2.11's 2.x render_gemm_arguments differs from 3.x).
    alternatives: tuple[tuple[Param, ...], ...] = ()

    @property
    def label(self) -> str:
        parts = [p.name if p.required else f"{p.name}=…" for p in self.params]
        return f"{self.owner}.{self.name}({', '.join(parts)})"


def _p(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n.rstrip("?"), not n.endswith("?")) for n in names)


_HELPERS_2023: dict[tuple[str, str], HelperSig] = {
    (h.owner, h.name): h
    for h in (
        HelperSig(
            "kernel",
            "def_kernel",
            _p("inputs", "outputs", "names_str?", "input_reorder?"),
            "Declare the exported C function. `names_str` names inputs then outputs, "
            "positionally; C parameters follow `input_reorder`; returns the signature.",
        ),
        HelperSig("kernel", "ptr", _p("node"), "The C parameter name of a buffer (+ offset)."),
        HelperSig(
            "kernel",
            "size",
            _p("node", "start_index", "end_index?", "default_value?"),
            "Product of sizes from start to end, inclusive; default if the range is empty.",
        ),
        HelperSig(
            "kernel",
            "stride",
            _p("node", "index", "default_value?"),
            "The stride of one dimension; default when the index is before the first dim.",
        ),
        HelperSig(
            "kernel",
            "check_not_null",
            _p("node"),
            "C code that throws if the buffer's pointer is null and its size > 0.",
        ),
        HelperSig(
            "kernel",
            "row_or_column_stride",
            _p("node", "default_value?"),
            "The leading dimension: stride[-2] if row-major, stride[-1] if column-major.",
        ),
        HelperSig("kernel", "dtype", _p("node"), "The C element type ('void' for None)."),
        HelperSig("kernel", "offset", _p("node"), "The buffer's storage offset."),
        HelperSig("kernel", "arg_name", _p("node"), "The registered C name, or None."),
        HelperSig("template", "header", (), "Includes, as an IndentedBuffer: call .getvalue()."),
        HelperSig("template", "globals", (), "PT_EXPORT and helpers, as an IndentedBuffer."),
        HelperSig(
            "template",
            "cute_int",
            _p("int_str", "var_name"),
            '`cute::Int<1>{}` for "1", else the string, with a comment naming the variable.',
        ),
        HelperSig(
            "template",
            "cutlass_type_cast",
            _p("node", "ptr"),
            "`(cutlass_type*)(ptr)`, or ptr for None.",
        ),
        HelperSig("template", "gemm_mode", (), "kBatched if the output has rank > 2, else kGemm."),
        HelperSig(
            "template",
            "render_gemm_arguments",
            _p(
                "argument_template",
                "epilogue_template",
                "should_swap_xw",
                "X",
                "W",
                "Bias",
                "Y",
                "alpha",
                "beta",
                "kernel",
                "epilogue_args?",
            ),
            "Render the epilogue sub-template, then the argument sub-template around it.",
        ),
    )
}

_RENDER_GEMM_3X = _p(
    "argument_template",
    "epilogue_template",
    "should_swap_xw",
    "X",
    "W",
    "Bias",
    "Y",
    "alpha",
    "beta",
    "kernel",
    "epilogue_args",
)
_RENDER_GEMM_2X = _p(
    "instance_type",
    "argument_template",
    "epilogue_template",
    "should_swap_xw",
    "X",
    "W",
    "Bias",
    "Meta",
    "Y",
    "alpha",
    "beta",
    "kernel",
    "epilogue_args",
)
# torch 2.11.0 (torch/_inductor/codegen/cutlass/{kernel,template,gemm_template}.py).
_CHANGED_2_11 = (
    HelperSig(
        "kernel",
        "ptr",
        _p("node"),
        "`X + X_offset`: the C parameter plus its offset "
        "parameter; nullptr for None or an undeclared buffer.",
    ),
    HelperSig(
        "kernel",
        "size",
        _p("node", "start_index", "end_index?", "default_value?"),
        "Product of sizes from start to end, inclusive, printed as sympy does: the layout "
        "symbol (M, N, K, B) where one matches a dimension, else the literal (`K*M`).",
    ),
    HelperSig(
        "kernel",
        "stride",
        _p("node", "index", "default_value?"),
        "The stride of one dimension: the literal when <= 1, else the layout symbol (lda, "
        "ldb, ldc, ldd) where one matches, else the literal.",
    ),
    HelperSig(
        "kernel",
        "batch_stride",
        _p("node", "default_value?"),
        "default_value for rank < 3; else `size1*size2` (symbols where they match), or the "
        "literal batch stride when it is <= 1.",
    ),
    HelperSig(
        "kernel",
        "row_or_column_stride",
        _p("node", "default_value?"),
        "The leading dimension, printed by CppPrinter (`4096L`): stride[-2] if row-major, "
        "stride[-1] if column-major.",
    ),
    HelperSig(
        "kernel", "dtype", _p("node"), "The C++ element type (`at::BFloat16`; `void` for None)."
    ),
    HelperSig(
        "kernel",
        "cutlass_dtype",
        _p("node", "default_dtype?"),
        "The CUTLASS element type (`cutlass::bfloat16_t`); default_dtype for None.",
    ),
    HelperSig(
        "kernel",
        "max_valid_index",
        _p("node", "default?"),
        "The largest element index the buffer touches: sum of (size - 1) * stride (an int).",
    ),
    HelperSig(
        "kernel",
        "get_layout_args",
        (),
        "The values the caller passes for (M, N, K, B, lda, ldb, ldc, ldd), as ints.",
    ),
    HelperSig(
        "template",
        "cutlass_sparse_meta_type_cast",
        _p("node", "ptr"),
        "`(uint32_t*)(ptr)` for a sparse GEMM's int32 metadata, or ptr for None.",
    ),
    HelperSig(
        "template",
        "render_gemm_arguments",
        _RENDER_GEMM_3X,
        "Render the epilogue sub-template, then the argument sub-template around it "
        "(CUTLASS 3.x; 2.x: instance_type first and Meta after Bias).",
        (_RENDER_GEMM_2X,),
    ),
)


def _for_profile(name: str) -> dict[tuple[str, str], HelperSig]:
    facts = PROFILES[name]
    table = dict(_HELPERS_2023)
    if name == "torch-2.11":
        table.update({(h.owner, h.name): h for h in _CHANGED_2_11})
    return {k: h for k, h in table.items() if h.name in facts.api(h.owner)}


SIGNATURES: dict[str, dict[tuple[str, str], HelperSig]] = {n: _for_profile(n) for n in PROFILES}
# The default profile's helpers (what a template with no instance is described with).
HELPERS: dict[tuple[str, str], HelperSig] = SIGNATURES[DEFAULT]


def helpers(profile: str | None = None) -> dict[tuple[str, str], HelperSig]:
    """The helpers of `profile`; None: every profile's (the default profile's text wins)."""
    if profile is not None:
        return SIGNATURES.get(profile, HELPERS)
    merged: dict[tuple[str, str], HelperSig] = {}
    for name in PROFILES:
        merged.update(SIGNATURES[name])
    merged.update(HELPERS)
    return merged


def helper_sig(owner: str, name: str, profile: str | None = None) -> HelperSig | None:
    return helpers(profile).get((owner, name))


def with_params(sig: HelperSig, params: tuple[Param, ...]) -> HelperSig:
    return replace(sig, params=params, alternatives=())


# Helpers whose first argument is a buffer.
BUFFER_HELPERS = frozenset(
    name
    for table in SIGNATURES.values()
    for (owner, name), sig in table.items()
    if sig.params and sig.params[0].name == "node"
)


def helpers_of(owner: str, profile: str | None = None) -> list[HelperSig]:
    return [h for (o, _), h in helpers(profile).items() if o == owner]
