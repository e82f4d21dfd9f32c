"""Enumerate, look up and emit CUTLASS GEMM operations the way Inductor does.

Generating the SM90 list takes ~1.2 s and SM80 ~1.3 s (2 cores), so the names are cached on disk
per nvidia-cutlass version and the emitted C++ per (op, layouts); a warm lookup needs neither.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import re
import threading
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.cutlass.inductor211 import Refused, TensorLayout, emit_torch211
from kls.suggest import did_you_mean

_LOCK = threading.Lock()


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


def families_for_arch(arch: str) -> tuple[str, ...]:
    sm = int("".join(ch for ch in arch if ch.isdigit()) or 0)
    return ("sm90", "sm80") if sm >= 90 else ("sm80",)


@functools.lru_cache(maxsize=4)
def _generated(family: str) -> dict[str, Any]:
    """name -> GemmOperation for one generator family (slow: ~1.2 s)."""
    from cutlass_library import generator, library, manifest

    arch = "90a" if family == "sm90" else "80"
    args = argparse.Namespace(
        architectures=arch,
        cuda_version="13.0",
        instantiation_level="0",
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
    if family == "sm90":
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


@functools.lru_cache(maxsize=4)
def op_names(family: str) -> list[str]:
    """All GEMM op names of a family, from the disk cache when present."""
    path = cache_dir("cutlass", cutlass_version()) / f"names-{family}.json"
    try:
        names: list[str] = json.loads(path.read_text())
        return names
    except (OSError, ValueError):
        pass
    with _LOCK:
        names = sorted(_generated(family))
    write_atomic(path, json.dumps(names).encode())
    return names


def resolve_op_name(name: str | None, contains: tuple[str, ...], arch: str) -> str:
    """The op named, or the first op (by name) containing every `contains` fragment."""
    families = families_for_arch(arch)
    if name is not None:
        family = family_of(name)
        known = op_names(family)
        if name in _name_set(family):
            if family not in families:
                raise OpLookupError(f"op '{name}' is an {family} op; it cannot run on arch {arch}")
            return name
        raise OpLookupError(f"unknown CUTLASS op '{name}'{_suggest(name, known)}")
    for family in families:
        for candidate in op_names(family):
            if all(fragment in candidate for fragment in contains):
                return candidate
    raise OpLookupError(
        f"no CUTLASS op for arch {arch} contains all of {list(contains)}; loosen op_filter"
    )


@functools.lru_cache(maxsize=4)
def _name_set(family: str) -> frozenset[str]:
    return frozenset(op_names(family))


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
def emit_instance(name: str, layouts: Layouts, swap_xw: bool | None) -> EmittedOp:
    """`instance_definition`/`instance_type` as Inductor's define_gemm_instance makes them."""
    key = json.dumps([name, layouts.a, layouts.b, layouts.c, layouts.d, swap_xw])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    path = cache_dir("cutlass", cutlass_version(), "emitted") / f"{digest}.json"
    try:
        data = json.loads(path.read_text())
        return EmittedOp(**data)
    except (OSError, ValueError, TypeError):
        pass
    with _LOCK:
        op = _generated(family_of(name))[name]
        emitted = _emit(name, op, layouts, swap_xw)
    write_atomic(path, json.dumps(emitted.__dict__).encode())
    return emitted


@functools.lru_cache(maxsize=256)
def emit_instance_torch211(
    name: str,
    x: TensorLayout,
    w: TensorLayout,
    bias: TensorLayout | None,
    y: TensorLayout,
    sm: int,
) -> EmittedOp:
    """`instance_definition`/`instance_type` as torch 2.11's Inductor makes them for these
    tensors (kls.cutlass.inductor211); OpLookupError where Inductor would skip the op."""
    key = json.dumps(["torch-2.11", name, repr(x), repr(w), repr(bias), repr(y), sm])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    path = cache_dir("cutlass", cutlass_version(), "emitted") / f"{digest}.json"
    try:
        data = json.loads(path.read_text())
        return EmittedOp(**data)
    except (OSError, ValueError, TypeError):
        pass
    with _LOCK:
        op = _generated(family_of(name))[name]
        try:
            e = emit_torch211(op, x, w, bias, y, sm)
        except Refused as exc:
            raise OpLookupError(f"op '{name}': {exc}") from exc
    emitted = EmittedOp(
        name, e.definition, e.type_name, e.is_3x, e.should_swap_xw, e.conf_name, e.dynamic_cluster
    )
    write_atomic(path, json.dumps(emitted.__dict__).encode())
    return emitted


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
