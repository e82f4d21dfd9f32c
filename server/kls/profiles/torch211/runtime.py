"""The `torch-2.11` profile: Inductor's CUTLASS template API as torch 2.11.0 ships it.

Read from the torch 2.11.0 wheel, `torch/_inductor/codegen/cutlass/`: `kernel.py`
(`CUTLASSKernel`, `CUTLASSTemplateKernel`), `template.py` (`CUTLASSTemplate`, `ArgInfo`),
`gemm_template.py` (`CUTLASSGemmTemplate`, `CUTLASS3xGemmTemplate`, `CUTLASS2xGemmTemplate`),
plus `utils.DTYPE_TO_CUTLASS_TYPE`, `cpp_utils.DTYPE_TO_CPP`, `utils.IndentedBuffer`,
`torch/utils/_sympy/printers.CppPrinter`. Each method names the function it mirrors. What a
template sees: sizes and leading dimensions as the C parameters `M, N, K, B, lda..ldd` where a
layout symbol matches (literals elsewhere), pointers as `X + X_offset`, a signature that takes
sizes, offsets and runtime arguments (`swizzle`) from the caller.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kls.runtime.buffers import Buffer
from kls.runtime.cuda_text import (
    CUDA_GLOBALS,
    CUDA_HEADER,
    CUTLASS_GLOBALS,
    CUTLASS_HEADER,
    GEMM_HEADER,
)
from kls.runtime.kernel import EXTRA_CPP_ARGS, Kernel, _normalize
from kls.runtime.record import CallRecord, Recorder
from kls.runtime.roles import check_roles
from kls.upstream.blocks import UpstreamTextError, method_splices

# cpp_utils.DTYPE_TO_CPP (what kernel.dtype prints), by kls dtype name.
DTYPE_TO_CPP = {
    "float32": "float",
    "float64": "double",
    "float16": "at::Half",
    "int64": "int64_t",
    "int32": "int32_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "bfloat16": "at::BFloat16",
    "float8_e4m3fn": "at::Float8_e4m3fn",
    "float8_e5m2": "at::Float8_e5m2",
}
# cutlass/utils.DTYPE_TO_CUTLASS_TYPE (the C parameter types of the signature).
DTYPE_TO_CUTLASS_TYPE = {
    **DTYPE_TO_CPP,
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float8_e4m3fn": "__nv_fp8_e4m3",
    "float8_e5m2": "__nv_fp8_e5m2",
}
# CUTLASSTemplate._DTYPE_TO_CUTLASS (cutlass_type_cast, kernel.cutlass_dtype).
DTYPE_TO_CUTLASS = {
    "float32": "float",
    "float64": "double",
    "float16": "cutlass::half_t",
    "int32": "int32_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "bfloat16": "cutlass::bfloat16_t",
    "float8_e4m3fn": "cutlass::float_e4m3_t",
    "float8_e5m2": "cutlass::float_e5m2_t",
}
# CUTLASSTemplate._DTYPE_TO_CUTLASS_SPARSE_META.
DTYPE_TO_CUTLASS_SPARSE_META = {"int32": "uint32_t"}

LAYOUT_SYMBOLS = ("M", "N", "K", "B", "lda", "ldb", "ldc", "ldd")
# Names the torch-2.11 GEMM templates' C code declares besides the signature's.
GEMM_BODY_NAMES = ("arguments", "gemm_op", "hw_info", "status", "coord_t", "ElementComputeEpilogue")


class IndentedBuffer:
    """torch/_inductor/utils.IndentedBuffer, the parts templates reach (`splice`, `getvalue`)."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset({"getvalue"})

    def __init__(self, initial_indent: int = 0, tabwidth: int = 4) -> None:
        self._lines: list[str] = []
        self._indent = initial_indent
        self._tabwidth = tabwidth

    def writeline(self, line: str) -> None:
        if line.strip():
            self._lines.append(f"{' ' * (self._indent * self._tabwidth)}{line}")
        else:
            self._lines.append("")

    def splice(self, other_code: str) -> None:
        other_code = textwrap.dedent(other_code)
        if not other_code:
            return
        for s in other_code.rstrip().split("\n"):
            self.writeline(s)

    def getvalue(self) -> str:
        return "".join(f"{line}\n" for line in self._lines)

    def __str__(self) -> str:  # what Jinja prints when `.getvalue()` is forgotten
        return "<IndentedBuffer: call .getvalue() for its text>"


