"""CUTLASS operations from `cutlass_library`: lookup by name or filter, and C++ emission."""

from kls.cutlass.ops import (
    EmittedOp,
    OpLookupError,
    emit_instance,
    op_names,
    resolve_op_name,
)

__all__ = ["EmittedOp", "OpLookupError", "emit_instance", "op_names", "resolve_op_name"]
