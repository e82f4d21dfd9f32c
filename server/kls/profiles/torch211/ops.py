"""How torch 2.11's Inductor turns a generated CUTLASS op into `instance_definition` (the
op filter, the swap, the instance text), and `emit_instance_torch211`, its cached form.

Mirrored from torch 2.11.0, `torch/_inductor/codegen/cutlass/`:
- `gemm_template.py` `CUTLASSGemmTemplate.filter_op` (layouts, alignments, epilogue element),
  `CUTLASS3xGemmTemplate._set_bias_layout_and_alignment` / the 2.x one, `render` (C element,
  `should_swap_XW` + `swap_XW`), `_define_gemm_instance` (3.x and 2.x) and
  `_dynamic_cluster_block`;
- `utils.py` `get_max_alignment` / `get_alignments`;
- `lib_extensions/gemm_operation_extensions.py` `EmitGemmUniversal3xInstanceWithEVT.emit`:
  its instance skeleton is read from the located torch source (`instance_skeleton`) and filled
  with the op's tags; the EVT, mixed-input and block-scaled branches, which GEMMs without an
  epilogue fusion never take, are not mirrored (such an op is refused, not approximated).

Everything here is a plain function of the op, the instance tensors' layouts and the skeleton.
"""

from __future__ import annotations

import copy
import enum
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.cutlass.ops import (
    DEFAULT_LEVEL,
    GENERATE_LOCK,
    EmittedOp,
    OpLookupError,
    TensorLayout,
    cutlass_version,
    generated_op,
)
from kls.profiles.elements import accumulator_refusal, element_refusal, layout_word
from kls.upstream.blocks import UpstreamTextError, attribute_string

# Default of config.cutlass.cutlass_dynamic_cluster_shape (and of the fallback).
DYNAMIC_CLUSTER_SHAPE = (2, 1, 1)


class Refused(Exception):
    """Inductor would not pick this op for these tensors (filter_op returns None)."""


@dataclass(frozen=True)
class Emitted211:
    definition: str
    type_name: str
    is_3x: bool
    should_swap_xw: bool
    conf_name: str
    dynamic_cluster: str
    filtered_name: str = ""  # configuration_name() after filter_op (what Inductor's allowlist sees)


def get_alignments(dtype: str) -> list[int]:
    """utils.get_alignments."""
    if dtype in ("float16", "bfloat16"):
        return [8, 4, 2, 1]
    if dtype in ("float32", "int32"):
        return [4, 2, 1]
    if dtype in ("uint8", "int8", "float8_e4m3fn", "float8_e5m2"):
        return [16, 8, 4, 2]
    raise Refused(f"Inductor has no CUTLASS alignments for dtype {dtype}")


def get_max_alignment(t: TensorLayout) -> int:
    """utils.get_max_alignment: the largest alignment (elements) the layout allows."""
    try:
        contiguous_dim = list(t.stride).index(1)
    except ValueError:
        return 1
    for alignment in get_alignments(t.dtype):
        if t.shape[contiguous_dim] % alignment or t.offset % alignment:
            continue
        if all(
            dim == contiguous_dim or t.stride[dim] % alignment == 0 for dim in range(len(t.shape))
        ):
            return alignment
    return 1


def _cutlass_layout(t: TensorLayout) -> Any:
    """CUTLASSGemmTemplate.cutlass_layout: RowMajor if stride[-1] == 1, ColumnMajor if
    stride[-2] == 1, else None."""
    from cutlass_library import library

    if t.stride[-1] == 1:
        return library.LayoutType.RowMajor
    if t.stride[-2] == 1:
        return library.LayoutType.ColumnMajor
    return None


def _flip(layout: Any) -> Any:
    from cutlass_library import library

    row, col = library.LayoutType.RowMajor, library.LayoutType.ColumnMajor
    return col if layout == row else row