def splice_text(text: str) -> str:
    """CUTLASSGemmTemplate.render's last step: `IndentedBuffer().splice(res).getvalue()`."""
    buf = IndentedBuffer()
    buf.splice(text)
    return buf.getvalue()


# Where torch 2.11 keeps the text that `template.header()` / `template.globals()` splice: read
# from the located torch source (kls.upstream), never stored here.
_TEMPLATE_PY = "_inductor/codegen/cutlass/template.py"
_GEMM_TEMPLATE_PY = "_inductor/codegen/cutlass/gemm_template.py"


@dataclass(frozen=True)
class SplicedText:
    """The blocks torch's header()/globals() splice, in order; `upstream` says whether they
    were read from the torch source (else they are kls's own equivalent C++)."""

    header: tuple[str, ...]
    gemm_header: tuple[str, ...]
    globals: tuple[str, ...]
    upstream: bool


def _fallback_text() -> SplicedText:
    """Without a torch source: the same includes (which headers a kernel needs is a fact) and
    kls's own PT_EXPORT / CUTLASS_CHECK definitions. Compiles and runs alike; not byte-equal
    to Inductor's output (the conformance test needs a source)."""
    return SplicedText(
        (CUDA_HEADER, CUTLASS_HEADER),
        (GEMM_HEADER,),
        (CUDA_GLOBALS, CUTLASS_GLOBALS),
        upstream=False,
    )


@functools.lru_cache(maxsize=8)
def spliced_text(torch_package: Path | None) -> SplicedText:
    """The blocks of torch's CUTLASSTemplate.header/globals and CUTLASSGemmTemplate.header,
    read from the source at `torch_package`; kls's own equivalent when there is none or the
    text is not where torch 2.11 keeps it."""
    if torch_package is None:
        return _fallback_text()
    try:
        return SplicedText(
            method_splices(torch_package / _TEMPLATE_PY, "CUTLASSTemplate", "header"),
            # CUTLASSGemmTemplate.header splices its includes, then (test runner only) more.
            method_splices(torch_package / _GEMM_TEMPLATE_PY, "CUTLASSGemmTemplate", "header")[:1],
            method_splices(torch_package / _TEMPLATE_PY, "CUTLASSTemplate", "globals"),
            upstream=True,
        )
    except UpstreamTextError:
        return _fallback_text()


@dataclass(frozen=True)
class ArgInfo:
    """template.ArgInfo: one runtime argument of the signature (e.g. `const uint8_t swizzle`)."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset({"name", "ty"})

    name: str
    ty: str


# CUTLASSTemplate.get_runtime_arg_info.
GEMM_RUNTIME_ARGS = (ArgInfo("swizzle", "const uint8_t"),)


@dataclass(frozen=True)
class LayoutArg:
    """kernel.LayoutArg: `symbol` names `attr` (size/stride) of `node` at `dim`."""

    node: Buffer
    symbol: str
    attr: str
    dim: int


def sympy_product_str(factors: Sequence[int | str]) -> str:
    """str(sympy_product(...)) for integer literals and plain symbols: the coefficient first,
    then the symbols in sympy's order (by name), repeated ones as powers."""
    coefficient = 1
    powers: dict[str, int] = {}
    for f in factors:
        if isinstance(f, str):
            powers[f] = powers.get(f, 0) + 1
        else:
            coefficient *= f
    if coefficient == 0 or not powers:
        return str(coefficient)
    parts = [s if p == 1 else f"{s}**{p}" for s, p in sorted(powers.items())]
    if coefficient == -1:
        return "-" + "*".join(parts)
    if coefficient != 1:
        parts.insert(0, str(coefficient))
    return "*".join(parts)


