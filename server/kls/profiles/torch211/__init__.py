"""The `torch-2.11` profile: CUTLASS as torch 2.11.0's Inductor renders it
(`torch/_inductor/codegen/cutlass/`). Inductor calls def_kernel before rendering a GEMM and
hands the template `kernel_call_signature`, which takes the sizes (M, N, K, B, lda..ldd),
buffer offsets and runtime arguments (swizzle) from the caller; the text Inductor emits
verbatim is read from the instance's torch source (kls.upstream)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from kls.cutlass.ops import EmittedOp, expected_ab_layouts
from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigProblem, Profile, RenderSession, Verdict
from kls.profiles.common import GEMM_BUFFERS, gemm_layouts, sub_templates
from kls.profiles.names import COMMON, GEMM_2023, SUB_TEMPLATE
from kls.profiles.op_list import op_name
from kls.profiles.torch211.filter import verdicts
from kls.profiles.torch211.ops import emit_instance_torch211
from kls.profiles.torch211.runtime import (
    GEMM_RUNTIME_ARGS,
    ArgInfo,
    Torch211Gemm2xTemplate,
    Torch211Gemm3xTemplate,
    Torch211GemmTemplate,
    Torch211Kernel,
    Torch211Template,
    reserved_c_names,
    splice_text,
    spliced_text,
)
from kls.runtime.buffers import Buffer
from kls.runtime.kernel import Kernel
from kls.runtime.record import Recorder
from kls.sourcemap import SourceMap

# CUTLASSGemmTemplate.render's `options` (torch 2.11), besides the buffers.
GEMM_211 = GEMM_2023 | {
    "kernel_call_signature",
    "test_call_statement",
    "epilogue_visitor_tree",
    "dynamic_cluster",
}


class Torch211(Profile):
    # The runtime arguments a GEMM's entry takes after the offsets, and the value each has
    # when the instance leaves it unset (CUTLASSTemplate.get_runtime_arg_info / _values).
    gemm_runtime_args: ClassVar[tuple[ArgInfo, ...]] = GEMM_RUNTIME_ARGS
    gemm_runtime_defaults: ClassVar[dict[str, int]] = {"swizzle": 1}

    def reserved_c_names(self, kind: str) -> frozenset[str]:
        names = reserved_c_names(kind == "cutlass_gemm")
        if kind == "cutlass_gemm":
            names |= {a.name for a in self.gemm_runtime_args}
        return names

    def template_calls_def_kernel(self, kind: str) -> bool:
        # A GEMM's def_kernel is Inductor's; a plain kernel without one is a template that
        # is only included by others (no KT209 for this profile).
        return False

    def new_kernel(self, instance: InstanceSpec, recorder: Recorder) -> Kernel:
        gemm = instance.kind == "cutlass_gemm"
        args = self.gemm_runtime_args if gemm else ()
        own = self.runtime_defaults(instance)
        values = [int(instance.variables.get(a.name, own[a.name])) for a in args]
        return Torch211Kernel(instance.kernel_name, recorder, gemm, args, values)

    def render_context(
        self,
        session: RenderSession,
        instance: InstanceSpec,
        result: Any,
        buffers: dict[str, Buffer | None],
        output: Buffer | None,
    ) -> dict[str, Any]:
        """CUTLASSGemmTemplate.render's `options` for a GEMM (def_kernel called before
        rendering, sizes/offsets/swizzle as C parameters); a plain CUDA kernel sees the
        torch-2.11 `kernel` and CUTLASSTemplate's `template` and calls def_kernel itself."""
        kernel = session.kernel
        assert isinstance(kernel, Torch211Kernel)
        variables = {
            k: v for k, v in instance.variables.items() if k not in self.runtime_variables(instance)
        }
        alpha, beta = _scalar(instance.alpha), _scalar(instance.beta)
        input_reorder = list(instance.input_reorder) if instance.input_reorder else None
        ctx: dict[str, Any] = {**variables, **buffers, "kernel": kernel, "alpha": alpha}
        ctx.update(beta=beta, input_reorder=input_reorder)
        if instance.kind != "cutlass_gemm":
            ctx["kernel_name"] = instance.kernel_name
            ctx["template"] = Torch211Template(
                session.recorder, kernel, output, spliced_text(instance.torch_package)
            )
            return ctx
        op, api = _gemm_op(session, instance, output, kernel)
        result.op = op
        for n in GEMM_BUFFERS:
            ctx.setdefault(n, None)
        api.roles = {n: buffers.get(n) for n in (*GEMM_BUFFERS, "Meta")}
        extra = [] if op.is_3x else ["Meta"]
        if extra:
            ctx.setdefault("Meta", None)
        argument_text, epilogue_text = sub_templates(session, instance)
        ctx.update(
            {
                "kernel_call_signature": _predefine_kernel(kernel, instance, buffers, extra),
                "epilogue_template": epilogue_text,
                "argument_template": argument_text,
                "should_swap_xw": op.should_swap_xw,
                "template": api,
                "instance_definition": op.definition,
                "instance_type": op.type_name,
                "epilogue_args": (
                    f"{{ElementComputeEpilogue({alpha}), ElementComputeEpilogue({beta})}}"
                ),
                "test_call_statement": api.test_call_statement(
                    ",".join(["X", "W", "Bias", *extra, "Y"]),
                    {n: buffers.get(n) is not None for n in ("Bias", *extra)},
                ),
                "op_conf_name": op.conf_name,
                "epilogue_visitor_tree": "",
                "dynamic_cluster": op.dynamic_cluster,
            }
        )
        return ctx

    def finish(self, result: Any) -> None:
        """torch 2.11's GEMM render ends with `IndentedBuffer().splice(res)`: common
        indentation removed, blank lines emptied, trailing blank lines dropped, one final
        newline. Line numbers do not move, so the source map only loses the dropped lines."""
        if result.instance.kind != "cutlass_gemm" or result.text is None:
            return
        result.text = splice_text(result.text)
        if result.source_map is not None:
            lines = result.text.count("\n")
            result.source_map = SourceMap(result.source_map.origins[: lines + 1])

    def prepare_op(self, instance: InstanceSpec) -> None:
        if instance.kind != "cutlass_gemm":
            return
        x, w, bias, y = gemm_layouts(instance)
        if x is not None and w is not None and y is not None:
            emit_instance_torch211(
                op_name(instance),
                x,
                w,
                bias,
                y,
                instance.sm,
                instance.instantiation_level,
                instance.torch_package,
            )

    def op_verdicts(self, instance: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
        return verdicts(instance, level)

    def runtime_variables(self, instance: InstanceSpec) -> tuple[str, ...]:
        if instance.kind != "cutlass_gemm":
            return ()
        return tuple(a.name for a in self.gemm_runtime_args)

    def runtime_defaults(self, instance: InstanceSpec) -> dict[str, int]:
        if instance.kind != "cutlass_gemm":
            return {}
        return dict(self.gemm_runtime_defaults)

    def call_arguments(self, kernel: Kernel | None) -> list[tuple[str, int]]:
        return kernel.extra_args() if isinstance(kernel, Torch211Kernel) else []


def _scalar(value: float) -> float | int:
    """alpha/beta as torch 2.11's aten defaults reach Inductor (ints when integral)."""
    return int(value) if float(value).is_integer() else value


def _gemm_op(
    r: RenderSession, instance: InstanceSpec, output: Buffer | None, kernel: Torch211Kernel
) -> tuple[EmittedOp, Torch211GemmTemplate]:
    name = op_name(instance)
    x, w, bias, y = gemm_layouts(instance)
    if x is None or w is None or y is None or min(len(x.shape), len(w.shape), len(y.shape)) < 2:
        raise ConfigProblem("a CUTLASS GEMM instance needs tensors X, W and Y of rank >= 2")
    expected = expected_ab_layouts(name)
    if expected is not None and expected != ("t", "n"):
        raise ConfigProblem(
            f"op '{name}' has A/B layouts '{''.join(expected)}'; torch 2.11 considers only "
            "'tn' ops (global_filter_ops) and sets A/B to the tensors' layouts itself: name "
            "the op's 'tn' variant"
        )
    op = emit_instance_torch211(
        name, x, w, bias, y, instance.sm, instance.instantiation_level, instance.torch_package
    )
    reorder = list(instance.input_reorder) if instance.input_reorder else None
    text = spliced_text(instance.torch_package)
    api: Torch211GemmTemplate
    if op.is_3x:
        api = Torch211Gemm3xTemplate(r.recorder, kernel, output, r.render_sub, reorder, text)
    else:
        api = Torch211Gemm2xTemplate(r.recorder, kernel, output, r.render_sub, text)
    return op, api


def _predefine_kernel(
    kernel: Kernel, instance: InstanceSpec, buffers: dict[str, Buffer | None], extra: list[str]
) -> str:
    """torch 2.11's CUTLASSGemmTemplate.render calls def_kernel before rendering, with inputs
    X, W, Bias (+ Meta for 2.x) and names "X,W,Bias[,Meta],Y"; the result is
    `kernel_call_signature`."""
    names = ["X", "W", "Bias", *extra]
    inputs = [buffers.get(n) for n in names]
    reorder = list(instance.input_reorder) if instance.input_reorder else None
    return str(kernel.def_kernel(inputs, [buffers.get("Y")], ",".join([*names, "Y"]), reorder))


PROFILE = Torch211(
    name="torch-2.11",
    mirrors="torch 2.11.0 (torch/_inductor/codegen/cutlass/)",
    kernel_api=Torch211Kernel.TEMPLATE_API,
    template_api={
        "cuda": Torch211Template.TEMPLATE_API,
        "cutlass_gemm": Torch211GemmTemplate.TEMPLATE_API,
    },
    context={
        "cuda": COMMON | {"kernel_name"},
        "cutlass_gemm": COMMON | GEMM_211 | SUB_TEMPLATE | {"instance_type", "Meta"},
    },
    gemm_buffers=GEMM_BUFFERS,
    def_kernel_before_render=frozenset({"cutlass_gemm"}),
    torch_versions=((2, 11),),
)
