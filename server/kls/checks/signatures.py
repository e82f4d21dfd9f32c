"""Signatures and docs of the helpers templates may call (static arity checks, completion)."""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def label(self) -> str:
        parts = [p.name if p.required else f"{p.name}=…" for p in self.params]
        return f"{self.owner}.{self.name}({', '.join(parts)})"


def _p(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n.rstrip("?"), not n.endswith("?")) for n in names)


HELPERS: dict[tuple[str, str], HelperSig] = {
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

# Helpers whose first argument is a buffer.
BUFFER_HELPERS = frozenset(
    name for (owner, name), sig in HELPERS.items() if sig.params and sig.params[0].name == "node"
)


def helpers_of(owner: str) -> list[HelperSig]:
    return [h for (o, _), h in HELPERS.items() if o == owner]