def cpp_int(value: int) -> str:
    """CppPrinter._print_Integer on Linux: `4096L`."""
    return f"{value}L"


class Torch211Kernel(Kernel):
    """`kernel`: CUTLASSTemplateKernel of torch 2.11. `gemm` adds the GEMM layout arguments
    (M..ldd), which CUTLASSKernel.init_layout_args derives from the buffers named X, W, Y."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset(
        {
            "def_kernel",
            "arg_name",
            "ptr",
            "check_not_null",
            "size",
            "stride",
            "batch_stride",
            "row_or_column_stride",
            "dtype",
            "cutlass_dtype",
            "max_valid_index",
            "get_layout_args",
            "runtime_arg_values",
            "runtime_arg_info",
            "kernel_name",
        }
    )

    def __init__(
        self,
        name: str,
        recorder: Recorder,
        gemm: bool,
        runtime_arg_info: Sequence[ArgInfo] = (),
        runtime_arg_values: Sequence[int] = (),
    ) -> None:
        super().__init__(name, recorder)
        self.gemm = gemm
        self.runtime_arg_info = list(runtime_arg_info)
        self.runtime_arg_values = list(runtime_arg_values)
        self.named_nodes: dict[str, Buffer] = {}  # C name -> node, in registration order
        self.layout_args: list[LayoutArg] = []
        self.signature = ""

    def _second_call_message(self) -> str:
        if self.gemm:
            return (
                "def_kernel is called a second time (torch-2.11 already called it before "
                "rendering: print {{kernel_call_signature}} instead)"
            )
        return "def_kernel is called a second time; call it once"

    # -- def_kernel (CUTLASSTemplateKernel.def_kernel) ----------------------------------------
    def def_kernel(
        self,
        inputs: list[Buffer | None],
        outputs: list[Buffer | None],
        names_str: str = "",
        input_reorder: list[int] | None = None,
    ) -> str:
        rec = self._declare_buffers(inputs, outputs, names_str, input_reorder)
        arg_defs = [p.declaration() for p in self.params()]
        size_vars: list[str] = []
        if self.gemm:
            self._init_layout_args(rec)
            size_vars = list(LAYOUT_SYMBOLS)
        size_args = [f"const int {s}" for s in size_vars]
        offset_args = [f"const int {name}_offset" for name in self.named_nodes]
        runtime = ",".join(f"{a.ty} {a.name}" for a in self.runtime_arg_info)
        if runtime:
            runtime += ", "
        self.signature = (
            f"int {self.kernel_name}({', '.join(arg_defs + size_args + offset_args)}, "
            f"{runtime}{EXTRA_CPP_ARGS})"
        )
        rec.result = self.signature
        return self.signature

    def _is_reserved(self, name: str) -> bool:
        runtime = {a.name for a in self.runtime_arg_info}
        return name in reserved_c_names(self.gemm) or name in runtime or name.endswith("_offset")

    def _reserved_message(self, name: str) -> str:
        return (
            f"parameter name '{name}' collides with a parameter torch 2.11 adds to the "
            "signature or a name the template's C code declares; rename it in names_str"
        )

    def _param_ctype(self, node: Buffer) -> str:
        return DTYPE_TO_CUTLASS_TYPE.get(node.spec.dtype.name, "void")

    def _init_layout_args(self, rec: CallRecord) -> None:
        """CUTLASSKernel.init_layout_args."""
        missing = [n for n in ("X", "W", "Y") if n not in self.named_nodes]
        if missing:
            raise self.recorder.abort(
                "KT201",
                f"torch-2.11's def_kernel derives M, N, K, lda.. from the buffers named X, W "
                f"and Y (init_layout_args raises KeyError for {', '.join(missing)})",
                rec,
                2,
            )
        X, W, Y = self.named_nodes["X"], self.named_nodes["W"], self.named_nodes["Y"]
        bias = self.named_nodes.get("Bias")
        add = self.layout_args.append
        add(LayoutArg(X, "M", "size", _normalize(-2, len(X.shape))))
        add(LayoutArg(X, "K", "size", _normalize(-1, len(X.shape))))
        add(LayoutArg(W, "K", "size", _normalize(-2, len(W.shape))))
        add(LayoutArg(W, "N", "size", _normalize(-1, len(W.shape))))
        add(LayoutArg(Y, "M", "size", _normalize(-2, len(Y.shape))))
        add(LayoutArg(Y, "N", "size", _normalize(-1, len(Y.shape))))
        if len(X.shape) > 2:
            add(LayoutArg(X, "B", "size", 0))
        add(LayoutArg(X, "lda", "stride", self._find_ld_idx(X, rec)))
        add(LayoutArg(W, "ldb", "stride", self._find_ld_idx(W, rec)))
        if bias is not None:
            add(LayoutArg(bias, "ldc", "stride", self._find_ld_idx(bias, rec)))
        add(LayoutArg(Y, "ldd", "stride", self._find_ld_idx(Y, rec)))

    def _find_ld_idx(self, node: Buffer, rec: CallRecord | None = None) -> int:
        """CUTLASSKernel.find_ld_idx (asserts that one of the last two strides is 1)."""
        strides = node.stride
        if strides[-1] == 1:
            return _normalize(-2, len(strides))
        if len(strides) < 2 or strides[-2] != 1:
            raise self.recorder.abort(
                "KT306",
                f"buffer '{node.get_name()}' has strides {strides}: neither of the last two is "
                "1 (Inductor's find_ld_idx asserts here)",
                rec,
            )
        return _normalize(-1, len(strides))

    def _find_symbol(self, node: Buffer, attr: str, dim: int) -> str | None:
        """CUTLASSKernel.find_symbol. Inductor compares IR nodes by value and class; the
        transposed clones render_gemm_arguments makes never equal an original, here: identity."""
        for arg in self.layout_args:
            if arg.node is node and arg.attr == attr and arg.dim == dim:
                return arg.symbol
        return None

    def signature_text(self) -> str:
        return f"PT_EXPORT {self.signature}"

    def call_signature(self) -> str:
        return self.signature

    # -- values the caller passes (CUTLASSKernel.get_layout_args / get_offset_args) ----------
    def layout_arg_values(self) -> tuple[int, ...]:
        """CUTLASSKernel.get_layout_args: (M, N, K, B, lda, ldb, ldc, ldd)."""
        X, W, Y = self.named_nodes["X"], self.named_nodes["W"], self.named_nodes["Y"]
        bias = self.named_nodes.get("Bias")
        mdim = _normalize(-2, len(X.shape))
        ndim = _normalize(-1, len(W.shape))
        kdim = _normalize(-1, len(X.shape))

        def ld(node: Buffer) -> int:
            return node.stride[self._find_ld_idx(node)]

        return (
            X.shape[mdim],
            W.shape[ndim],
            X.shape[kdim],
            X.shape[0] if len(X.shape) > 2 else 1,
            ld(X),
            ld(W),
            ld(bias) if bias is not None else 0,
            ld(Y),
        )

    def offset_arg_values(self) -> list[int]:
        """CUTLASSKernel.get_offset_args: each named node's layout offset, in name order."""
        return [node.spec.offset for node in self.named_nodes.values()]

    def extra_args(self) -> list[tuple[str, int]]:
        """(C type, value) of every argument after the tensor pointers, as call_kernel passes
        them: layout args, offsets, runtime args."""
        out: list[tuple[str, int]] = []
        if self.gemm:
            out += [("const int", v) for v in self.layout_arg_values()]
        out += [("const int", v) for v in self.offset_arg_values()]
        out += [(a.ty, int(v)) for a, v in zip(self.runtime_arg_info, self.runtime_arg_values)]
        return out

    # -- helpers ------------------------------------------------------------------------------
    def get_layout_args(self) -> tuple[int, ...]:
        rec = self.recorder.call("kernel", "get_layout_args")
        if not {"X", "W", "Y"} <= set(self.named_nodes):
            raise self.recorder.abort(
                "KT204",
                "kernel.get_layout_args() needs buffers named X, W and Y in def_kernel "
                "(Inductor raises KeyError)",
                rec,
            )
        values = self.layout_arg_values()
        rec.result = str(values)
        return values

    def arg_name(self, node: Buffer | None) -> str | None:
        rec = self._use("arg_name", node)
        return self._arg_name(node, rec)

    def ptr(self, node: Buffer | None) -> str:
        """CUTLASSTemplateKernel.ptr: `X + X_offset`."""
        rec = self._use("ptr", node)
        name = self._arg_name(node, rec)
        rec.result = "nullptr" if node is None or name is None else f"{name} + {name}_offset"
        return rec.result

    def check_not_null(self, node: Buffer | None) -> str:
        """CUTLASSTemplateKernel.check_not_null: IndentedBuffer(initial_indent=2), tabwidth 1."""
        rec = self._use("check_not_null", node)
        if node is None:
            rec.result = ""
            return ""
        size_str = self._size(node, 0, -1, 0, rec)
        name = self._arg_name(node, rec)
        if name is None:
            rec.result = ""
            return ""
        res = IndentedBuffer(initial_indent=2, tabwidth=1)
        res.splice(
            f"""
            {{
              if (!{name}) {{
                int64_t {name}_size = {size_str};
                if ({name}_size > 0) {{
                  throw std::runtime_error("input {name} is null but size is not 0!");
                }}
              }}
            }}
            """
        )
        rec.result = res.getvalue()
        return rec.result

    def _size(
        self,
        node: Buffer | None,
        start_index: int,
        end_index: int | None,
        default_value: int,
        rec: CallRecord,
    ) -> str:
        """CUTLASSTemplateKernel.size: symbols where a layout arg matches, literals elsewhere,
        printed as sympy prints their product."""
        if node is None:
            return str(default_value)
        rank = len(node.shape)
        start = _normalize(start_index, rank)
        end = start if end_index is None else _normalize(end_index, rank)
        factors: list[int | str] = []
        for i in range(start, end + 1):
            if not -rank <= i < rank:
                self._out_of_rank(node, start_index, rec, 1)
                return str(default_value)
            factors.append(self._find_symbol(node, "size", i) or node.shape[i])
        if not factors:
            return str(default_value)
        return sympy_product_str(factors)

    def stride(self, node: Buffer | None, index: int, default_value: int = 0) -> str:
        """CUTLASSTemplateKernel.stride: the literal when <= 1, else the layout symbol."""
        rec = self._use("stride", node)
        norm = self._stride_index(node, index, rec)
        if node is None or norm is None:
            rec.result = str(default_value)
            return rec.result
        index = norm
        stride = node.stride[index]
        if stride <= 1:
            rec.result = str(stride)
        else:
            rec.result = self._find_symbol(node, "stride", index) or str(stride)
        return rec.result

    def batch_stride(self, node: Buffer | None, default_value: int = 0) -> str:
        """CUTLASSTemplateKernel.batch_stride: `size1*size2` (symbols where they match)."""
        rec = self._use("batch_stride", node)
        if node is None or len(node.shape) < 3:
            rec.result = str(default_value)
            return rec.result
        batch_stride = node.stride[0]
        if batch_stride <= 1:
            rec.result = str(batch_stride)
            return rec.result
        one = self._find_symbol(node, "size", 1) or node.shape[1]
        two = self._find_symbol(node, "size", 2) or node.shape[2]
        rec.result = f"{one}*{two}"
        return rec.result

    def row_or_column_stride(self, node: Buffer | None, default_value: int = 0) -> str:
        """CUTLASSTemplateKernel.row_or_column_stride: printed by CppPrinter (`4096L`)."""
        rec = self._use("row_or_column_stride", node)
        if node is None or len(node.stride) < 2:
            rec.result = str(default_value)
            return rec.result
        last, second = node.stride[-1], node.stride[-2]
        if last == 1:
            rec.result = cpp_int(second)
        elif second == 1:
            rec.result = cpp_int(last)
        else:
            raise self.recorder.abort(
                "KT306",
                f"buffer '{node.get_name()}' has strides {node.stride}: neither of the last two "
                "is 1, so it is neither row- nor column-major (Inductor raises RuntimeError)",
                rec,
                0,
            )
        return rec.result

    def dtype(self, node: Buffer | None) -> str:
        """CUTLASSTemplateKernel.dtype: DTYPE_TO_CPP (`at::BFloat16`)."""
        rec = self._use("dtype", node)
        rec.result = "void" if node is None else str(DTYPE_TO_CPP.get(node.spec.dtype.name))
        return rec.result

    def cutlass_dtype(self, node: Buffer | None, default_dtype: str = "void") -> str:
        """CUTLASSTemplateKernel.cutlass_dtype."""
        rec = self._use("cutlass_dtype", node)
        if node is None:
            rec.result = default_dtype
            return rec.result
        ctype = DTYPE_TO_CUTLASS.get(node.spec.dtype.name)
        if ctype is None:
            raise self.recorder.abort(
                "KT103",
                f"kernel.cutlass_dtype: Inductor has no CUTLASS type for {node.spec.dtype.name} "
                "(KeyError)",
                rec,
                0,
            )
        rec.result = ctype
        return ctype

    def max_valid_index(self, node: Buffer | None, default: int = -1) -> int:
        """CUTLASSTemplateKernel.max_valid_index: sum of (size - 1) * stride."""
        rec = self._use("max_valid_index", node)
        if node is None:
            value = default
        else:
            value = sum((s - 1) * st for s, st in zip(node.shape, node.stride))
        rec.result = str(value)
        return value

    def _arg_name(self, node: Buffer | None, rec: CallRecord) -> str | None:
        # KernelArgs.arg_name: outputs first, then inputs.
        if node is None:
            return None
        key = node.get_name()
        name = self.output_buffers.get(key) or self.input_buffers.get(key)
        if name is None and self.def_kernel_calls:
            super()._arg_name(node, rec)  # records KT204
        return name


