"""What a profile is: one template family and API generation, behind one interface.

Render, checks, bench, tune and the language server reach profile behaviour only through a
`Profile` (found by name in `kls.profiles`): they never test a profile's name or class. A
profile provides
- the names a template may use: `kernel.`/`template.` helpers (`api`), context names by
  instance kind, reserved C names, the buffers every GEMM context has;
- `render_context`: the Jinja context of one render, built on a `RenderSession` (the
  renderer's recorder, kernel, file reads and nested renders);
- `finish`: the step after Jinja (e.g. torch 2.11's `IndentedBuffer.splice`);
- `runtime_variables` and `call_arguments`: the values the built entry takes at each call
  besides the tensors (sizes, offsets, swizzle), as names for tune tables and as (C type,
  value) pairs for the benchmark; `runtime_defaults` and `runtime_setting` (their values
  when unset, and which settings the entry refuses or runs alike: the tune times one each);
- `prepare_op`: kls's own trusted work before a render's deadline starts (the op list);
- rule facts: whether the template itself must call def_kernel (KT209) and whether its
  signature carries PT_EXPORT (KT405's advice);
- `torch_versions`: the torch releases it mirrors (KT008 when the torch source differs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from kls.instances.schema import InstanceSpec
from kls.runtime.buffers import Buffer
from kls.runtime.kernel import Kernel
from kls.runtime.record import Recorder


@dataclass(frozen=True)
class OpChoice:
    op: str  # the generator's op name (what kls.toml's `op` takes)
    conf_name: str  # configuration name after Inductor's filter (its dedup key)
    family: str  # kernel schedule / epilogue, for the plot and table
    tile: str  # e.g. 128x256x64 cluster 2x1x1
    kernel: str = ""  # hash of the emitted C++ with the op's own name blanked (dedup key)
    level: str = "0"  # the cutlass_instantiation_level whose list holds the op


@dataclass(frozen=True)
class Verdict:
    """One generated op: accepted (as `choice`) or refused, with the reason in words."""

    op: str
    choice: OpChoice | None
    reason: str = ""


class ConfigProblem(Exception):
    """The instance's config does not fit the template's profile (reported at kls.toml)."""


class RenderSession(Protocol):
    """What a profile's context builder may use of the renderer."""

    recorder: Recorder
    kernel: Kernel
    text_to_path: dict[str, str]

    def read(self, path: Path) -> str: ...

    def render_sub(self, source: str, context: dict[str, Any]) -> str: ...


class ConfigSpaceError(Exception):
    """The space of a config tune cannot be read for this instance; the message says why."""


@dataclass
class ConfigSpace:
    """What a config tune searches besides the instance's own config and its tune table."""

    configs: list[dict[str, Any]]  # Inductor's configs for the instance
    # Overlays each config is tried with (e.g. {"USE_TMA": True}); [{}]: the configs alone.
    flag_sets: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    notes: list[str] = field(default_factory=list)  # a flag not offered, and why
    # Each config is whole (flex's: BLOCK_M, BLOCK_N, num_warps, num_stages), so it is tried as
    # it is; else only the keys the instance itself sets are taken from it (Inductor's mm
    # configs also carry values its lowering derives).
    complete: bool = False


