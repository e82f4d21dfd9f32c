"""The torch-2.11 profile, against what torch 2.11.0's Inductor does.

Expected values are read from the torch 2.11.0 wheel's torch/_inductor/codegen/cutlass/ sources
(the function is named at each test) or, for whole texts, from Inductor's own rendering on the
H200 (tests/data/inductor211_renders.json, written by benchmarks/conformance.py inductor).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kls.checks.run import check_paths
from kls.checks.signatures import helpers
from kls.checks.static import static_findings
from kls.dtypes import lookup_dtype
from kls.findings import Severity
from kls.instances import load_instances
from kls.instances.schema import TensorSpec, column_major_strides, contiguous_strides
from kls.profiles.torch211.ops import DYNAMIC_CLUSTER_SHAPE, dynamic_cluster_block
from kls.profiles.torch211.runtime import (
    GEMM_RUNTIME_ARGS,
    Torch211Gemm3xTemplate,
    Torch211Kernel,
    Torch211Template,
    spliced_text,
    sympy_product_str,
)
from kls.render import context_names, render
from kls.runtime.buffers import Buffer
from kls.runtime.record import Recorder
from kls.template.model import parse_template
from tests.conftest import ROOT, TEMPLATES, Workspace, codes
from tests.upstream import needs_torch_source, require_torch_source

RENDERS = json.loads((Path(__file__).parents[1] / "data" / "inductor211_renders.json").read_text())


def _buffer(name: str, shape: tuple[int, ...], stride: tuple[int, ...], offset: int = 0) -> Buffer:
    dtype = lookup_dtype("bf16")
    assert dtype is not None
    return Buffer.of(TensorSpec(name, shape, dtype, stride, offset))


def _gemm(
    bias: bool = False, reorder: list[int] | None = None, batch: int = 0
) -> tuple[Torch211Kernel, dict[str, Buffer | None]]:
    """A kernel after torch 2.11's predefined def_kernel (CUTLASSGemmTemplate.render)."""
    m, n, k = 64, 32, 16
    lead = (batch,) if batch else ()
    bufs: dict[str, Buffer | None] = {
        "X": _buffer("X", (*lead, m, k), contiguous_strides((*lead, m, k))),
        "W": _buffer("W", (*lead, k, n), column_major_strides((*lead, k, n))),
        "Bias": _buffer("Bias", (m, n), (0, 1)) if bias else None,
        "Y": _buffer("Y", (*lead, m, n), contiguous_strides((*lead, m, n))),
    }
    kernel = Torch211Kernel("KERNEL", Recorder(), True, GEMM_RUNTIME_ARGS, [8])
    kernel.def_kernel([bufs["X"], bufs["W"], bufs["Bias"]], [bufs["Y"]], "X,W,Bias,Y", reorder)
    return kernel, bufs


def test_signature_text_and_its_arguments() -> None:
    """CUTLASSTemplateKernel.def_kernel: tensors (DTYPE_TO_CUTLASS_TYPE), `const int` for
    M..ldd, one `<name>_offset` per named node, runtime args joined by ',', _EXTRA_CPP_ARGS."""
    kernel, _ = _gemm(bias=True, reorder=[2, 0, 1])
    assert kernel.call_signature() == (
        "int KERNEL(const __nv_bfloat16* Bias, const __nv_bfloat16* X, "
        "const __nv_bfloat16* W, __nv_bfloat16* Y, const int M, const int N, const int K, "
        "const int B, const int lda, const int ldb, const int ldc, const int ldd, "
        "const int Bias_offset, const int X_offset, const int W_offset, const int Y_offset, "
        "const uint8_t swizzle, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)"
    )
    # CUTLASSKernel.get_layout_args / get_offset_args + runtime_arg_values (call_kernel)
    assert kernel.extra_args() == [
        *(("const int", v) for v in (64, 32, 16, 1, 16, 16, 0, 32)),
        *(("const int", 0) for _ in range(4)),
        ("const uint8_t", 8),
    ]


