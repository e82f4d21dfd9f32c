"""Helpers every CUTLASS profile's context builder shares: the instance's op, the tensors'
layouts, the argument/epilogue sub-templates."""

from __future__ import annotations

from kls.cutlass import ops as cutlass_ops
from kls.cutlass.ops import TensorLayout
from kls.instances.schema import InstanceSpec, TensorSpec
from kls.profiles.base import RenderSession


def tensor_layout(spec: TensorSpec | None) -> TensorLayout | None:
    if spec is None:
        return None
    return TensorLayout(spec.dtype.name, spec.shape, spec.stride, spec.offset)


GEMM_BUFFERS = ("X", "W", "Bias", "Y")


def gemm_layouts(
    instance: InstanceSpec,
) -> tuple[TensorLayout | None, TensorLayout | None, TensorLayout | None, TensorLayout | None]:
    """The layouts of a GEMM's X, W, Bias and Y (None for a tensor the instance leaves out):
    the one place they are built, for rendering, the op filter and tuning."""
    x, w, bias, y = (tensor_layout(instance.tensors.get(n)) for n in GEMM_BUFFERS)
    return x, w, bias, y


def layout_letter(spec: TensorSpec | None) -> str | None:
    if spec is None or spec.rank < 2:
        return None
    return "t" if spec.stride[-1] == 1 else "n"


def sub_templates(r: RenderSession, instance: InstanceSpec) -> tuple[str | None, str | None]:
    """The sub-templates' texts, remembered by text so a nested render knows its file."""
    argument_text = r.read(instance.argument_template) if instance.argument_template else None
    epilogue_text = r.read(instance.epilogue_template) if instance.epilogue_template else None
    for text, path in (
        (argument_text, instance.argument_template),
        (epilogue_text, instance.epilogue_template),
    ):
        if text is not None and path is not None:
            r.text_to_path[text] = str(path)
    return argument_text, epilogue_text


def wants_3x(spec: InstanceSpec) -> bool | None:
    """The template's GEMM generation: that of the instance's current op (None when that op
    is unknown, as while it is being typed: then both generations are listed). A named
    op's generation is its name's prefix (so a misspelt op keeps it)."""
    if spec.op is not None:
        if spec.op.startswith("cutlass3x_"):
            return True
        return False if spec.op.startswith("cutlass_") else None
    try:
        current = cutlass_ops.resolve_op_name(
            spec.op,
            spec.op_filter.contains if spec.op_filter else (),
            spec.arch,
            spec.instantiation_level,
        )
    except cutlass_ops.OpLookupError:
        return None
    return current.startswith("cutlass3x")
