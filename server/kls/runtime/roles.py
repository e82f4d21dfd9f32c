"""Buffers by role: a helper that takes X, W, Bias, (Meta,) Y positionally must get, in each
place, the instance's tensor of that role (X the GEMM's A operand, W its B operand, Y its
output). A swapped pair only fails deep inside nvcc (`no instance of constructor
"cute::tuple<...>"` in the argument sub-template), so the call is checked here (KT307)."""

from __future__ import annotations

from typing import Any

from kls.findings import Severity
from kls.runtime.buffers import Buffer
from kls.runtime.record import CallRecord, Recorder

ROLE_WORDS = {
    "X": "the GEMM's A operand",
    "W": "the GEMM's B operand",
    "Bias": "the epilogue's C operand",
    "Meta": "the sparse GEMM's metadata",
    "Y": "the GEMM's output D",
}


def _what(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, Buffer):
        return f"buffer '{value.get_name()}' ({value.spec.describe()})"
    return f"{type(value).__name__} {value!r}"


def check_roles(
    recorder: Recorder,
    rec: CallRecord,
    helper: str,
    passed: list[tuple[str, int, Any]],
    tensors: dict[str, Buffer | None],
) -> None:
    """KT307 at each argument of `passed` ((role, argument index, value)) that is not the
    instance's buffer of that role (`tensors`: role -> buffer, None where it has none)."""
    for role, index, value in passed:
        want = tensors.get(role)
        got = value.get_name() if isinstance(value, Buffer) else value
        if want is None and value is None:
            continue
        if want is not None and isinstance(value, Buffer) and got == want.get_name():
            continue
        wanted = (
            f"buffer '{want.get_name()}' ({want.spec.describe()})"
            if want is not None
            else "None (the instance has no tensor of that role)"
        )
        order = ", ".join(r for r, _, _ in passed)
        recorder.add(
            "KT307",
            Severity.ERROR,
            f"{helper} got {_what(value)} as {role} ({ROLE_WORDS.get(role, role)}), which is "
            f"{wanted}; pass {order} in this order",
            rec,
            index,
        )
