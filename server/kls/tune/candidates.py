"""Candidates: the CUTLASS ops compatible with an instance, crossed with its tune space.

Compatibility is torch 2.11 Inductor's own, in its order (gen_ops): `global_filter_ops` (no
SIMT, generator ops with A row-major and B column-major, supported accumulator and X/W element
types), then per op `filter_op`: the template's GEMM kind (3.x or 2.x, as the instance's
current op), `_dtype_match` (X, W, Y elements and the f32 accumulator), then the layout,
alignment and bias handling kls mirrors in `kls.profiles.torch211.ops` (an op it refuses is
skipped, as Inductor skips it); duplicates by configuration name after the filter keep the
first, and the list is sorted by that name. The tune table's `op_filter` / `ops` narrow it.

`--limit N` keeps N candidates spread evenly over that sorted list (indices
floor(i * len / N), i = 0..N-1): the same space and N always give the same subset, and it
covers every tile family instead of the alphabetical prefix Inductor's own cap keeps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from kls.cutlass import ops as cutlass_ops
from kls.cutlass.ops import TensorLayout
from kls.instances import InstanceSpec, TensorSpec
from kls.instances.schema import column_major_strides, contiguous_strides
from kls.profiles.torch211.ops import Refused, emit_torch211, instance_skeleton
from kls.tune.space import TuneSpace, runtime_variables

# torch dtype name -> cutlass_library DataType names it matches (utils.dtype_match).
_DTYPE_MATCH = {
    "float32": ("f32", "tf32"),
    "float16": ("f16",),
    "bfloat16": ("bf16",),
    "int8": ("s8",),
    "uint8": ("u8",),
    "int32": ("s32",),
    "float8_e4m3fn": ("e4m3",),
    "float8_e5m2": ("e5m2",),
}
_XW = ("float16", "bfloat16", "float8_e4m3fn", "int8", "float8_e5m2")  # utils.XW_DTYPES


class CandidateError(Exception):
    """No candidates can be made for this instance; the message says why."""


@dataclass(frozen=True)
class OpChoice:
    op: str  # the generator's op name (what kls.toml's `op` takes)
    conf_name: str  # configuration name after Inductor's filter (its dedup key)
    family: str  # kernel schedule / epilogue, for the plot and table
    tile: str  # e.g. 128x256x64 cluster 2x1x1
    kernel: str = ""  # hash of the emitted C++ with the op's own name blanked (dedup key)
    level: str = "0"  # the cutlass_instantiation_level whose list holds the op


@dataclass(frozen=True)
class BuildUnit:
    """One library to build: an op and the variables that change the source."""

    id: str
    choice: OpChoice
    build_vars: dict[str, Any] = field(default_factory=dict)

    def spec(self, base: InstanceSpec) -> InstanceSpec:
        return dataclasses.replace(
            base,
            op=self.choice.op,
            op_filter=None,
            instantiation_level=self.choice.level,
            variables={**base.variables, **self.build_vars},
        )


@dataclass(frozen=True)
class Candidate:
    """A build unit and the runtime variables it is called with."""

    unit: BuildUnit
    runtime_vars: dict[str, Any]

    @property
    def id(self) -> str:
        suffix = ",".join(f"{k}={v}" for k, v in self.runtime_vars.items())
        return f"{self.unit.id}[{suffix}]" if suffix else self.unit.id

    @property
    def variables(self) -> dict[str, Any]:
        return {**self.unit.build_vars, **self.runtime_vars}


@dataclass
class CandidateSet:
    units: list[BuildUnit]
    runtime_combos: list[dict[str, Any]]
    total_ops: int  # compatible ops (Inductor's list) before op_filter/ops/--limit
    distinct_ops: int  # distinct kernels among them
    filtered_ops: int  # after op_filter/ops, before --limit

    def candidates(self) -> list[Candidate]:
        return [Candidate(u, dict(r)) for u in self.units for r in self.runtime_combos]


def family_of(conf_name: str) -> str:
    """`cooperative/tma`, `pingpong/nosmem`, `stream_k cooperative/tma`, `auto/auto`, ..."""
    schedule = "auto"
    m = re.search(r"_align\d+_(.*?)(?:_epi_(\w+))?$", conf_name)
    epilogue = "auto"
    if m:
        rest = m.group(1) or ""
        epilogue = m.group(2) or "auto"
        parts = [p for p in rest.split("_") if p and p != "warpspecialized"]
        words = " ".join(parts).replace("stream k", "stream_k")
        schedule = words or "auto"
    return f"{schedule}/{epilogue}"


def tile_of(conf_name: str) -> str:
    m = re.search(r"_(\d+x\d+(?:x\d+)?)_(\d+x\d+x\d+)_", conf_name)
    if m:
        return f"{m.group(1)} cluster {m.group(2)}"
    m = re.search(r"_(\d+x\d+_\d+x\d+)_", conf_name)
    return m.group(1) if m else "?"


def _layout(spec: TensorSpec | None) -> TensorLayout | None:
    if spec is None:
        return None
    return TensorLayout(spec.dtype.name, spec.shape, spec.stride, spec.offset)


def compatible_ops(spec: InstanceSpec, level: str | None = None) -> list[OpChoice]:
    """Inductor's gen_ops for this instance (see the module docstring), from the op list of
    `level` (Inductor's cutlass_instantiation_level; default: the instance's)."""
    from cutlass_library import library as L

    if spec.kind != "cutlass_gemm":
        raise CandidateError(f"instance '{spec.name}' is not a CUTLASS GEMM: nothing to tune")
    tensors = {n: spec.tensors.get(n) for n in ("X", "W", "Bias", "Y")}
    x, w, bias, y = (_layout(tensors[n]) for n in ("X", "W", "Bias", "Y"))
    if x is None or w is None or y is None:
        raise CandidateError("a CUTLASS GEMM instance needs tensors X, W and Y")
    if x.dtype not in _XW or w.dtype not in _XW:
        raise CandidateError(f"Inductor's CUTLASS GEMM does not take X/W of {x.dtype}/{w.dtype}")
    try:
        current = cutlass_ops.resolve_op_name(
            spec.op,
            spec.op_filter.contains if spec.op_filter else (),
            spec.arch,
            spec.instantiation_level,
        )
    except cutlass_ops.OpLookupError as exc:
        raise CandidateError(f"the instance's own op: {exc}") from None
    want_3x = current.startswith("cutlass3x")
    kind = L.GemmKind.Universal3x if want_3x else L.GemmKind.Universal
    accumulator = L.DataType.s32 if x.dtype == "int8" else L.DataType.f32
    level = level or spec.instantiation_level
    found: dict[str, OpChoice] = {}
    skeleton = instance_skeleton(spec.torch_package)
    for family in cutlass_ops.families_for_arch(spec.arch):
        for name, op in cutlass_ops._generated(family, level).items():
            if op.gemm_kind != kind:
                continue
            # global_filter_ops
            if op.tile_description.math_instruction.opcode_class == L.OpcodeClass.Simt:
                continue
            if op.A.layout.name != "RowMajor" or op.B.layout.name != "ColumnMajor":
                continue
            # _dtype_match
            if not (
                _match(x.dtype, op.A.element)
                and _match(w.dtype, op.B.element)
                and _match(y.dtype, op.D.element)
                and op.accumulator_type() == accumulator
            ):
                continue
            try:
                emitted = emit_torch211(op, x, w, bias, y, spec.sm, skeleton)
            except Refused:
                continue
            conf = emitted.filtered_name
            if conf not in found:
                own = emitted.type_name.removesuffix("_device_type")
                kernel = hashlib.sha256(emitted.definition.replace(own, "@").encode())
                found[conf] = OpChoice(
                    name, conf, family_of(conf), tile_of(conf), kernel.hexdigest()[:16], level
                )
    return [found[k] for k in sorted(found)]


def distinct(choices: list[OpChoice]) -> list[OpChoice]:
    """One op per distinct kernel: Inductor's list holds ops that differ only in name once
    its filter has set their C element and alignments (e.g. `..._bf16_bf16_...` and
    `..._void_bf16_...` without a bias); building both would time the same kernel twice."""
    seen: dict[str, OpChoice] = {}
    for c in choices:
        seen.setdefault(c.kernel or c.conf_name, c)
    return list(seen.values())


def _match(torch_dtype: str, element: Any) -> bool:
    return str(element.name) in _DTYPE_MATCH.get(torch_dtype, ())


def select(choices: list[OpChoice], space: TuneSpace) -> list[OpChoice]:
    out = [
        c
        for c in choices
        if all(f in c.op or f in c.conf_name for f in space.contains)
        and not any(f in c.op or f in c.conf_name for f in space.exclude)
    ]
    if space.ops:
        wanted = set(space.ops)
        out = [c for c in out if c.op in wanted or c.conf_name in wanted]
    return out


def _check_named_ops(space: TuneSpace, choices: list[OpChoice]) -> None:
    """Every op the tune table's `ops` names must be one Inductor would consider here."""
    from kls.suggest import did_you_mean

    names = {c.op for c in choices} | {c.conf_name for c in choices}
    for op in space.ops:
        if op not in names:
            raise CandidateError(
                f"the tune table's ops names '{op}', which is not among the {len(choices)} ops "
                f"compatible with this instance at its level{did_you_mean(op, names)}"
            )