def test_pointer_size_and_stride_helpers() -> None:
    kernel, b = _gemm()
    X, W, Y = b["X"], b["W"], b["Y"]
    assert kernel.ptr(X) == "X + X_offset"  # CUTLASSTemplateKernel.ptr
    assert kernel.ptr(None) == "nullptr"
    # CUTLASSTemplateKernel.size: layout symbols where they match, sympy's product order
    assert kernel.size(X, -2) == "M"
    assert kernel.size(X, -1) == "K"
    assert kernel.size(W, -1) == "N"
    assert kernel.size(X, 0, -1) == "K*M"
    assert kernel.size(Y, 0, -3, default_value=1) == "1"  # GEMM_TEMPLATE_CUTLASS_2X's B
    # CUTLASSTemplateKernel.stride: literal when <= 1, else the symbol (lda.. at the ld dim)
    assert kernel.stride(X, -2) == "lda"
    assert kernel.stride(X, -1) == "1"
    assert kernel.stride(W, -1) == "ldb"  # column-major W: ld is dim -1
    assert kernel.stride(W, -2) == "1"
    assert kernel.stride(Y, -2) == "ldd"
    assert kernel.stride(None, -2, 1) == "1"
    assert kernel.stride(X, -3) == "0"  # index before the first dim: default
    # batch_stride: default for rank < 3
    assert kernel.batch_stride(X) == "0"
    # row_or_column_stride goes through CppPrinter: an `L` suffix
    assert kernel.row_or_column_stride(X) == "16L"
    assert kernel.row_or_column_stride(W) == "16L"
    # DTYPE_TO_CPP / _DTYPE_TO_CUTLASS
    assert kernel.dtype(X) == "at::BFloat16"
    assert kernel.dtype(None) == "void"
    assert kernel.cutlass_dtype(X) == "cutlass::bfloat16_t"
    assert kernel.cutlass_dtype(None, default_dtype="uint8_t") == "uint8_t"
    # max_valid_index: sum((size - 1) * stride)
    assert kernel.max_valid_index(X) == 63 * 16 + 15
    assert kernel.max_valid_index(None) == -1
    assert kernel.get_layout_args() == (64, 32, 16, 1, 16, 16, 0, 32)
    assert kernel.runtime_arg_values == [8]
    assert [(a.name, a.ty) for a in kernel.runtime_arg_info] == [("swizzle", "const uint8_t")]


def test_batched_helpers() -> None:
    kernel, b = _gemm(batch=4)
    X, W = b["X"], b["W"]
    assert kernel.size(X, 0) == "B"  # init_layout_args adds B for X of rank > 2
    assert kernel.size(X, 0, -1) == "B*K*M"
    assert kernel.size(W, 0) == "4"  # only X carries B
    assert kernel.batch_stride(X) == "M*K"  # "{}*{}".format(size1, size2), not sympy
    assert kernel.batch_stride(W) == "K*N"
    assert kernel.stride(X, 0) == str(64 * 16)  # no symbol for the batch stride
    assert kernel.get_layout_args()[3] == 4


def test_bias_helpers() -> None:
    kernel, b = _gemm(bias=True)
    bias = b["Bias"]
    assert kernel.stride(bias, -2, 1) == "0"  # broadcast: 0 <= 1 prints the literal
    assert kernel.stride(bias, -1, 1) == "1"
    assert kernel.size(bias, 0, -1) == str(64 * 32)  # Bias has no size symbols
    assert kernel.get_layout_args()[6] == 0  # ldc of a (0, 1) bias: stride[-2]


def test_check_not_null_text() -> None:
    """CUTLASSTemplateKernel.check_not_null: IndentedBuffer(initial_indent=2), tabwidth 1."""
    kernel, b = _gemm()
    assert kernel.check_not_null(b["X"]) == (
        "\n"
        "  {\n"
        "    if (!X) {\n"
        "      int64_t X_size = K*M;\n"
        "      if (X_size > 0) {\n"
        '        throw std::runtime_error("input X is null but size is not 0!");\n'
        "      }\n"
        "    }\n"
        "  }\n"
    )


@needs_torch_source
def test_template_helpers() -> None:
    """header()/globals() splice the blocks read from the torch source's own methods."""
    text = spliced_text(require_torch_source().package)
    assert text.upstream
    kernel, b = _gemm()
    api = Torch211Gemm3xTemplate(Recorder(), kernel, b["Y"], lambda s, c: "", None, text)
    assert api.cute_int("1", "stride_x1") == "cute::Int<1>{} /* stride_x1 */"
    assert api.cute_int("lda", "stride_x0") == "lda /* stride_x0 */"
    assert api.cutlass_type_cast(b["X"], "X + X_offset") == "(cutlass::bfloat16_t*)(X + X_offset)"
    assert api.cutlass_type_cast(None, "nullptr") == "nullptr"
    assert api.gemm_mode() == "cutlass::gemm::GemmUniversalMode::kGemm"
    header = api.header().getvalue()
    # CUTLASSTemplate.header + CUTLASSGemmTemplate.header: three spliced blocks
    assert header.startswith("\n#include <exception>\n")
    assert '#include "cutlass/gemm/device/gemm_sparse.h"\n' in header
    assert "cuda_fp16.h" not in header
    globals_ = api.globals().getvalue()
    assert "using bfloat16 = nv_bfloat16;" not in globals_
    assert "struct identity_op {" in globals_
    assert globals_.endswith("  T operator()(T val) const { return val; }\n};\n")
    plain = Torch211Template(Recorder(), kernel, b["Y"], text)
    assert "gemm_sparse.h" not in plain.header().getvalue()
    meta = Buffer.of(TensorSpec("Meta", (4, 4), lookup_dtype("int32"), (4, 1)))  # type: ignore[arg-type]
    assert plain.cutlass_sparse_meta_type_cast(meta, "p") == "(uint32_t*)(p)"


