"""Which CUTLASS ops the 2023 Inductor (PR #107931) would consider for an instance, and why
it refuses each other one.

Its filter_op: no SIMT, the template's GEMM generation, X/W/Y elements that match the
tensors' dtypes (`dtype_match`) and an f32 accumulator (s32 for int8), and A/B layouts equal
to the tensors' (`layout_match`; the 2023 API never sets them from the tensors). kls emits the
accepted ops with kls.cutlass.ops.emit_instance; the op's alignment is the generator's.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.cutlass import ops as cutlass_ops
from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigProblem, OpChoice, Verdict
from kls.profiles.common import layout_letter
from kls.profiles.elements import accumulator_refusal, element_refusal, layout_word
from kls.profiles.torch211.filter import family_of, generation_refusal, tile_of

LETTER_LAYOUT = {"t": "RowMajor", "n": "ColumnMajor"}


def refusal(op: Any, dtypes: dict[str, str], letters: dict[str, str], lib: Any) -> str:
    """Why filter_op refuses `op` for tensors X, W, Y of `dtypes` and X/W layout `letters`
    ('t' row-major, 'n' column-major); '' when it accepts it."""
    if op.tile_description.math_instruction.opcode_class == lib.OpcodeClass.Simt:
        return "a SIMT op (Inductor considers tensor-core ops only)"
    reason = element_refusal(op, dtypes) or accumulator_refusal(op, dtypes["X"])
    if reason:
        return reason
    for operand, tensor in (("A", "X"), ("B", "W")):
        layout = getattr(op, operand).layout
        want = LETTER_LAYOUT[letters[tensor]]
        if layout.name != want:
            return (
                f"its {operand} layout (for tensor {tensor}) is {layout_word(layout)}; tensor "
                f"{tensor} is {layout_word(want)}"
            )
    return ""


def _inputs(spec: InstanceSpec) -> tuple[dict[str, str], dict[str, str]]:
    if spec.kind != "cutlass_gemm":
        raise ConfigProblem(f"instance '{spec.name}' is not a CUTLASS GEMM: it has no op list")
    tensors = {n: spec.tensors.get(n) for n in ("X", "W", "Y")}
    letters = {n: layout_letter(t) for n, t in tensors.items()}
    dtypes = {n: t.dtype.name for n, t in tensors.items() if t is not None}
    if len(dtypes) < 3 or None in (letters["X"], letters["W"]):
        raise ConfigProblem("a CUTLASS GEMM instance needs tensors X, W and Y of rank >= 2")
    return dtypes, {n: v for n, v in letters.items() if v is not None}


def verdicts(spec: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
    """Every generated op of the instance's arch at `level` (default: the instance's), in
    generator order, with the 2023 filter's verdict for these tensors."""
    from cutlass_library import library as lib

    from kls.profiles.common import wants_3x

    dtypes, letters = _inputs(spec)
    want_3x = wants_3x(spec)
    level = level or spec.instantiation_level
    for family in cutlass_ops.families_for_arch(spec.arch):
        for name, op in cutlass_ops.generated(family, level).items():
            reason = generation_refusal(op, want_3x, lib) or refusal(op, dtypes, letters, lib)
            if reason:
                yield Verdict(name, None, reason)
                continue
            conf = op.configuration_name()
            yield Verdict(name, OpChoice(name, conf, family_of(conf), tile_of(conf), "", level))


def check_op(spec: InstanceSpec, name: str) -> None:
    """ConfigProblem when the 2023 filter refuses the instance's own op for its tensors."""
    dtypes, letters = _inputs(spec)
    reason = _verdict_of(
        name, json.dumps([dtypes, letters], sort_keys=True), spec.instantiation_level
    )
    if reason:
        raise ConfigProblem(
            f"op '{name}' does not fit the tensors: {reason}; Inductor would never pick it for "
            "these tensors: choose an op it accepts (`kls ops` lists them)"
        )


@functools.lru_cache(maxsize=256)
def _verdict_of(name: str, tensors: str, level: str) -> str:
    """The refusal of one op (cached on disk: a warm render generates no op list)."""
    key = json.dumps(["inductor-2023", name, tensors])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    path = cache_dir("cutlass", cutlass_ops.cutlass_version(), "verdicts") / f"{digest}.json"
    try:
        found: str = json.loads(path.read_text())["refused"]
        return found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from cutlass_library import library as lib

    dtypes, letters = json.loads(tensors)
    with cutlass_ops.GENERATE_LOCK:
        op = cutlass_ops.generated_op(name, level)
    reason = refusal(op, dtypes, letters, lib)
    write_atomic(path, json.dumps({"refused": reason}).encode())
    return reason