def _set_alignment(t: TensorLayout, element: Any, sm: int, what: str) -> None:
    """CUTLASSGemmTemplate.set_alignment (refuses on SM90+ when the layout aligns less)."""
    alignment = get_max_alignment(t)
    if sm >= 90 and alignment < element.alignment:
        raise Refused(
            f"{what} allows alignment {alignment} but the op needs {element.alignment}; "
            "Inductor skips this op for these tensors (set_alignment)"
        )
    element.alignment = alignment


def _torch_to_cutlass(dtype: str) -> Any:
    """utils.torch_dtype_to_cutlass_type."""
    from cutlass_library import library

    table = {
        "float32": library.DataType.f32,
        "float16": library.DataType.f16,
        "bfloat16": library.DataType.bf16,
    }
    if dtype not in table:
        raise Refused(f"Inductor's CUTLASS backend does not support dtype {dtype} here")
    return table[dtype]


def has_tma_epilogue(op: Any) -> bool:
    """CUTLASS3xGemmTemplate._has_tma_epilogue."""
    from cutlass_library import library

    if op.gemm_kind != library.GemmKind.Universal3x:
        return False
    return str(op.epilogue_schedule).split(".")[-1].lower().startswith("tma")


def should_swap_xw(bias: TensorLayout | None) -> bool:
    """CUTLASSGemmTemplate.should_swap_XW: a row-major (or broadcast-row) bias swaps X and W."""
    return bias is not None and len(bias.stride) >= 2 and bias.stride[-1] in (0, 1)


def _swap_xw(op: Any) -> Any:
    """CUTLASSGemmTemplate.swap_XW."""
    new_op = copy.deepcopy(op)
    new_op.A.layout = _flip(new_op.A.layout)
    new_op.B.layout = _flip(new_op.B.layout)
    new_op.A, new_op.B = new_op.B, new_op.A
    new_op.C.layout = _flip(new_op.C.layout)
    new_op.D.layout = _flip(new_op.D.layout)
    return new_op


def emit_torch211(
    op: Any,
    x: TensorLayout,
    w: TensorLayout,
    bias: TensorLayout | None,
    y: TensorLayout,
    sm: int,
    skeleton: Skeleton | None = None,
) -> Emitted211:
    """filter_op, then render's op handling and _define_gemm_instance, for one op."""
    from cutlass_library import library

    is_3x = op.gemm_kind == library.GemmKind.Universal3x
    if op.gemm_kind not in (library.GemmKind.Universal3x, library.GemmKind.Universal):
        raise Refused("only dense universal GEMM ops are mirrored (sparse 2.x is not)")
    if not is_3x and (len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[0]):
        raise Refused("CUTLASS2xGemmTemplate needs 2-D X and W with X.size(1) == W.size(0)")
    # filter_op
    op = copy.deepcopy(op)
    for t, element in ((x, op.A), (w, op.B)):
        layout = _cutlass_layout(t)
        if layout != element.layout:
            element.layout = layout
    op.D.layout = _cutlass_layout(y)
    _set_alignment(x, op.A, sm, "X")
    _set_alignment(w, op.B, sm, "W")
    _set_alignment(y, op.D, sm, "Y")
    op.element_epilogue = op.accumulator_type()
    if is_3x:  # CUTLASS3xGemmTemplate._set_bias_layout_and_alignment
        if bias is not None:
            op.C.element = _torch_to_cutlass(bias.dtype)
            op.C.layout = _cutlass_layout(bias)
            _set_alignment(bias, op.C, sm, "Bias")
        else:
            op.C.element = library.DataType.void
    elif bias is not None:  # CUTLASS2xGemmTemplate._set_bias_layout_and_alignment
        if _cutlass_layout(bias) != op.D.layout:
            raise Refused("for CUTLASS 2.x, Inductor needs Bias in the layout of Y")
        _set_alignment(bias, op.C, sm, "Bias")
    else:
        op.C.layout = op.D.layout
    for element in (op.A, op.B, op.C, op.D):
        if element.layout is None:
            raise Refused("a tensor is neither row- nor column-major")
    filtered_name = op.configuration_name()
    # render
    op = copy.deepcopy(op)
    if bias is not None:
        op.C.element = op.A.element
    swap = False
    if (
        bias is not None
        and has_tma_epilogue(op)
        and op.epilogue_schedule != library.EpilogueScheduleType.EpilogueTransposed
        and should_swap_xw(bias)
    ):
        op = _swap_xw(op)
        swap = True
    definition, type_name = _define_3x(op, skeleton) if is_3x else _define_2x(op)
    return Emitted211(
        definition,
        type_name,
        is_3x,
        swap,
        op.configuration_name(),
        dynamic_cluster_block(op),
        filtered_name,
    )


