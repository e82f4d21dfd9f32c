"""Buffers: what a template sees for `X`, `W`, `Bias`, `Y` (Inductor's IR nodes, here tensors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kls.instances.schema import TensorSpec


@dataclass(frozen=True, eq=False)
class Buffer:
    """Identity is the object: the same tensor passed twice is one buffer (Inductor's dedup)."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset({"get_name", "name", "shape", "stride"})

    spec: TensorSpec
    stride: tuple[int, ...]

    @staticmethod
    def of(spec: TensorSpec) -> Buffer:
        return Buffer(spec, spec.stride)

    def get_name(self) -> str:
        return self.spec.name

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    def transposed_view(self) -> Buffer:
        """Same buffer name, last two strides exchanged (render_gemm_arguments' swap)."""
        stride = list(self.stride)
        if len(stride) >= 2:
            stride[-2], stride[-1] = stride[-1], stride[-2]
        return Buffer(self.spec, tuple(stride))

    def __repr__(self) -> str:
        return f"<buffer {self.spec.name}: {self.spec.describe()}>"

    def __str__(self) -> str:
        return self.spec.name
