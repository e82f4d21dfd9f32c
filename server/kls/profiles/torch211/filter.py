"""Which CUTLASS ops torch 2.11's Inductor would consider for an instance, and why it refuses
each other one.

Inductor's order (gen_ops): `global_filter_ops` (no SIMT, generator ops with A row-major and
B column-major, supported accumulator and X/W element types), then per op `filter_op`: the
template's GEMM kind (3.x or 2.x, as the instance's current op), `_dtype_match` (X, W, Y
elements and the f32 accumulator), then the layout, alignment and bias handling of
kls.profiles.torch211.ops (an op it refuses is skipped, as Inductor skips it); duplicates by
configuration name after the filter keep the first, and the list is sorted by that name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

from kls.cutlass import ops as cutlass_ops
from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigProblem, OpChoice, Verdict
from kls.profiles.common import tensor_layout, wants_3x
from kls.profiles.elements import XW_DTYPES
from kls.profiles.torch211.ops import Refused, emit_torch211, instance_skeleton, refusal


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


def verdicts(spec: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
    """Every generated op of the instance's arch at `level` (default: the instance's), in
    generator order, with Inductor's verdict for these tensors. ConfigProblem when the
    instance itself cannot have CUTLASS ops."""
    from cutlass_library import library as lib

    if spec.kind != "cutlass_gemm":
        raise ConfigProblem(f"instance '{spec.name}' is not a CUTLASS GEMM: it has no op list")
    x, w, bias, y = (tensor_layout(spec.tensors.get(n)) for n in ("X", "W", "Bias", "Y"))
    if x is None or w is None or y is None:
        raise ConfigProblem("a CUTLASS GEMM instance needs tensors X, W and Y")
    if x.dtype not in XW_DTYPES or w.dtype not in XW_DTYPES:
        raise ConfigProblem(
            f"Inductor's CUTLASS GEMM does not take X/W of {x.dtype}/{w.dtype} "
            f"(it takes {', '.join(XW_DTYPES)})"
        )
    want_3x = wants_3x(spec)
    dtypes = {"X": x.dtype, "W": w.dtype, "Y": y.dtype}
    level = level or spec.instantiation_level
    skeleton = instance_skeleton(spec.torch_package)
    for family in cutlass_ops.families_for_arch(spec.arch):
        for name, op in cutlass_ops.generated(family, level).items():
            reason = generation_refusal(op, want_3x, lib) or refusal(op, dtypes, lib)
            if reason:
                yield Verdict(name, None, reason)
                continue
            try:
                emitted = emit_torch211(op, x, w, bias, y, spec.sm, skeleton)
            except Refused as exc:
                yield Verdict(name, None, str(exc))
                continue
            conf = emitted.filtered_name
            own = emitted.type_name.removesuffix("_device_type")
            kernel = hashlib.sha256(emitted.definition.replace(own, "@").encode())
            choice = OpChoice(
                name, conf, family_of(conf), tile_of(conf), kernel.hexdigest()[:16], level
            )
            yield Verdict(name, choice)


def generation_refusal(op: Any, want_3x: bool | None, lib: Any) -> str:
    """An op of the other CUTLASS generation than the template's ('' if it is the same)."""
    if want_3x is None or (op.gemm_kind == lib.GemmKind.Universal3x) == want_3x:
        return ""
    this, other = ("3.x", "2.x") if want_3x else ("2.x", "3.x")
    return f"a CUTLASS {other} op; the template is a {this} GEMM (its current op's)"