def dynamic_cluster_block(op: Any) -> str:
    """CUTLASSGemmTemplate._dynamic_cluster_block at Inductor's default config: an op whose
    cluster's M or N extent is a runtime value (0) gets `hw_info.cluster_shape` and its
    fallback set; the K extent is the op's own when fixed, else the default's."""
    shape = tuple(getattr(getattr(op, "tile_description", None), "cluster_shape", None) or ())
    if len(shape) < 2 or min(shape[:2]) > 0:
        return ""
    own_k = shape[2] if len(shape) > 2 and shape[2] > 0 else None
    m, n, k = DYNAMIC_CLUSTER_SHAPE
    preferred = (m, n, own_k or k)
    # The fallback's K: its own when positive, else the preferred K.
    fallback = (m, n, k if k > 0 else preferred[2])
    lines = (
        ("cluster_shape", preferred),
        ("cluster_shape_fallback", fallback),
    )
    return "\n".join(
        f"  hw_info.{field} = {{{', '.join(str(v) for v in dims)}}};" for field, dims in lines
    )


def _define_2x(op: Any) -> tuple[str, str]:
    """CUTLASS2xGemmTemplate._define_gemm_instance (dense)."""
    from cutlass_library import gemm_operation

    op_def = gemm_operation.EmitGemmInstance().emit(op)
    op_def = op_def.replace("cutlass::gemm::device::Gemm", "cutlass::gemm::device::GemmUniversal")
    op_def = op_def.replace("false,", "")
    match = re.match(r"\s*using\s(.*?)\s=", op_def.split("\n")[2])
    if match is None:
        raise Refused("Invalid Gemm config")
    return op_def, match.group(1)


def _define_3x(op: Any, skeleton: Skeleton | None) -> tuple[str, str]:
    """CUTLASS3xGemmTemplate._define_gemm_instance."""
    from cutlass_library import library

    if not hasattr(op, "epilogue_functor") or not isinstance(op.epilogue_functor, enum.Enum):
        op = copy.deepcopy(op)
        op.epilogue_functor = library.EpilogueFunctor.LinearCombination
    op_def = _emit_3x(op, skeleton)
    decl = [line for line in op_def.split("\n") if "struct " in line][-1]
    match = re.match(r"\s*struct\s(.*?)\s:", decl)
    if match is None:
        raise Refused("Invalid Gemm config")
    op_type = match.group(1)
    op_def += (
        f"\n  using {op_type}_device_type = "
        f"cutlass::gemm::device::GemmUniversalAdapter<{op_type}>;\n"
    )
    return op_def, f"{op_type}_device_type"


# Where torch 2.11 keeps the CUTLASS 3.x instance skeleton it substitutes (read in place from
# the torch source, never stored here).
_EXTENSIONS_PY = "_inductor/codegen/cutlass/lib_extensions/gemm_operation_extensions.py"
_EMITTER = "EmitGemmUniversal3xInstanceWithEVT"


@dataclass(frozen=True)
class Skeleton:
    """The `${...}` texts Inductor's 3.x emitter fills: the instance and its epilogue functor."""

    instance: str
    functor: str