def test_without_a_torch_source_the_text_is_kls_own_equivalent(tmp_path: Path) -> None:
    """No source (or one whose methods moved): the same includes and kls's own PT_EXPORT and
    CUTLASS_CHECK, so a torch-2.11 kernel of the user's own still renders and compiles."""
    for package in (None, tmp_path):
        text = spliced_text(package)
        assert not text.upstream
        kernel, b = _gemm()
        api = Torch211Gemm3xTemplate(Recorder(), kernel, b["Y"], lambda s, c: "", None, text)
        header = api.header().getvalue()
        assert "#include <exception>" in header and '"cutlass/gemm/gemm.h"' in header
        globals_ = api.globals().getvalue()
        assert "PT_EXPORT" in globals_ and "CUTLASS_CHECK" in globals_
    assert "CUTLASSGemmTemplate" in repr(api) and "0x" not in repr(api)


def test_sympy_product_printing() -> None:
    assert sympy_product_str(["M", "K"]) == "K*M"
    assert sympy_product_str([4, "N", "K"]) == "4*K*N"
    assert sympy_product_str([4, 8]) == "32"


def test_dynamic_cluster_block() -> None:
    """CUTLASSGemmTemplate._dynamic_cluster_block with the default 2,1,1 config."""

    class Td:
        cluster_shape = (0, 0, 1)

    class Op:
        tile_description = Td()

    assert DYNAMIC_CLUSTER_SHAPE == (2, 1, 1)
    assert dynamic_cluster_block(Op()) == (
        "  hw_info.cluster_shape = {2, 1, 1};\n  hw_info.cluster_shape_fallback = {2, 1, 1};"
    )
    Td.cluster_shape = (2, 1, 1)
    assert dynamic_cluster_block(Op()) == ""


def _conformance() -> Any:
    spec = importlib.util.spec_from_file_location(
        "conformance", ROOT / "benchmarks" / "conformance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance"] = module
    spec.loader.exec_module(module)
    return module


@needs_torch_source
@pytest.mark.parametrize("case", sorted(RENDERS["cases"]))
def test_rendering_equals_inductors_own(case: str, tmp_path: Path) -> None:
    """The whole text Inductor rendered on the H200 (kept as its digest), rendered by kls from
    the torch source's own templates, and the args Inductor passes at each call."""
    conformance = _conformance()
    config = conformance.write_config(tmp_path)
    spec = load_instances(config).instances[case]
    assert spec.torch_package is not None
    result = render(spec)
    assert result.text is not None, [f.message for f in result.findings]
    expected = RENDERS["cases"][case]
    kls = conformance.normalize(result.text, spec.kernel_name)
    assert conformance.first_difference_from_digest(expected["render"], kls) == ""
    assert isinstance(result.kernel, Torch211Kernel)
    assert [v for _, v in result.kernel.extra_args()] == expected["extra_args"]
    assert result.op is not None and result.op.conf_name == expected["op_conf_name"]


@needs_torch_source
def test_context_names() -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances["torch211_sm90_bf16_4096_bias"]
    names = set(context_names(spec))
    # CUTLASSGemmTemplate.render's options
    assert {
        "kernel_call_signature",
        "test_call_statement",
        "epilogue_visitor_tree",
        "dynamic_cluster",
        "op_conf_name",
        "epilogue_args",
        "input_reorder",
        "Bias",
    } <= names
    assert "kernel_name" not in names and "swizzle" not in names
    old = load_instances(TEMPLATES / "kls.toml").instances["sm90_bf16_4096_bias"]
    assert "kernel_call_signature" not in context_names(old)


@needs_torch_source
def test_upstream_templates_check_clean() -> None:
    """The shipped torch211_* instances over the torch source's own templates: 0 errors."""
    result = check_paths([TEMPLATES / "kls.toml"])
    errors = [f.format_line() for f in result.findings if f.severity == Severity.ERROR]
    assert errors == []
    rendered = {n for n in result.renders if n.startswith("torch211_")}
    assert rendered == {
        n for n in load_instances(TEMPLATES / "kls.toml").instances if n.startswith("torch211_")
    }