def spread(items: list[Any], limit: int | None) -> list[Any]:
    """`limit` items evenly spread over `items` (all of them when limit is None or larger)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        return []
    return [items[i * len(items) // limit] for i in range(limit)]


def unit_id(op: str, build_vars: dict[str, Any]) -> str:
    key = json.dumps([op, sorted(build_vars.items())], default=str)
    return "b" + hashlib.sha256(key.encode()).hexdigest()[:8]


def make_candidates(spec: InstanceSpec, space: TuneSpace, limit: int | None = None) -> CandidateSet:
    """Build units (ops x source-changing variables, `--limit` applied to them) and the
    runtime-variable combinations each is timed with."""
    choices = compatible_ops(spec, space.level)
    _check_named_ops(space, choices)
    unique = distinct(choices)
    selected = select(unique, space)
    if not selected:
        raise CandidateError(
            f"no compatible op is left after the tune table's op_filter/ops "
            f"({len(choices)} compatible before it)"
        )
    runtime = runtime_variables(spec)
    build_combos = space.combos(tuple(n for n in space.variables if n not in runtime))
    units = [BuildUnit(unit_id(c.op, combo), c, combo) for c in selected for combo in build_combos]
    runtime_combos = space.combos(runtime) if any(n in space.variables for n in runtime) else []
    if not runtime_combos:
        current = {n: spec.variables[n] for n in runtime if n in spec.variables}
        runtime_combos = [current]
    return CandidateSet(
        spread(units, limit), runtime_combos, len(choices), len(unique), len(selected)
    )


def at_shape(spec: InstanceSpec, shape: tuple[int, int, int]) -> InstanceSpec:
    """The instance with X (M, K), W (K, N), Y (M, N) (and a Bias) of this GEMM shape, each
    tensor keeping its dtype and its row/column-major layout."""
    m, n, k = shape
    dims = {"X": (m, k), "W": (k, n), "Y": (m, n), "Bias": (m, n)}
    tensors: dict[str, TensorSpec | None] = {}
    for name, t in spec.tensors.items():
        if t is None or name not in dims:
            tensors[name] = t
            continue
        if t.rank != 2:
            raise CandidateError(
                f"tune shapes need 2-D tensors; {name} has rank {t.rank} in '{spec.name}'"
            )
        new = dims[name]
        if t.stride == (0, 1):  # a row vector broadcast over M
            stride: tuple[int, ...] = (0, 1)
        elif t.stride[-1] == 1:
            stride = contiguous_strides(new)
        else:
            stride = column_major_strides(new)
        tensors[name] = TensorSpec(name, new, t.dtype, stride)
    return dataclasses.replace(spec, tensors=tensors)


def instance_shape(spec: InstanceSpec) -> tuple[int, int, int]:
    x, y = spec.tensors.get("X"), spec.tensors.get("Y")
    if x is None or y is None or x.rank < 2 or y.rank < 2:
        raise CandidateError("a GEMM instance needs tensors X and Y of rank >= 2")
    return (y.shape[-2], y.shape[-1], x.shape[-1])