reserved_names_gemm = frozenset(
    {*LAYOUT_SYMBOLS, "swizzle", "workspace", "workspace_size", "stream", *GEMM_BODY_NAMES}
)
reserved_names_cuda = frozenset({"workspace", "workspace_size", "stream"})


def reserved_c_names(gemm: bool) -> frozenset[str]:
    """C names a buffer must not take under torch-2.11 (plus any `<name>_offset`)."""
    return reserved_names_gemm if gemm else reserved_names_cuda


SubRender = Callable[[str, dict[str, Any]], str]


class Torch211Template:
    """`template` of a non-GEMM torch-2.11 kernel: CUTLASSTemplate."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset(
        {"header", "globals", "cute_int", "cutlass_type_cast", "cutlass_sparse_meta_type_cast"}
    )

    def __init__(
        self,
        recorder: Recorder,
        kernel: Torch211Kernel,
        output: Buffer | None,
        text: SplicedText | None = None,
    ) -> None:
        self.recorder = recorder
        self.kernel = kernel
        self.output_node = output
        self.text = text or _fallback_text()

    def __repr__(self) -> str:
        return "<template: torch-2.11 CUTLASSTemplate helpers>"

    def _header_blocks(self) -> tuple[str, ...]:
        return self.text.header

    def header(self) -> IndentedBuffer:
        self.recorder.call("template", "header")
        res = IndentedBuffer()
        for block in self._header_blocks():
            res.splice(block)
        return res

    def globals(self) -> IndentedBuffer:
        self.recorder.call("template", "globals")
        res = IndentedBuffer()
        for block in self.text.globals:
            res.splice(block)
        return res

    def cute_int(self, int_str: str, var_name: str) -> str:
        """CUTLASSTemplate.cute_int."""
        rec = self.recorder.call("template", "cute_int", int_str, var_name)
        value = "cute::Int<1>{}" if int_str in ("1", "1L") else int_str
        rec.result = f"{value} /* {var_name} */"
        return rec.result

    def cutlass_type_cast(self, node: Buffer | None, ptr: str) -> str:
        """CUTLASSTemplate.cutlass_type_cast (`.get`: an unmapped dtype prints None)."""
        rec = self.recorder.call("template", "cutlass_type_cast", node, ptr)
        if node is None:
            rec.result = ptr
        else:
            rec.result = f"({DTYPE_TO_CUTLASS.get(node.spec.dtype.name)}*)({ptr})"
        return rec.result

    def cutlass_sparse_meta_type_cast(self, node: Buffer | None, ptr: str) -> str:
        """CUTLASSTemplate.cutlass_sparse_meta_type_cast."""
        rec = self.recorder.call("template", "cutlass_sparse_meta_type_cast", node, ptr)
        if node is None:
            rec.result = ptr
        else:
            meta = DTYPE_TO_CUTLASS_SPARSE_META.get(node.spec.dtype.name)
            rec.result = f"({meta}*)({ptr})"
        return rec.result


class Torch211GemmTemplate(Torch211Template):
    """`template` of a torch-2.11 GEMM: CUTLASSGemmTemplate (3.x and 2.x differ only in
    render_gemm_arguments: see the subclasses)."""

    TEMPLATE_API: ClassVar[frozenset[str]] = Torch211Template.TEMPLATE_API | {
        "gemm_mode",
        "render_gemm_arguments",
    }

    def __init__(
        self,
        recorder: Recorder,
        kernel: Torch211Kernel,
        output: Buffer | None,
        render_sub: SubRender,
        text: SplicedText | None = None,
    ) -> None:
        super().__init__(recorder, kernel, output, text)
        self._render_sub = render_sub
        self.roles: dict[str, Buffer | None] = {}  # the instance's buffer of each role

    def __repr__(self) -> str:
        return "<template: torch-2.11 CUTLASSGemmTemplate helpers>"

    def _header_blocks(self) -> tuple[str, ...]:
        return (*self.text.header, *self.text.gemm_header)

    def gemm_mode(self) -> str:
        """CUTLASSGemmTemplate.gemm_mode."""
        rec = self.recorder.call("template", "gemm_mode")
        batched = self.output_node is not None and len(self.output_node.shape) > 2
        rec.result = f"cutlass::gemm::GemmUniversalMode::{'kBatched' if batched else 'kGemm'}"
        return rec.result

    def test_call_statement(self, names_str: str, has: dict[str, bool]) -> str:
        """CUTLASSGemmTemplate.test_call_statement (the standalone runner's call)."""
        arg_types = [
            f"const {p.ctype}*" if not p.is_output else f"{p.ctype}*" for p in self.kernel.params()
        ]
        arg_names = [n.strip() for n in names_str.strip().split(",")]
        arg_names = self._arg_names_for_test_call(arg_names, has)
        arguments = [f"(({t}){n}_data.get())" for t, n in zip(arg_types, arg_names)]
        return (
            f"{self.kernel.kernel_name}({', '.join(arguments)}, M, N, K, B, lda, ldb, ldc, ldd, "
            "0, 0, 0, swizzle, workspace_size_ptr, (uint8_t*)workspace_data.get(), 0);"
        )

    def _arg_names_for_test_call(self, names: list[str], has: dict[str, bool]) -> list[str]:
        raise NotImplementedError

    def _render_nested(
        self, argument_template: str, epilogue_template: str, options: dict[str, Any]
    ) -> str:
        """What both generations' render_gemm_arguments end with: the epilogue sub-template,
        then the argument sub-template with its text as `epilogue_arguments`."""
        epilogue_arguments = self._render_sub(epilogue_template, options)
        return self._render_sub(
            argument_template, {"epilogue_arguments": epilogue_arguments, **options}
        )


class Torch211Gemm3xTemplate(Torch211GemmTemplate):
    """CUTLASS3xGemmTemplate."""

    def __init__(
        self,
        recorder: Recorder,
        kernel: Torch211Kernel,
        output: Buffer | None,
        render_sub: SubRender,
        input_reorder: list[int] | None,
        text: SplicedText | None = None,
    ) -> None:
        super().__init__(recorder, kernel, output, render_sub, text)
        self._input_reorder = input_reorder

    def _arg_names_for_test_call(self, names: list[str], has: dict[str, bool]) -> list[str]:
        """CUTLASS3xGemmTemplate._update_arg_names_for_test_call_statement."""
        if not has.get("Bias"):
            del names[2]
        elif self._input_reorder is not None:
            names[0 : len(self._input_reorder)] = [names[i] for i in self._input_reorder]
        return names

    def render_gemm_arguments(
        self,
        argument_template: str,
        epilogue_template: str,
        should_swap_xw: bool,
        X: Buffer | None,
        W: Buffer | None,
        Bias: Buffer | None,
        Y: Buffer | None,
        alpha: Any,
        beta: Any,
        kernel: Torch211Kernel,
        epilogue_args: Any,
    ) -> str:
        """CUTLASS3xGemmTemplate.render_gemm_arguments: the epilogue sub-template, then the
        argument sub-template with `epilogue_arguments`; X/W (and M/N) exchanged and every
        buffer's last two strides transposed when `should_swap_xw`."""
        rec = self.recorder.call("template", "render_gemm_arguments")
        passed = [("X", 3, X), ("W", 4, W), ("Bias", 5, Bias), ("Y", 6, Y)]
        check_roles(self.recorder, rec, "render_gemm_arguments", passed, self.roles)
        if epilogue_template is None:
            raise self.recorder.abort(
                "KT301",
                "CUTLASS 3.x render_gemm_arguments needs an epilogue template (Inductor "
                "asserts epilogue_template is not None)",
                rec,
                1,
            )
        options: dict[str, Any] = dict(
            alpha=alpha,
            beta=beta,
            X=X,
            W=W,
            Y=Y,
            Bias=Bias,
            template=self,
            kernel=kernel,
            M="M",
            N="N",
            epilogue_args=epilogue_args,
        )
        if should_swap_xw:
            clones = []
            for b in (X, W, Bias, Y):
                if b is None:
                    raise self.recorder.abort(
                        "KT103",
                        "should_swap_xw transposes X, W, Bias and Y; one of them is None "
                        "(Inductor raises AttributeError)",
                        rec,
                    )
                clones.append(b.transposed_view())
            options["X"], options["W"], options["Bias"], options["Y"] = (
                clones[1],
                clones[0],
                clones[2],
                clones[3],
            )
            options["M"], options["N"] = "N", "M"
        return self._render_nested(argument_template, epilogue_template, options)


class Torch211Gemm2xTemplate(Torch211GemmTemplate):
    """CUTLASS2xGemmTemplate."""

    def _arg_names_for_test_call(self, names: list[str], has: dict[str, bool]) -> list[str]:
        """CUTLASS2xGemmTemplate._update_arg_names_for_test_call_statement."""
        if not has.get("Meta"):
            del names[3]
        if not has.get("Bias"):
            del names[2]
        return names

    def render_gemm_arguments(
        self,
        instance_type: str,
        argument_template: str,
        epilogue_template: str | None,
        should_swap_xw: bool,
        X: Buffer | None,
        W: Buffer | None,
        Bias: Buffer | None,
        Meta: Buffer | None,
        Y: Buffer | None,
        alpha: Any,
        beta: Any,
        kernel: Torch211Kernel,
        epilogue_args: Any,
    ) -> str:
        """CUTLASS2xGemmTemplate.render_gemm_arguments (no swap; `split_k=1` without an
        epilogue template)."""
        rec = self.recorder.call("template", "render_gemm_arguments")
        passed = [("X", 4, X), ("W", 5, W), ("Bias", 6, Bias), ("Meta", 7, Meta), ("Y", 8, Y)]
        check_roles(self.recorder, rec, "render_gemm_arguments", passed, self.roles)
        options: dict[str, Any] = dict(
            instance_type=instance_type,
            alpha=alpha,
            beta=beta,
            X=X,
            W=W,
            Y=Y,
            Bias=Bias,
            Meta=Meta,
            template=self,
            kernel=kernel,
            M="M",
            N="N",
            epilogue_args=epilogue_args,
        )
        if epilogue_template is None:
            return self._render_sub(argument_template, {"split_k": 1, **options})
        return self._render_nested(argument_template, epilogue_template, options)