@dataclass(frozen=True)
class Profile:
    name: str
    mirrors: str
    kernel_api: frozenset[str]
    template_api: dict[str, frozenset[str]]  # by instance kind
    context: dict[str, frozenset[str]]  # fixed context names by kind (plus tensors, vars)
    gemm_buffers: tuple[str, ...] = ()  # buffers every GEMM context has (None when absent)
    def_kernel_before_render: frozenset[str] = field(default_factory=frozenset)  # kinds
    torch_versions: tuple[tuple[int, int], ...] = ()  # the torch releases it mirrors
    # Whether def_kernel's signature begins with PT_EXPORT (a second one is a mistake).
    signature_exports: bool = False
    # A profile with another's template API (helpers, context names), its docs said once there.
    same_api_as: str = ""
    # What the template renders to: "cuda" (C++, checked with tree-sitter and nvcc) or
    # "python" (a Triton module, checked with ast and Triton's compiler).
    language: ClassVar[str] = "cuda"
    # What `kls tune` searches: the op (CUTLASS) or the template's config (Triton:
    # inductor_configs gives Inductor's own).
    tunes_configs: ClassVar[bool] = False

    # -- names -----------------------------------------------------------------------------
    def api(self, owner: str, kind: str | None = None) -> frozenset[str]:
        """The names `kernel.`/`template.` may reach (for `kind`, or any kind)."""
        if owner == "kernel":
            return self.kernel_api
        if kind is not None:
            return self.template_api.get(kind, frozenset())
        return frozenset().union(*self.template_api.values())

    def context_names(self, kind: str) -> frozenset[str]:
        return self.context.get(kind, frozenset())

    def reserved_c_names(self, kind: str) -> frozenset[str]:
        """C names a def_kernel parameter must not take."""
        raise NotImplementedError

    def template_calls_def_kernel(self, kind: str) -> bool:
        """Whether the template itself must call def_kernel (else there is no entry)."""
        return kind not in self.def_kernel_before_render

    # -- render ----------------------------------------------------------------------------
    def new_kernel(self, instance: InstanceSpec, recorder: Recorder) -> Kernel:
        """The `kernel` object before the context is built."""
        return Kernel(instance.kernel_name, recorder, self.reserved_c_names(instance.kind))

    def render_context(
        self,
        session: RenderSession,
        instance: InstanceSpec,
        result: Any,
        buffers: dict[str, Buffer | None],
        output: Buffer | None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def finish(self, result: Any) -> None:
        """The step after Jinja; the default keeps the text as rendered."""

    def render_elsewhere(
        self, instance: InstanceSpec, overrides: dict[Path, str], seconds: float | None = None
    ) -> Any:
        """A profile whose render is not kls's Jinja run (Inductor's own, in a torch worker)
        returns the RenderResult here; None: kls renders it in a sandbox worker. `seconds`:
        the render limit for the template's own code."""
        return None

    def prepare_op(self, instance: InstanceSpec) -> None:
        """Fill the op caches the render will read (trusted work, before its deadline)."""

    # -- ops -------------------------------------------------------------------------------
    def op_verdicts(self, instance: InstanceSpec, level: str | None = None) -> Iterator[Verdict]:
        """Every generated op for the instance's arch, accepted or refused with the reason
        (what `kls ops` prints and the tuner draws from). ConfigProblem without an op list."""
        raise ConfigProblem(f"profile '{self.name}' has no op list to choose from")

    def compatible_ops(self, instance: InstanceSpec, level: str | None = None) -> list[OpChoice]:
        """The accepted ops, one per distinct configuration, sorted."""
        found: dict[str, OpChoice] = {}
        for verdict in self.op_verdicts(instance, level):
            if verdict.choice is not None:
                found.setdefault(verdict.choice.conf_name, verdict.choice)
        return [found[k] for k in sorted(found)]

    # -- the benchmark ---------------------------------------------------------------------
    def bench_reference(self, instance: InstanceSpec, rendered: Any) -> str:
        """What the benchmark verifies the output against: kls.toml's `reference`, or the
        profile's choice for the rendered kernel where kls.toml names none."""
        return instance.reference

    def bench_operands(self, instance: InstanceSpec) -> tuple[str, ...]:
        """The tensors the built-in gemm reference (and the cuBLAS baseline) read: X, W, then
        the optional Bias."""
        return ("X", "W", "Bias")

    def bench_launch(self, instance: InstanceSpec, rendered: Any) -> dict[str, Any] | None:
        """How the benchmark worker launches the rendered module itself (kls.bench.module
        reads it), or None: the rendered text is built into a library whose entry is called."""
        return None

    def bench_python(self) -> str | None:
        """The Python that runs the benchmark worker (None: the one running kls)."""
        return None

    # -- tuning a config -------------------------------------------------------------------
    def config_space(self, instance: InstanceSpec, exhaustive: bool = False) -> ConfigSpace | None:
        """Where a tune searches the template's config (num_warps, num_stages, its
        variables) rather than ops (`tunes_configs`): the configs Inductor's own heuristics
        try for the instance (`exhaustive`: its EXHAUSTIVE search space) and the kernel
        flags worth trying with each."""
        return None

    # -- the built entry -------------------------------------------------------------------
    def runtime_variables(self, instance: InstanceSpec) -> tuple[str, ...]:
        """Variables the entry takes at each call (one build serves all their values)."""
        return ()

    def call_arguments(self, kernel: Kernel | None) -> list[tuple[str, int]]:
        """(C type, value) of every argument after the tensor pointers."""
        return []

    def runtime_defaults(self, instance: InstanceSpec) -> dict[str, int]:
        """The value the render passes for each runtime variable the instance leaves unset."""
        return {}

    def runtime_setting(
        self, instance: InstanceSpec, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """`values` of the runtime variables (the instance's own for those left out), in the
        canonical form of the setting they make: two settings the kernel runs alike map to
        one form, so a tune times one of them; None for a setting the entry refuses."""
        return {**self.runtime_defaults(instance), **values}


ContextBuilder = Callable[..., dict[str, Any]]
