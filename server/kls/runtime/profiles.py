"""The template API generations kls mirrors, each from a real PyTorch release: one place for
what differs between them (helpers, context names, reserved C names, who calls def_kernel).

- `inductor-2023`: the seed's API, PR #107931 (`torch/_inductor/codegen/cuda/`): templates call
  `kernel.def_kernel(...)` themselves; sizes and strides render as literals.
- `torch-2.11`: torch 2.11.0 (`torch/_inductor/codegen/cutlass/`): Inductor calls def_kernel
  before rendering a GEMM and hands the template `kernel_call_signature`, which takes the sizes
  (M, N, K, B, lda..ldd), buffer offsets and runtime arguments (swizzle) from the caller.

The helper names come from the runtime classes' `TEMPLATE_API` (what the sandbox lets a
template reach), so checks, completion and the sandbox cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kls.instances.schema import RENAMED_PROFILES
from kls.runtime.kernel import RESERVED_C_NAMES, SIGNATURE_C_NAMES, Kernel
from kls.runtime.template_api import GemmTemplateAPI, TemplateAPI
from kls.runtime.torch211 import (
    Torch211GemmTemplate,
    Torch211Kernel,
    Torch211Template,
    reserved_c_names,
)

DEFAULT = "inductor-2023"

_COMMON = frozenset({"kernel", "template", "input_reorder", "alpha", "beta"})
_GEMM_2023 = frozenset(
    {
        "instance_definition",
        "instance_type",
        "argument_template",
        "epilogue_template",
        "should_swap_xw",
        "epilogue_args",
        "op_conf_name",
    }
)
# CUTLASSGemmTemplate.render's `options` (torch 2.11), besides the buffers.
_GEMM_211 = _GEMM_2023 | {
    "kernel_call_signature",
    "test_call_statement",
    "epilogue_visitor_tree",
    "dynamic_cluster",
}
# What render_gemm_arguments adds for the argument/epilogue sub-templates.
_SUB_TEMPLATE = frozenset({"M", "N", "epilogue_arguments", "split_k"})


@dataclass(frozen=True)
class Profile:
    name: str
    mirrors: str
    kernel_api: frozenset[str]
    template_api: dict[str, frozenset[str]]  # by instance kind
    context: dict[str, frozenset[str]]  # fixed context names by kind (plus tensors, vars)
    gemm_buffers: tuple[str, ...]  # buffers every GEMM context has (None when absent)
    def_kernel_before_render: frozenset[str] = field(default_factory=frozenset)  # kinds
    # The torch releases (major, minor) whose Inductor this profile mirrors; () for none.
    torch_versions: tuple[tuple[int, int], ...] = ()

    def api(self, owner: str, kind: str | None = None) -> frozenset[str]:
        """The names `kernel.`/`template.` may reach (for `kind`, or any kind)."""
        if owner == "kernel":
            return self.kernel_api
        if kind is not None:
            return self.template_api.get(kind, frozenset())
        return frozenset().union(*self.template_api.values())

    def reserved_c_names(self, kind: str) -> frozenset[str]:
        """C names a def_kernel parameter must not take (the template's C code or the
        signature declares them)."""
        if self.name == "torch-2.11":
            return reserved_c_names(kind == "cutlass_gemm")
        # A GEMM's C code (the 2023 templates) declares M, N, K, B, lda.., arguments, ...; a
        # plain CUDA kernel declares only what its own text declares (checked once rendered).
        return RESERVED_C_NAMES if kind == "cutlass_gemm" else SIGNATURE_C_NAMES

    def context_names(self, kind: str) -> frozenset[str]:
        return self.context.get(kind, frozenset())


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "inductor-2023",
            "PyTorch PR #107931 (torch/_inductor/codegen/cuda/, 2023)",
            Kernel.TEMPLATE_API,
            {"cuda": TemplateAPI.TEMPLATE_API, "cutlass_gemm": GemmTemplateAPI.TEMPLATE_API},
            {
                "cuda": _COMMON | {"kernel_name"},
                "cutlass_gemm": _COMMON | {"kernel_name"} | _GEMM_2023 | _SUB_TEMPLATE,
            },
            (),
        ),
        Profile(
            "torch-2.11",
            "torch 2.11.0 (torch/_inductor/codegen/cutlass/)",
            Torch211Kernel.TEMPLATE_API,
            {
                "cuda": Torch211Template.TEMPLATE_API,
                "cutlass_gemm": Torch211GemmTemplate.TEMPLATE_API,
            },
            {
                "cuda": _COMMON | {"kernel_name"},
                "cutlass_gemm": _COMMON | _GEMM_211 | _SUB_TEMPLATE | {"instance_type", "Meta"},
            },
            ("X", "W", "Bias", "Y"),
            frozenset({"cutlass_gemm"}),
            ((2, 11),),
        ),
    )
}


def profile(name: str) -> Profile:
    return PROFILES[RENAMED_PROFILES.get(name, name)]
