"""`template.*`: Inductor's CUDATemplate / CUTLASSGemmTemplate helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kls.runtime.buffers import Buffer
from kls.runtime.cuda_text import (
    CUDA_GLOBALS,
    CUDA_HEADER,
    CUTLASS_GLOBALS,
    CUTLASS_HEADER,
    GEMM_HEADER,
)
from kls.runtime.kernel import Kernel
from kls.runtime.record import Recorder
from kls.runtime.roles import check_roles


class IndentedBuffer:
    """What `header()`/`globals()` return: the template must call `.getvalue()`."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset({"getvalue"})

    def __init__(self, text: str) -> None:
        self._text = text

    def getvalue(self) -> str:
        return self._text

    def __str__(self) -> str:  # what Jinja prints when `.getvalue()` is forgotten
        return "<IndentedBuffer: call .getvalue() for its text>"


class TemplateAPI:
    """The `template` object of a plain CUDA template."""

    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset({"header", "globals"})

    headers: tuple[str, ...] = (CUDA_HEADER,)
    global_parts: tuple[str, ...] = (CUDA_GLOBALS,)

    def __init__(self, recorder: Recorder, kernel: Kernel, output: Buffer | None) -> None:
        self.recorder = recorder
        self.kernel = kernel
        self.output_node = output

    def __repr__(self) -> str:
        return "<template: CUDA template helpers (inductor-2023)>"

    def header(self) -> IndentedBuffer:
        self.recorder.call("template", "header")
        return IndentedBuffer("".join(self.headers))

    def globals(self) -> IndentedBuffer:
        self.recorder.call("template", "globals")
        return IndentedBuffer("".join(self.global_parts))


SubRender = Callable[[str, dict[str, Any]], str]


class GemmTemplateAPI(TemplateAPI):
    def __repr__(self) -> str:
        return "<template: CUTLASS GEMM helpers (inductor-2023)>"

    """The `template` object of a CUTLASS GEMM template (CUTLASSGemmTemplate)."""

    TEMPLATE_API: ClassVar[frozenset[str]] = TemplateAPI.TEMPLATE_API | {
        "cute_int",
        "cutlass_type_cast",
        "gemm_mode",
        "render_gemm_arguments",
    }

    headers = (CUDA_HEADER, CUTLASS_HEADER, GEMM_HEADER)
    global_parts = (CUDA_GLOBALS, CUTLASS_GLOBALS)

    def __init__(
        self,
        recorder: Recorder,
        kernel: Kernel,
        output: Buffer | None,
        alpha: float,
        beta: float,
        render_sub: SubRender,
    ) -> None:
        super().__init__(recorder, kernel, output)
        self.alpha = alpha
        self.beta = beta
        self._render_sub = render_sub
        self.roles: dict[str, Buffer | None] = {}  # the instance's buffer of each role

    def cute_int(self, int_str: str, var_name: str) -> str:
        rec = self.recorder.call("template", "cute_int", int_str, var_name)
        value = "cute::Int<1>{}" if int_str in ("1", "1L") else int_str
        rec.result = f"{value} /* {var_name} */"
        return rec.result

    def cutlass_type_cast(self, node: Buffer | None, ptr: str) -> str:
        rec = self.recorder.call("template", "cutlass_type_cast", node, ptr)
        rec.result = ptr if node is None else f"({node.spec.dtype.cutlass}*)({ptr})"
        return rec.result

    def gemm_mode(self) -> str:
        rec = self.recorder.call("template", "gemm_mode")
        batched = self.output_node is not None and len(self.output_node.shape) > 2
        mode = "kBatched" if batched else "kGemm"
        rec.result = f"cutlass::gemm::GemmUniversalMode::{mode}"
        return rec.result

    def render_gemm_arguments(
        self,
        argument_template: str,
        epilogue_template: str | None,
        should_swap_xw: bool,
        X: Buffer | None,
        W: Buffer | None,
        Bias: Buffer | None,
        Y: Buffer | None,
        alpha: float,
        beta: float,
        kernel: Kernel,
        epilogue_args: str | None = None,
    ) -> str:
        """Render the epilogue sub-template, then the argument sub-template around it."""
        rec = self.recorder.call("template", "render_gemm_arguments")
        passed = [("X", 3, X), ("W", 4, W), ("Bias", 5, Bias), ("Y", 6, Y)]
        check_roles(self.recorder, rec, "render_gemm_arguments", passed, self.roles)
        options: dict[str, Any] = dict(
            alpha=self.alpha,
            beta=self.beta,
            X=X,
            W=W,
            Y=Y,
            Bias=Bias,
            template=self,
            kernel=kernel,
            M="M",
            N="N",
            epilogue_args=epilogue_args,
        )
        if epilogue_template is None:
            return self._render_sub(argument_template, {**options, "split_k": 1})
        if should_swap_xw:
            swap = [b.transposed_view() if b is not None else None for b in (X, W, Bias, Y)]
            options["X"], options["W"], options["Bias"], options["Y"] = (
                swap[1],
                swap[0],
                swap[2],
                swap[3],
            )
            options["M"], options["N"] = "N", "M"
        epilogue_arguments = self._render_sub(epilogue_template, options)
        return self._render_sub(
            argument_template, {**options, "epilogue_arguments": epilogue_arguments}
        )
