"""The instance data model: plain, immutable values read from kls.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from kls.dtypes import DType
from kls.positions import Range

# A profile's name: the template API generation an instance's templates are written for. The
# names are those of kls.profiles' registry (one package a profile); this is the default.
Profile = str
DEFAULT_PROFILE: Profile = "inductor-2023"
# Profile names kls once accepted -> their replacement (read with a KT002 warning).
RENAMED_PROFILES = {"inductor-2025": "torch-2.11"}
InstanceKind = Literal["cutlass_gemm", "cuda", "triton"]
KINDS: tuple[InstanceKind, ...] = get_args(InstanceKind)
# What a benchmark verifies the output against (see kls.bench.reference): a built-in, "none"
# (time without verifying), or the user's own function, "file.py:function" (kls.toml
# relative); an instance that says nothing and is no GEMM has the reference "unset".
Reference = Literal["gemm", "softmax", "none"]
REFERENCES: tuple[Reference, ...] = get_args(Reference)
UNSET_REFERENCE = "unset"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor the template sees as a buffer: shape, dtype, strides (elements), offset."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    stride: tuple[int, ...]
    offset: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    def describe(self) -> str:
        shape = "x".join(str(s) for s in self.shape)
        return f"{self.dtype.name}[{shape}] stride=({', '.join(str(s) for s in self.stride)})"


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return tuple(strides)


def column_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Last two dims column-major, batch dims outermost (what `.t()` of a contiguous gives)."""
    if len(shape) < 2:
        return contiguous_strides(shape)
    rows, cols = shape[-2], shape[-1]
    strides = [0] * len(shape)
    strides[-2], strides[-1] = 1, max(rows, 1)
    inner = rows * cols
    for i in range(len(shape) - 3, -1, -1):
        strides[i] = inner
        inner *= max(shape[i], 1)
    return tuple(strides)


@dataclass(frozen=True)
class OpFilter:
    """Pick a CUTLASS op by properties; the first match in name order wins."""

    contains: tuple[str, ...] = ()
    arch: str | None = None


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    template: Path
    config_path: Path
    profile: Profile = "inductor-2023"
    kind: InstanceKind = "cuda"
    arch: str = "90a"
    kernel_name: str = "kls_kernel"
    tensors: dict[str, TensorSpec | None] = field(default_factory=dict)
    alpha: float = 1.0
    beta: float = 0.0
    input_reorder: tuple[int, ...] | None = None
    argument_template: Path | None = None
    epilogue_template: Path | None = None
    should_swap_xw: bool = False
    op: str | None = None
    op_filter: OpFilter | None = None
    # Inductor's cuda.cutlass_instantiation_level: the op list `op`/`op_filter` draw from.
    instantiation_level: str = "0"
    variables: dict[str, Any] = field(default_factory=dict)
    reference: str = UNSET_REFERENCE  # a Reference, "unset", or "/abs/file.py:function"
    tolerance: float | None = None  # max relative error; None: the output dtype's default
    # The real folders this instance's templates and their includes may be read from: the
    # config's folder, then any extra roots (see kls.instances.roots).
    roots: tuple[Path, ...] = ()
    # The torch source's package folder (the one holding _inductor/) when one was located
    # for this config: `torch:` references read from it, and a profile that reproduces
    # Inductor's text reads that text there (kls.upstream).
    torch_package: Path | None = None
    # Triton templates: the launch, the device model the render answers Inductor with (an
    # H200 by default: kls.profiles.triton.device), and Inductor's template by its name
    # (None: the one whose source is the template file's text).
    num_warps: int = 4
    num_stages: int = 3
    device: dict[str, Any] = field(default_factory=dict)
    inductor_template: str | None = None
    # Flex attention's mods as "/abs/file.py:function" (None: flex's identity / no mask).
    score_mod: str | None = None
    mask_mod: str | None = None
    line: int = 0  # where the instance's table starts in its config file
    op_line: int = 0  # where its op (or op_filter) is written
    reorder_range: Range | None = None  # where its input_reorder is written, when it is

    @property
    def sm(self) -> int:
        """The numeric compute capability, e.g. 90 for '90a'."""
        return int("".join(ch for ch in self.arch if ch.isdigit()) or 0)
