"""The runtime's Inductor semantics, helper by helper."""

from __future__ import annotations

from kls.dtypes import lookup_dtype
from kls.instances.schema import TensorSpec, column_major_strides, contiguous_strides
from kls.runtime import Buffer, Kernel, Recorder
from kls.runtime.record import RenderAbort


def buf(
    name: str, shape: tuple[int, ...], stride: tuple[int, ...] | None = None, offset: int = 0
) -> Buffer:
    dtype = lookup_dtype("bf16")
    assert dtype is not None
    return Buffer.of(TensorSpec(name, shape, dtype, stride or contiguous_strides(shape), offset))


def kernel() -> Kernel:
    return Kernel("k", Recorder())


def test_strides() -> None:
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert column_major_strides((2, 3, 4)) == (12, 1, 3)


def test_def_kernel_reorders_inputs_and_names_positionally() -> None:
    k = kernel()
    x, w, b, y = buf("x", (4, 8)), buf("w", (8, 2)), buf("b", (4, 2)), buf("y", (4, 2))
    sig = k.def_kernel([x, w, b], [y], "X, W, Bias, Y", [2, 0, 1])
    assert sig == (
        "PT_EXPORT int k(const bfloat16* Bias, const bfloat16* X, const bfloat16* W, "
        "bfloat16* Y, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)"
    )
    assert k.ptr(b) == "Bias"


def test_none_input_is_skipped_but_consumes_its_name() -> None:
    k = kernel()
    x, y = buf("x", (4, 8)), buf("y", (4, 2))
    k.def_kernel([x, None], [y], "X, Bias, Y")
    assert [p.name for p in k.params()] == ["X", "Y"]
    assert k.ptr(None) == "nullptr"


def test_same_buffer_twice_is_one_parameter_named_after_the_last() -> None:
    k = kernel()
    a, y = buf("a", (4, 4)), buf("y", (4, 4))
    k.def_kernel([a, a], [y], "A, At, Y")
    assert [p.name for p in k.params()] == ["At", "Y"]
    assert [f.code for f in k.recorder.findings] == ["KT206"]


def test_names_count_mismatch_aborts() -> None:
    k = kernel()
    try:
        k.def_kernel([buf("x", (2, 2))], [buf("y", (2, 2))], "X")
    except RenderAbort as exc:
        assert exc.finding.code == "KT201"
    else:
        raise AssertionError("expected RenderAbort")


def test_size_is_inclusive_and_defaults_on_empty_ranges() -> None:
    k = kernel()
    t = buf("t", (2, 3, 4))
    assert k.size(t, 0, -1) == "24"
    assert k.size(t, -2) == "3"
    assert k.size(buf("m", (3, 4)), 0, -3, default_value=1) == "1"
    assert k.size(None, 0, default_value=7) == "7"


def test_stride_negative_before_first_dim_is_default() -> None:
    k = kernel()
    m = buf("m", (3, 4))
    assert k.stride(m, -1) == "1"
    assert k.stride(m, -2) == "4"
    assert k.stride(m, -3) == "0"
    assert k.stride(m, -3, default_value=5) == "5"


def test_ptr_offset_and_unregistered_buffer() -> None:
    k = kernel()
    x, y, z = buf("x", (2, 2), offset=16), buf("y", (2, 2)), buf("z", (2, 2))
    k.def_kernel([x], [y], "X, Y")
    assert k.ptr(x) == "X + 16"
    assert k.ptr(z) == "nullptr"
    assert k.check_not_null(z) == ""
    assert [f.code for f in k.recorder.findings] == ["KT204", "KT204"]


def test_row_or_column_stride() -> None:
    k = kernel()
    assert k.row_or_column_stride(buf("r", (4, 8))) == "8"
    assert k.row_or_column_stride(buf("c", (4, 8), column_major_strides((4, 8)))) == "4"
    assert k.row_or_column_stride(None, default_value=3) == "3"


def test_check_not_null_names_size() -> None:
    k = kernel()
    x, y = buf("x", (4, 8)), buf("y", (4, 8))
    k.def_kernel([x], [y], "X, Y")
    text = k.check_not_null(x)
    assert "if (!X)" in text and "int64_t X_size = 32;" in text
