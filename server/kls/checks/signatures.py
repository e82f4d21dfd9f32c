"""Signatures and docs of the helpers templates may call (static arity checks, completion),
per profile: which helpers a profile has comes from kls.profiles (the runtime classes'
TEMPLATE_API), what each takes and renders is written here."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kls.profiles import DEFAULT, PROFILES


@dataclass(frozen=True)
class Param:
    name: str
    required: bool = True


@dataclass(frozen=True)
class HelperSig:
    owner: str
    name: str
    params: tuple[Param, ...]
    summary: str
    # Other accepted parameter lists (torch 2.11's 2.x render_gemm_arguments differs from 3.x).
    alternatives: tuple[tuple[Param, ...], ...] = ()
    example: str = ""  # a Jinja expression on the EXAMPLE instance (tests render it)
    renders: str = ""  # what `example` renders to there
    traps: str = ""

    @property
    def label(self) -> str:
        parts = [p.name if p.required else f"{p.name}=…" for p in self.params]
        return f"{self.owner}.{self.name}({', '.join(parts)})"

    @property
    def doc(self) -> str:
        """The one text hover, completion, `kls rules --profile` and docs/TEMPLATE_API.md show."""
        parts = [self.summary]
        if self.example:
            shown = self.renders if "\n" not in self.renders else self.renders.split("\n")[0] + " …"
            parts.append(f"Example: `{{{{{self.example}}}}}` renders `{shown}`.")
        if self.traps:
            parts.append(f"Trap: {self.traps}")
        return "\n\n".join(parts)


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
        HelperSig(
            "template",
            "header",
            (),
            "The #includes (C++ standard library, CUDA, CUTLASS/CuTe), as an IndentedBuffer: "
            "write {{template.header().getvalue()}} first.",
        ),
        HelperSig(
            "template",
            "globals",
            (),
            "`#define PT_EXPORT` (default visibility), `using namespace cute;`, "
            "`CUTLASS_CHECK(status)` (and `using bfloat16 = nv_bfloat16;` in inductor-2023), as "
            "an IndentedBuffer: write {{template.globals().getvalue()}} after the header.",
        ),
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


# What each helper renders for EXAMPLE, and its traps, per profile: the documentation source of
# hover, completion, `kls rules --profile` and docs/TEMPLATE_API.md (python -m kls.docs).
# tests/core/test_new_user.py renders every example and compares.
EXAMPLE_TENSORS = {  # a plain CUDA (kind "cuda") instance named "example"
    "X": ("bf16", (256, 128), "row"),
    "W": ("bf16", (128, 64), "col"),
    "Y": ("bf16", (256, 64), "row"),
}
EXAMPLE_DEF_KERNEL = 'kernel.def_kernel(inputs=[X, W], outputs=[Y], names_str="X, W, Y")'
_NOT_NULL = """{
    if (!X) {
      int64_t X_size = 32768;
      if (X_size > 0) {
        throw std::runtime_error("input X is null but size is not 0!");
      }
    }
  }"""
Doc = tuple[str, str, str]  # example, renders, traps
_DOCS: dict[str, dict[tuple[str, str], Doc]] = {
    "inductor-2023": {
        ("kernel", "def_kernel"): (
            EXAMPLE_DEF_KERNEL,
            "PT_EXPORT int kls_example(const bfloat16* X, const bfloat16* W, bfloat16* Y, "
            "size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)",
            "it already starts with PT_EXPORT (writing it again is KT405) and needs "
            "{{template.globals().getvalue()}} above it to define PT_EXPORT (KT404); print it "
            'inside extern "C" (KT401); names_str count must equal inputs + outputs (KT201); '
            "a non-permutation input_reorder silently drops an input (KT203).",
        ),
        ("kernel", "ptr"): (
            "kernel.ptr(X)",
            "X",
            "an undeclared buffer or a call above def_kernel gives `nullptr` silently (KT204, "
            "KT211).",
        ),
        ("kernel", "size"): (
            "kernel.size(X, 0, -1)",
            "32768",
            "end_index is inclusive (Inductor's docstring says exclusive); an empty range gives "
            "default_value.",
        ),
        ("kernel", "stride"): (
            "kernel.stride(W, -1)",
            "128",
            "an index before the first dimension (e.g. -3 on rank 2) gives default_value: the "
            "'no batch' idiom, not an error.",
        ),
        ("kernel", "check_not_null"): (
            "kernel.check_not_null(X)",
            _NOT_NULL,
            "throws std::runtime_error: call it inside try, after the workspace query (KT402).",
        ),
        ("kernel", "row_or_column_stride"): (
            "kernel.row_or_column_stride(W)",
            "128",
            "neither of the last two strides 1 raises (KT306).",
        ),
        ("kernel", "dtype"): (
            "kernel.dtype(X)",
            "bfloat16",
            "`bfloat16` is the alias template.globals() defines.",
        ),
        ("kernel", "offset"): ("kernel.offset(X)", "0", ""),
        ("kernel", "arg_name"): ("kernel.arg_name(W)", "W", "None before def_kernel."),
        ("template", "header"): (
            "",
            "",
            "without .getvalue() the output is the object's repr (KT303).",
        ),
        ("template", "globals"): (
            "",
            "",
            "forgetting it leaves PT_EXPORT undefined: nvcc says 'this declaration has no "
            "storage class or type specifier' (KT404 says it first).",
        ),
        ("template", "cute_int"): (
            "",
            "",
            "compares strings: feed it kernel.stride(...), not an int (GEMM templates only).",
        ),
        ("template", "cutlass_type_cast"): (
            "",
            "",
            "an unmapped dtype gives `(None*)(ptr)`, caught only by nvcc (GEMM templates only).",
        ),
    },
    "torch-2.11": {
        ("kernel", "def_kernel"): (
            EXAMPLE_DEF_KERNEL,
            "int kls_example(const __nv_bfloat16* X, const __nv_bfloat16* W, __nv_bfloat16* Y, "
            "const int X_offset, const int W_offset, const int Y_offset, size_t* workspace_size, "
            "uint8_t* workspace, cudaStream_t stream)",
            "no PT_EXPORT: write `PT_EXPORT {{kernel.def_kernel(...)}}` (KT401); a GEMM does "
            "not call it (Inductor did, before rendering): print {{kernel_call_signature}}; "
            "every buffer adds a `NAME_offset` parameter the caller passes.",
        ),
        ("kernel", "ptr"): (
            "kernel.ptr(X)",
            "X + X_offset",
            "an undeclared buffer gives `nullptr` silently (KT204).",
        ),
        ("kernel", "size"): (
            "kernel.size(X, 0, -1)",
            "32768",
            "in a GEMM it prints layout symbols (M, N, K, B) the caller passes, not literals.",
        ),
        ("kernel", "stride"): (
            "kernel.stride(W, -1)",
            "128",
            "in a GEMM it prints lda..ldd where one matches.",
        ),
        ("kernel", "check_not_null"): (
            "kernel.check_not_null(X)",
            "\n  " + _NOT_NULL + "\n",
            "callers query the workspace with null pointers: put it after the query (KT402).",
        ),
        ("kernel", "row_or_column_stride"): ("kernel.row_or_column_stride(W)", "128L", ""),
        ("kernel", "dtype"): (
            "kernel.dtype(X)",
            "at::BFloat16",
            "ATen's type: it does not compile outside PyTorch; for device code use "
            "kernel.cutlass_dtype and template.cutlass_type_cast.",
        ),
        ("kernel", "cutlass_dtype"): ("kernel.cutlass_dtype(X)", "cutlass::bfloat16_t", ""),
        ("kernel", "batch_stride"): ("kernel.batch_stride(X)", "0", ""),
        ("kernel", "max_valid_index"): ("kernel.max_valid_index(Y)", "16383", ""),
        ("kernel", "arg_name"): ("kernel.arg_name(W)", "W", ""),
        ("kernel", "get_layout_args"): (
            "",
            "",
            "GEMM only: it reads the buffers named X, W, Y (other names: KeyError).",
        ),
        ("template", "cutlass_type_cast"): (
            "template.cutlass_type_cast(X, kernel.ptr(X))",
            "(cutlass::bfloat16_t*)(X + X_offset)",
            "casts away const; the signature's pointers are __nv_bfloat16.",
        ),
    },
}
_DOCS["torch-2.11"] = {
    **{k: v for k, v in _DOCS["inductor-2023"].items() if k[0] == "template"},
    **_DOCS["torch-2.11"],
}

# Every name a template's context may hold besides the buffers and kls.toml's vars.
CONTEXT_DOCS: dict[str, str] = {
    "kernel": "the kernel object: the `kernel.*` helpers (CUDATemplateKernel)",
    "template": "the template object: the `template.*` helpers (CUDATemplate / CUTLASSTemplate)",
    "kernel_name": "the exported C function's name (kls.toml `kernel_name`; kls_<instance>)",
    "input_reorder": "kls.toml `input_reorder` (a list) or None",
    "alpha": "kls.toml `alpha` (1.0; torch-2.11 passes integral values as ints)",
    "beta": "kls.toml `beta` (0.0)",
    "instance_definition": "the C++ cutlass_library emits for the chosen op (GEMM)",
    "instance_type": "the name instance_definition defines, as GemmUniversalAdapter<...> (GEMM)",
    "argument_template": "the argument sub-template's text, for render_gemm_arguments (GEMM)",
    "epilogue_template": "the epilogue sub-template's text, or None (GEMM)",
    "should_swap_xw": "kls.toml `should_swap_xw`: X/W (and M/N) exchanged in sub-templates (GEMM)",
    "epilogue_args": "the epilogue's extra arguments ([] without fusion) (GEMM)",
    "op_conf_name": "the op's configuration name (GEMM)",
    "kernel_call_signature": "torch-2.11 GEMM: the entry's signature (def_kernel already ran); "
    "print `PT_EXPORT {{kernel_call_signature}}`",
    "test_call_statement": "torch-2.11 GEMM: a call of the entry with the layout args (tests)",
    "epilogue_visitor_tree": "torch-2.11 GEMM: the EVT C++ of a fused epilogue, or ''",
    "dynamic_cluster": "torch-2.11 GEMM: `hw_info.cluster_shape = {...}` for dynamic-cluster ops, "
    "or ''",
    "Meta": "torch-2.11 GEMM: the sparse 2.x metadata buffer, or None",
    "M": "sub-templates: the string 'M' (the C variable; 'N' when should_swap_xw)",
    "N": "sub-templates: the string 'N' (the C variable; 'M' when should_swap_xw)",
    "epilogue_arguments": "the argument sub-template: the rendered epilogue sub-template",
    "split_k": "2.x argument sub-template without an epilogue template: 1",
}


# Helpers whose signature a profile changed from 2023's, by profile name.
_CHANGED: dict[str, tuple[HelperSig, ...]] = {"torch-2.11": tuple(_CHANGED_2_11)}


def _for_profile(name: str) -> dict[tuple[str, str], HelperSig]:
    facts = PROFILES[name]
    api = facts.same_api_as or name  # a profile with another's API has its helpers' docs
    table = dict(_HELPERS_2023)
    table.update({(h.owner, h.name): h for h in _CHANGED.get(api, ())})
    docs = _DOCS.get(api, {})
    return {
        k: replace(h, example=docs[k][0], renders=docs[k][1], traps=docs[k][2]) if k in docs else h
        for k, h in table.items()
        if h.name in facts.api(h.owner)
    }


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
