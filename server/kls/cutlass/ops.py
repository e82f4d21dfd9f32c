"""Enumerate, look up and emit CUTLASS GEMM operations the way Inductor does.

Generating the SM90 list takes ~1.2 s and SM80 ~1.3 s (2 cores), so the names are cached on disk
per nvidia-cutlass version and the emitted C++ per (op, layouts); a warm lookup needs neither.

Inductor's `cuda.cutlass_instantiation_level` ("0" by default; "2222", "3333", ... list more
tiles, clusters and schedules) is an instance's `cutlass_instantiation_level`: the op list is
generated at that level. Above "0" only the SM90 generators of real-valued GEMMs run (16-bit,
tf32, int8, fp8, mixed, f64): they give exactly the Universal GEMM ops of the full
`GenerateSM90` except the complex ones no Inductor dtype matches, in ~2.8 s at "2222" instead
of ~13 s (tests/core/test_tune_levels.py compares the two lists).
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.suggest import did_you_mean


@dataclass(frozen=True)
class TensorLayout:
    """What the op filter reads of a tensor: dtype name, shape, strides, offset (elements)."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0


GENERATE_LOCK = threading.Lock()


class OpLookupError(Exception):
    """An op name or filter that matches nothing; the message says what to do."""


@dataclass(frozen=True)
class EmittedOp:
    name: str
    definition: str
    type_name: str
    is_3x: bool
    should_swap_xw: bool
    conf_name: str = ""  # the op's configuration name after Inductor's changes (torch-2.11)
    dynamic_cluster: str = ""  # torch-2.11's `dynamic_cluster` block ("" for static clusters)


def cutlass_version() -> str:
    try:
        return version("nvidia-cutlass")
    except PackageNotFoundError:
        return "unknown"


def family_of(name: str) -> str:
    return "sm90" if name.startswith("cutlass3x_sm90") else "sm80"


DEFAULT_LEVEL = "0"
# GenerateSM90's generators of real-valued GEMMs (kls.cutlass.ops docstring).
_SM90_REAL_GEMMS = (
    "16b_WGMMA_gemm",
    "16b_WGMMA_alignx_gemm",
    "tf32_WGMMA_gemm",
    "tf32_WGMMA_alignx_gemm",
    "int8_WGMMA_gemm",
    "int8_WGMMA_alignx_gemm",
    "fp8_WGMMA_gemm",
    "fp8_WGMMA_alignx_gemm",
    "mixed_dtype_WGMMA_gemm",
    "1684",  # f64
)


def families_for_arch(arch: str) -> tuple[str, ...]:
    sm = int("".join(ch for ch in arch if ch.isdigit()) or 0)
    return ("sm90", "sm80") if sm >= 90 else ("sm80",)


@functools.lru_cache(maxsize=4)
def generated(family: str, level: str = DEFAULT_LEVEL) -> dict[str, Any]:
    """name -> GemmOperation for one generator family (slow: ~1.2 s at level "0")."""
    from cutlass_library import generator, library, manifest

    arch = "90a" if family == "sm90" else "80"
    args = argparse.Namespace(
        architectures=arch,
        cuda_version="13.0",
        instantiation_level=level,
        operations="all",
        build_dir="",
        curr_build_dir="",
        generator_target="",
        kernels="all",
        ignore_kernels="",
        exclude_kernels="",
        kernel_filter_file=None,
        selected_kernel_list=None,
        interface_dir=None,
        filter_by_cc=True,
        disable_full_archs_compilation=False,
        log_level="warning",
        disable_cutlass_package_imports=False,
    )
    m = manifest.Manifest(args)
    if family == "sm90" and level != DEFAULT_LEVEL:
        for suffix in _SM90_REAL_GEMMS:
            getattr(generator, f"GenerateSM90_TensorOp_{suffix}")(m, args.cuda_version)
    elif family == "sm90":
        generator.GenerateSM90(m, args.cuda_version)
    else:
        generator.GenerateSM80(m, args.cuda_version)
    ops: dict[str, Any] = {}
    for by_name in m.operations.get(library.OperationKind.Gemm, {}).values():
        for name, op_list in by_name.items():
            kind = op_list[0].gemm_kind
            if kind in (library.GemmKind.Universal, library.GemmKind.Universal3x):
                ops.setdefault(name, op_list[0])
    return ops


def _level_of(family: str, level: str) -> str:
    """SM80 lists do not depend on the level: one cache serves them all."""
    return level if family == "sm90" else DEFAULT_LEVEL


@functools.lru_cache(maxsize=8)
def op_names(family: str, level: str = DEFAULT_LEVEL) -> list[str]:
    """All GEMM op names of a family at an instantiation level, from the disk cache when
    present."""
    level = _level_of(family, level)
    suffix = "" if level == DEFAULT_LEVEL else f"-level{level}"
    path = cache_dir("cutlass", cutlass_version()) / f"names-{family}{suffix}.json"
    try:
        names: list[str] = json.loads(path.read_text())
        return names
    except (OSError, ValueError):
        pass
    with GENERATE_LOCK:
        names = sorted(generated(family, level))
    write_atomic(path, json.dumps(names).encode())
    return names