@functools.lru_cache(maxsize=8)
def instance_skeleton(torch_package: Path | None) -> Skeleton | None:
    """The skeleton of the torch source at `torch_package`, or None (no source, or the text
    is not where torch 2.11 keeps it: cutlass_library's own emitter is used instead)."""
    if torch_package is None:
        return None
    file = torch_package / _EXTENSIONS_PY
    try:
        return Skeleton(
            attribute_string(file, _EMITTER, "gemm_template"),
            attribute_string(file, _EMITTER, "builtin_epilogue_functor_template"),
        )
    except UpstreamTextError:
        return None


def _emit_3x(op: Any, skeleton: Skeleton | None) -> str:
    """What EmitGemmUniversal3xInstanceWithEVT(evt_name=None).emit writes for a dense,
    non-grouped, non-mixed, non-block-scaled op: torch's skeleton filled with the op's tags.
    Without the skeleton, cutlass_library's own 3.x emitter (the same builders, laid out by
    CUTLASS rather than Inductor)."""
    from cutlass_library import gemm_operation
    from cutlass_library import library as lib

    if lib.is_grouped(op.gemm_kind) or lib.is_block_scaled(op.gemm_kind):
        raise Refused("grouped and block-scaled GEMMs are not mirrored")
    if getattr(op, "mixed_input_mode", None) is not None or op.is_complex():
        raise Refused("mixed-input and complex GEMMs are not mirrored")
    if op.arch == 100:
        raise Refused("SM100 ops are not mirrored")
    if skeleton is None:
        return str(gemm_operation.EmitGemmUniversal3xInstance().emit(op))
    values = {**_operand_tags(op, lib), **_tile_tags(op, lib), **_schedule_tags(op, lib)}
    values["epilogue_functor"] = lib.SubstituteTemplate(
        skeleton.functor,
        {
            "epilogue_functor": lib.EpilogueFunctor3xTag[op.epilogue_functor],
            "element_epilogue": values["element_epilogue"],
        },
    )
    return str(lib.SubstituteTemplate(skeleton.instance, values))


def _operand_tags(op: Any, lib: Any) -> dict[str, str]:
    """Element type, layout and alignment of A, B, C, D; accumulator and epilogue types."""
    tags: dict[str, str] = {}
    for letter in "abcd":
        operand = getattr(op, letter.upper())
        tags[f"element_{letter}"] = str(lib.DataTypeTag[operand.element])
        tags[f"align_{letter}"] = str(operand.alignment)
        tags[f"layout_{letter}"] = str(lib.LayoutTag[operand.layout])
    tags["element_accumulator"] = str(lib.DataTypeTag[op.accumulator_type()])
    tags["element_epilogue"] = str(lib.DataTypeTag[op.element_epilogue])
    return tags


def _tile_tags(op: Any, lib: Any) -> dict[str, str]:
    """Tile and cluster extents (a cluster extent of 0 is a runtime `int`), stage count."""
    td = op.tile_description
    tags = {f"tile_shape_{axis}": str(v) for axis, v in zip("mnk", td.tile_shape)}
    for axis, v in zip("mnk", td.cluster_shape):
        tags[f"cluster_shape_{axis}"] = f"cute::_{v}" if v > 0 else "int"
    if td.stages > 0:
        tags["stages"] = f"cutlass::gemm::collective::StageCount<{td.stages}>"
    else:  # as many stages as fit beside the epilogue's shared storage
        carve = f"sizeof(typename {op.procedural_name()}_epilogue::SharedStorage)"
        tags["stages"] = (
            f"cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>({carve})>"
        )
    return tags


def _schedule_tags(op: Any, lib: Any) -> dict[str, str]:
    """Names, arch, opcode class and the kernel/epilogue/tile schedules."""
    opcode = str(lib.OpcodeClassTag[op.tile_description.math_instruction.opcode_class])
    return {
        "operation_name": op.procedural_name(),
        "operation_suffix": "",
        "problem_shape": "cute::Shape<int,int,int,int>",
        "arch": f"cutlass::arch::Sm{op.arch}",
        "opcode_class_main": opcode,
        "opcode_class_epi": opcode,
        "kernel_schedule": str(lib.KernelScheduleTag[op.kernel_schedule]),
        "epilogue_schedule": str(lib.EpilogueScheduleTag[op.epilogue_schedule]),
        "tile_scheduler": str(lib.TileSchedulerTag[op.tile_scheduler]),
        "epi_tile_mn": "cutlass::epilogue::collective::EpilogueTileAuto",
        "mixed_dtype_prepare_code": "",
    }