def test_helpers_follow_the_profile() -> None:
    model = parse_template("{{ kernel.batch_stride(X) }}{{ kernel.offset(X) }}\n")
    old = static_findings(model, "t", [("inductor-2023", "cutlass_gemm")])
    assert codes(old) == ["KT305"]
    assert "torch-2.11 has it" in old[0].message
    new = static_findings(model, "t", [("torch-2.11", "cutlass_gemm")])
    assert codes(new) == ["KT305"]  # kernel.offset is gone in 2.11
    assert "kernel.offset" in new[0].message
    assert ("kernel", "batch_stride") in helpers("torch-2.11")
    assert ("kernel", "batch_stride") not in helpers("inductor-2023")


def test_render_gemm_arguments_forms() -> None:
    three = "{{ template.render_gemm_arguments(a, e, s, X, W, Bias, Y, al, be, kernel, ea) }}"
    two = (
        "{{ template.render_gemm_arguments(t, a, e, s, X, W, Bias, Meta, Y, al, be, kernel, ea) }}"
    )
    bad = "{{ template.render_gemm_arguments(a, e, s, X, W) }}"
    ctx = [("torch-2.11", "cutlass_gemm")]
    assert static_findings(parse_template(three), "t", ctx) == []
    assert static_findings(parse_template(two), "t", ctx) == []
    assert codes(static_findings(parse_template(bad), "t", ctx)) == ["KT301"]
    # the 2023 signature has no 13-argument form
    assert codes(
        static_findings(parse_template(two), "t", [("inductor-2023", "cutlass_gemm")])
    ) == ["KT301"]


def test_reserved_c_names_follow_profile_and_kind() -> None:
    model = parse_template('{{ kernel.def_kernel([X], [Y], "M, lda") }}\n')
    # a plain CUDA kernel declares no M or lda (issue 11): only the 2023 GEMM templates do
    assert codes(static_findings(model, "t", [("inductor-2023", "cuda")])) == []
    assert codes(static_findings(model, "t", [("inductor-2023", "cutlass_gemm")])) == [
        "KT208",
        "KT208",
    ]
    # a plain CUDA kernel under torch-2.11 has no M..ldd parameters
    assert codes(static_findings(model, "t", [("torch-2.11", "cuda")])) == []
    assert codes(static_findings(model, "t", [("torch-2.11", "cutlass_gemm")])) == [
        "KT208",
        "KT208",
    ]
    offsets = parse_template('{{ kernel.def_kernel([X], [Y], "workspace, Y") }}\n')
    assert codes(static_findings(offsets, "t", [("torch-2.11", "cuda")])) == ["KT208"]


def test_runtime_offset_name_collision(ws: Workspace) -> None:
    tensors = (
        'tensors.X = { shape = [4, 8], dtype = "bf16" }\n'
        'tensors.Y = { shape = [4, 8], dtype = "bf16" }\n'
    )
    template = 'extern "C" {\nPT_EXPORT {{kernel.def_kernel([X], [Y], "Y_offset, Y")}} {}\n}\n'
    instances = ws.instance(template, 'profile = "torch-2.11"', tensors)
    result = render(instances.instances["i"])
    assert "KT208" in [f.code for f in result.findings]


def test_old_profile_name_reads_with_a_warning(ws: Workspace) -> None:
    instances = ws.instance("x\n", 'profile = "inductor-2025"')
    assert [(f.code, f.severity) for f in instances.findings] == [("KT002", Severity.WARNING)]
    assert "torch-2.11" in instances.findings[0].message
    assert instances.instances["i"].profile == "torch-2.11"
    bad = ws.instance("x\n", 'profile = "inductor-2099"')
    assert [(f.code, f.severity) for f in bad.findings] == [("KT002", Severity.ERROR)]


@needs_torch_source
def test_swizzle_is_a_runtime_argument_not_a_template_name(ws: Workspace) -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances["torch211_sm90_bf16_4096"]
    result = render(spec)
    assert result.text is not None
    assert "arguments.scheduler.max_swizzle_size = swizzle;" in result.text
    assert isinstance(result.kernel, Torch211Kernel)
    # the instance's own swizzle (what the last `kls tune --apply` wrote), passed at each call
    assert result.kernel.extra_args()[-1] == ("const uint8_t", spec.variables["swizzle"])


def test_kls_rules_lists_the_profiles_api(capsys: pytest.CaptureFixture[str]) -> None:
    from kls.cli import main

    assert main(["rules", "--profile", "torch-2.11"]) == 0
    out = capsys.readouterr().out
    assert "helper\tkernel.batch_stride(node, default_value=…)" in out
    assert "kernel.runtime_arg_values" in out
    assert main(["rules", "--profile", "inductor-2023"]) == 0
    assert "batch_stride" not in capsys.readouterr().out
