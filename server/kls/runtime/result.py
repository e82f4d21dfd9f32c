"""What a render produces, whoever rendered it (kls's Jinja run, or a profile's own such as
Inductor's in a torch worker): the text, its source map, the calls and findings, the C
parameters and op of a CUTLASS kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kls.cuda_syntax import ParseOutcome
from kls.cutlass.ops import EmittedOp
from kls.instances.schema import InstanceSpec
from kls.runtime.kernel import CParam, Kernel
from kls.runtime.record import CallRecord, RuntimeFinding
from kls.sourcemap import SourceMap


@dataclass
class RenderResult:
    instance: InstanceSpec
    text: str | None
    source_map: SourceMap | None
    calls: list[CallRecord]
    findings: list[RuntimeFinding]
    params: list[CParam] = field(default_factory=list)
    kernel: Kernel | None = None
    op: EmittedOp | None = None
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # tree-sitter's parse of `text` (KT501), done by the render worker after the render;
    # None: not parsed (kls.checks.syntax then asks a worker to parse it).
    syntax: ParseOutcome | None = None
    # A profile's own renderer only (Inductor's): how its module is launched, as it said
    # (Triton: the template's name, the arguments after the tensors, the workspace).
    launch: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None
