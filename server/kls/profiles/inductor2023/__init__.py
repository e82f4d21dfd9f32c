"""The `inductor-2023` profile: the seed's API, PyTorch PR #107931
(`torch/_inductor/codegen/cuda/`). Templates call `kernel.def_kernel(...)` themselves; sizes
and strides render as literals; the C contract is one PT_EXPORT entry the template writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kls.cutlass.ops import Layouts, emit_instance, expected_ab_layouts
from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigProblem, Profile, RenderSession, Verdict
from kls.profiles.common import layout_letter, sub_templates
from kls.profiles.inductor2023.filter import check_op, verdicts
from kls.profiles.inductor2023.template_api import GemmTemplateAPI, TemplateAPI
from kls.profiles.names import COMMON, GEMM_2023, SUB_TEMPLATE
from kls.profiles.op_list import op_name
from kls.runtime.buffers import Buffer
from kls.runtime.kernel import RESERVED_C_NAMES, SIGNATURE_C_NAMES, Kernel


class Inductor2023(Profile):
    def reserved_c_names(self, kind: str) -> frozenset[str]:
        # A GEMM's C code (the 2023 templates) declares M, N, K, B, lda.., arguments, ...; a
        # plain CUDA kernel declares only what its own text declares (checked once rendered).
        return RESERVED_C_NAMES if kind == "cutlass_gemm" else SIGNATURE_C_NAMES

    def render_context(
        self,
        session: RenderSession,
        instance: InstanceSpec,
        result: Any,
        buffers: dict[str, Buffer | None],
        output: Buffer | None,
    ) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            **instance.variables,
            **buffers,
            "kernel": session.kernel,
            "input_reorder": list(instance.input_reorder) if instance.input_reorder else None,
            "kernel_name": instance.kernel_name,
            "alpha": instance.alpha,
            "beta": instance.beta,
        }
        if instance.kind == "cutlass_gemm":
            ctx.update(_gemm_context(session, instance, output, result, buffers))
        else:
            ctx["template"] = TemplateAPI(session.recorder, session.kernel, output)
        return ctx

    def prepare_op(self, instance: InstanceSpec) -> None:
        if instance.kind != "cutlass_gemm":
            return
        tensors = instance.tensors
        a, b, d = (layout_letter(tensors.get(n)) for n in ("X", "W", "Y"))
        if a is None or b is None or d is None:
            return
        swap = instance.should_swap_xw if instance.should_swap_xw else None
        layouts = Layouts(a, b, layout_letter(tensors.get("Bias")), d)
        name = op_name(instance)
        check_op(instance, name)
        emit_instance(name, layouts, swap, instance.instantiation_level)

    def op_verdicts(self, instance: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
        return verdicts(instance, level)


def _gemm_context(
    r: RenderSession,
    instance: InstanceSpec,
    output: Buffer | None,
    result: Any,
    buffers: dict[str, Buffer | None],
) -> dict[str, Any]:
    """CUTLASSGemmTemplate.render's options of 2023: the op's instance (A/B layouts must be
    the tensors'), the sub-templates, and the `template` helpers."""
    name = op_name(instance)
    tensors = instance.tensors
    x, w, bias, y = (tensors.get(n) for n in ("X", "W", "Bias", "Y"))
    a, b, d = layout_letter(x), layout_letter(w), layout_letter(y)
    if a is None or b is None or d is None:
        raise ConfigProblem("a CUTLASS GEMM instance needs tensors X, W and Y of rank >= 2")
    expected = expected_ab_layouts(name)
    if expected is not None and expected != (a, b):
        raise ConfigProblem(
            f"op '{name}' expects A/B layouts '{''.join(expected)}' but X/W are '{a}{b}' "
            "('t' row-major, 'n' column-major); Inductor would never pick this op: change the "
            "tensors' layout or the op"
        )
    check_op(instance, name)
    swap = instance.should_swap_xw if instance.should_swap_xw else None
    op = emit_instance(
        name, Layouts(a, b, layout_letter(bias), d), swap, instance.instantiation_level
    )
    result.op = op
    argument_text, epilogue_text = sub_templates(r, instance)
    api = GemmTemplateAPI(r.recorder, r.kernel, output, instance.alpha, instance.beta, r.render_sub)
    api.roles = {n: buffers.get(n) for n in ("X", "W", "Bias", "Y")}
    return {
        "template": api,
        "instance_definition": op.definition,
        "instance_type": op.type_name,
        "argument_template": argument_text,
        "epilogue_template": epilogue_text,
        "should_swap_xw": op.should_swap_xw,
        "epilogue_args": f"{{ElementComputeEpilogue({instance.alpha}), "
        f"ElementComputeEpilogue({instance.beta})}}",
        "op_conf_name": name,
    }


PROFILE = Inductor2023(
    name="inductor-2023",
    mirrors="PyTorch PR #107931 (torch/_inductor/codegen/cuda/, 2023)",
    kernel_api=Kernel.TEMPLATE_API,
    template_api={"cuda": TemplateAPI.TEMPLATE_API, "cutlass_gemm": GemmTemplateAPI.TEMPLATE_API},
    context={
        "cuda": COMMON | {"kernel_name"},
        "cutlass_gemm": COMMON | {"kernel_name"} | GEMM_2023 | SUB_TEMPLATE,
    },
    signature_exports=True,
)