def resolve_op_name(
    name: str | None,
    contains: tuple[str, ...],
    arch: str,
    level: str = DEFAULT_LEVEL,
    suggest: Callable[[str], str | None] | None = None,
) -> str:
    """The op named, or the first op (by name) containing every `contains` fragment, in the
    list generated at instantiation `level`. `suggest` gives an unknown name's "did you mean"
    (None: drawn from every op of the name's family)."""
    families = families_for_arch(arch)
    if name is not None:
        family = family_of(name)
        known = op_names(family, level)
        if name in _name_set(family, _level_of(family, level)):
            if family not in families:
                raise OpLookupError(f"op '{name}' is an {family} op; it cannot run on arch {arch}")
            return name
        hint = suggest(name) if suggest is not None else None
        hint = _suggest(name, known) if hint is None else hint
        raise OpLookupError(f"unknown CUTLASS op '{name}'{hint}{_level_hint(name, family, level)}")
    for family in families:
        for candidate in op_names(family, level):
            if all(fragment in candidate for fragment in contains):
                return candidate
    raise OpLookupError(
        f"no CUTLASS op for arch {arch} contains all of {list(contains)}; loosen op_filter"
    )


@functools.lru_cache(maxsize=8)
def _name_set(family: str, level: str = DEFAULT_LEVEL) -> frozenset[str]:
    return frozenset(op_names(family, level))


def _level_hint(name: str, family: str, level: str) -> str:
    """For an op of a higher level's list named at level "0" (e.g. a tune winner copied
    without its level): which level lists it, when that list is already cached on disk."""
    if family != "sm90" or level != DEFAULT_LEVEL:
        return ""
    prefix = cache_dir("cutlass", cutlass_version())
    for path in sorted(prefix.glob(f"names-{family}-level*.json")):
        try:
            if name in json.loads(path.read_text()):
                found = path.stem.rsplit("-level", 1)[1]
                return f' (it is in the list of cutlass_instantiation_level = "{found}")'
        except (OSError, ValueError):
            continue
    return ""


def _suggest(name: str, known: list[str]) -> str:
    # Compare within the same data-type family first: difflib over 21k names is slow.
    prefix = name.split("_")[:4]
    close = [k for k in known if k.split("_")[:4] == prefix] or known
    return did_you_mean(name, close[:5000], cutoff=0.5)


@dataclass(frozen=True)
class Layouts:
    """Row ('t') or column ('n') major for A, B, C (None: no bias), D."""

    a: str
    b: str
    c: str | None
    d: str


@functools.lru_cache(maxsize=256)
def emit_instance(
    name: str, layouts: Layouts, swap_xw: bool | None, level: str = DEFAULT_LEVEL
) -> EmittedOp:
    """`instance_definition`/`instance_type` as Inductor's define_gemm_instance makes them.
    (An op is the same at every level that lists it: `level` only says where to find it.)"""
    key = json.dumps([name, layouts.a, layouts.b, layouts.c, layouts.d, swap_xw])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    path = cache_dir("cutlass", cutlass_version(), "emitted") / f"{digest}.json"
    try:
        data = json.loads(path.read_text())
        return EmittedOp(**data)
    except (OSError, ValueError, TypeError):
        pass
    with GENERATE_LOCK:
        op = generated_op(name, level)
        emitted = _emit(name, op, layouts, swap_xw)
    write_atomic(path, json.dumps(emitted.__dict__).encode())
    return emitted


def generated_op(name: str, level: str) -> Any:
    family = family_of(name)
    ops = generated(family, _level_of(family, level))
    if name not in ops:
        raise OpLookupError(f"unknown CUTLASS op '{name}'{_level_hint(name, family, level)}")
    return ops[name]


def _emit(name: str, op: Any, layouts: Layouts, swap_xw: bool | None) -> EmittedOp:
    from cutlass_library import gemm_operation, library

    op = copy.deepcopy(op)
    major = {"t": library.LayoutType.RowMajor, "n": library.LayoutType.ColumnMajor}
    op.D.layout = major[layouts.d]
    op.element_epilogue = op.accumulator_type()
    is_3x = op.gemm_kind == library.GemmKind.Universal3x
    if layouts.c is not None:
        op.C.layout = major[layouts.c] if is_3x else op.D.layout
    elif is_3x:
        op.C.element = library.DataType.void
    else:
        op.C.layout = op.D.layout
    swap = False
    if is_3x:
        tma = str(op.epilogue_schedule).split(".")[-1].lower().startswith("tma")
        swap = (layouts.c is not None and tma) if swap_xw is None else swap_xw
        if swap:
            op = _swap_xw(op, major)
        definition = gemm_operation.EmitGemmUniversal3xInstance().emit(op)
        decl = [line for line in definition.split("\n") if "struct " in line][-1]
        match = re.match(r"\s*struct\s(.*?)\s:", decl)
    else:
        definition = gemm_operation.EmitGemmInstance().emit(op)
        definition = definition.replace(
            "cutlass::gemm::device::Gemm", "cutlass::gemm::device::GemmUniversal"
        )
        definition = definition.replace("false,", "")
        match = re.match(r"\s*using\s(.*?)\s=", definition.split("\n")[2])
    if match is None:
        raise OpLookupError(f"cutlass_library emitted no named type for op '{name}'")
    type_name = match.group(1)
    if is_3x:
        definition += (
            f"\n  using {type_name}_device_type = "
            f"cutlass::gemm::device::GemmUniversalAdapter<{type_name}>;\n"
        )
        type_name = f"{type_name}_device_type"
    return EmittedOp(name, definition, type_name, is_3x, swap)


def _swap_xw(op: Any, major: dict[str, Any]) -> Any:
    flip = {major["t"]: major["n"], major["n"]: major["t"]}
    op.A.layout = flip[op.A.layout]
    op.B.layout = flip[op.B.layout]
    op.A, op.B = op.B, op.A
    op.C.layout = flip[op.C.layout]
    op.D.layout = flip[op.D.layout]
    return op


def expected_ab_layouts(name: str) -> tuple[str, str] | None:
    """The A and B layout letters an op name encodes (e.g. 'tn' in `..._tnn_align8`)."""
    match = re.search(r"_([tn]{2,3})_align", name)
    if not match:
        return None
    letters = match.group(1)
    return letters[0], letters[1]
