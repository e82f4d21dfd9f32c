"""The `torch-2.11-streamk` profile: torch 2.11's CUTLASS GEMM API (the `torch-2.11`
profile) with the stream-K tile scheduler's arguments passed at run time as well.

Inductor's entry takes `CUTLASSTemplate.get_runtime_arg_info()`'s arguments after the buffer
offsets (swizzle, for its 3.x GEMMs); a template class that lists more keeps the same calling
convention with more of them. This profile lists the fields of CUTLASS 3.x's
`PersistentTileSchedulerSm90StreamK::Arguments` (the `scheduler` member of a GemmUniversal's
arguments), so one build serves every shape and every scheduler setting:

    swizzle        max_swizzle_size                      const uint8_t   1, 2, 4, 8
    splits         splits (split-K factor)               const int       1 ..
    decomposition  decomposition_mode: 0 heuristic, 1 data-parallel, 2 split-K, 3 stream-K
    reduction      reduction_mode: 0 deterministic, 1 nondeterministic
    raster         raster_order: 0 heuristic, 1 along M, 2 along N

(the enums' order is `cutlass::gemm::kernel::detail`'s). Only ops built on the stream-K
scheduler have these fields, so the profile accepts only those (`_stream_k_` in the name).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigProblem, RenderSession, Verdict
from kls.profiles.op_list import op_name
from kls.profiles.torch211 import PROFILE as TORCH211
from kls.profiles.torch211 import Torch211
from kls.profiles.torch211.runtime import GEMM_RUNTIME_ARGS, ArgInfo
from kls.runtime.buffers import Buffer

STREAM_K_MARK = "_stream_k_"  # in the name of every op built on the stream-K scheduler

SCHEDULER_RUNTIME_ARGS = (
    *GEMM_RUNTIME_ARGS,
    ArgInfo("splits", "const int"),
    ArgInfo("decomposition", "const uint8_t"),
    ArgInfo("reduction", "const uint8_t"),
    ArgInfo("raster", "const uint8_t"),
)

HEURISTIC, DATA_PARALLEL, SPLIT_K, STREAM_K = 0, 1, 2, 3  # DecompositionMode
DECOMPOSITIONS = {HEURISTIC: "heuristic", DATA_PARALLEL: "data-parallel", SPLIT_K: "split-K",
                  STREAM_K: "stream-K"}  # fmt: skip
REDUCTIONS = {0: "deterministic", 1: "nondeterministic"}  # ReductionMode
RASTERS = {0: "heuristic", 1: "along M", 2: "along N"}  # RasterOrderOptions


def not_stream_k(op: str) -> str:
    return (
        f"op '{op}' has no stream-K tile scheduler: this profile passes splits, decomposition "
        f"and reduction at run time, which only the stream-K scheduler takes (choose an op "
        f"with '{STREAM_K_MARK}' in its name)"
    )


def scheduler_setting(values: dict[str, Any]) -> dict[str, Any] | None:
    """The canonical form of a full scheduler setting, or None when CUTLASS refuses it
    (`can_implement`: more than one split needs the split-K or the heuristic mode) or a value
    is out of its enum's range. A heuristic setting with splits > 1 takes CUTLASS's split-K
    path; split-K with one split is a data-parallel decomposition; a data-parallel one reduces
    nothing, so its reduction mode does not matter."""
    out = dict(values)
    splits, mode, reduction = int(out["splits"]), int(out["decomposition"]), int(out["reduction"])
    if splits < 1 or mode not in DECOMPOSITIONS or reduction not in REDUCTIONS:
        return None
    if int(out["raster"]) not in RASTERS:
        return None
    if splits > 1 and mode in (DATA_PARALLEL, STREAM_K):
        return None
    if mode == HEURISTIC and splits > 1:
        mode = SPLIT_K
    if mode == SPLIT_K and splits == 1:
        mode = DATA_PARALLEL
    if mode == DATA_PARALLEL:
        reduction = 0
    out.update(decomposition=mode, reduction=reduction)
    return out


class Torch211Scheduler(Torch211):
    gemm_runtime_args: ClassVar[tuple[ArgInfo, ...]] = SCHEDULER_RUNTIME_ARGS
    gemm_runtime_defaults: ClassVar[dict[str, int]] = {
        "swizzle": 1,
        "splits": 1,
        "decomposition": HEURISTIC,
        "reduction": 0,
        "raster": 0,
    }

    def render_context(
        self,
        session: RenderSession,
        instance: InstanceSpec,
        result: Any,
        buffers: dict[str, Buffer | None],
        output: Buffer | None,
    ) -> dict[str, Any]:
        if instance.kind == "cutlass_gemm":
            name = op_name(instance)
            if STREAM_K_MARK not in name:
                raise ConfigProblem(not_stream_k(name))
        return super().render_context(session, instance, result, buffers, output)

    def op_verdicts(self, instance: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
        for verdict in super().op_verdicts(instance, level):
            if verdict.choice is not None and STREAM_K_MARK not in verdict.op:
                yield Verdict(verdict.op, None, not_stream_k(verdict.op))
            else:
                yield verdict

    def runtime_setting(
        self, instance: InstanceSpec, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        full = {**self.runtime_defaults(instance), **values}
        if instance.kind != "cutlass_gemm":
            return full
        return scheduler_setting(full)


PROFILE = Torch211Scheduler(
    name="torch-2.11-streamk",
    mirrors="torch 2.11.0 (torch/_inductor/codegen/cutlass/), with the stream-K scheduler's "
    "arguments at run time",
    kernel_api=TORCH211.kernel_api,
    template_api=TORCH211.template_api,
    context=TORCH211.context,
    gemm_buffers=TORCH211.gemm_buffers,
    def_kernel_before_render=TORCH211.def_kernel_before_render,
    torch_versions=TORCH211.torch_versions,
    same_api_as=TORCH211.name,
)