@functools.lru_cache(maxsize=256)
def emit_instance_torch211(
    name: str,
    x: TensorLayout,
    w: TensorLayout,
    bias: TensorLayout | None,
    y: TensorLayout,
    sm: int,
    level: str = DEFAULT_LEVEL,
    torch_package: Path | None = None,
) -> EmittedOp:
    """`instance_definition`/`instance_type` as torch 2.11's Inductor makes them for these
    tensors, with the instance skeleton of the torch source at `torch_package`, cached on disk
    by everything that decides the text; OpLookupError where Inductor would skip the op."""
    skeleton = instance_skeleton(torch_package)
    shape = hashlib.sha256(repr(skeleton).encode()).hexdigest()[:16]
    # "filtered": the entry also holds the dtype filter's verdict (a refusal is kept too).
    key = json.dumps(["torch-2.11", name, repr(x), repr(w), repr(bias), repr(y), sm, shape])
    digest = hashlib.sha256(f"filtered {key}".encode()).hexdigest()[:24]
    path = cache_dir("cutlass", cutlass_version(), "emitted") / f"{digest}.json"
    try:
        data = json.loads(path.read_text())
        if "refused" in data:
            raise OpLookupError(data["refused"])
        return EmittedOp(**data)
    except (OSError, ValueError, TypeError):
        pass
    with GENERATE_LOCK:
        op = generated_op(name, level)
        try:
            e = _filtered_emit(op, x, w, bias, y, sm, skeleton)
        except Refused as exc:
            refused = f"op '{name}' does not fit the tensors: {exc}"
            write_atomic(path, json.dumps({"refused": refused}).encode())
            raise OpLookupError(refused) from exc
    emitted = EmittedOp(
        name, e.definition, e.type_name, e.is_3x, e.should_swap_xw, e.conf_name, e.dynamic_cluster
    )
    write_atomic(path, json.dumps(emitted.__dict__).encode())
    return emitted


def _filtered_emit(
    op: Any,
    x: TensorLayout,
    w: TensorLayout,
    bias: TensorLayout | None,
    y: TensorLayout,
    sm: int,
    skeleton: Skeleton | None,
) -> Emitted211:
    """The instance's own op through Inductor's whole filter: its dtype checks
    (kls.profiles.torch211.filter.refusal), then emit_torch211's."""
    from cutlass_library import library

    reason = refusal(op, {"X": x.dtype, "W": w.dtype, "Y": y.dtype}, library)
    if reason:
        raise Refused(
            f"{reason}; Inductor would never pick it for these tensors: choose an op it "
            "accepts (`kls ops` lists them)"
        )
    return emit_torch211(op, x, w, bias, y, sm, skeleton)


def refusal(op: Any, dtypes: dict[str, str], lib: Any) -> str:
    """Why global_filter_ops or filter_op's dtype checks refuse `op` for tensors of `dtypes`
    (X, W, Y; '' if they don't)."""
    if op.tile_description.math_instruction.opcode_class == lib.OpcodeClass.Simt:
        return "a SIMT op (Inductor considers tensor-core ops only)"
    if op.A.layout.name != "RowMajor" or op.B.layout.name != "ColumnMajor":
        return (
            f"its A/B layouts are {layout_word(op.A.layout)}/{layout_word(op.B.layout)}: not a "
            "'tn' op (Inductor considers only A row-major, B column-major ops and sets the "
            "layouts from the tensors)"
        )
    return element_refusal(op, dtypes) or accumulator_refusal(op, dtypes["X"])
