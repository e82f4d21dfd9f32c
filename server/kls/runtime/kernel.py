"""`kernel.*`: Inductor's CUDATemplateKernel helpers, re-implemented on instance buffers.

Semantics follow Inductor (PR #107931 era), including its silent behaviours (`ptr` of an
unregistered buffer is "nullptr", `check_not_null` of one is ""); kls keeps the behaviour and
records a finding so the template author sees it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, ClassVar

import jinja2

from kls.findings import Severity
from kls.runtime.buffers import Buffer
from kls.runtime.record import CallRecord, Recorder

EXTRA_CPP_ARGS = "size_t* workspace_size, uint8_t* workspace, cudaStream_t stream"
# The parameters def_kernel's signature adds after the buffers: no buffer may take these names.
SIGNATURE_C_NAMES = frozenset({"workspace_size", "workspace", "stream"})
# Names the GEMM templates' C code declares itself (plus the signature's); a buffer named like
# one breaks the build. A plain CUDA kernel's own declarations are found in its rendered text
# (kls.checks.rendered), not assumed.
RESERVED_C_NAMES = frozenset(
    {
        "M",
        "N",
        "K",
        "B",
        "workspace",
        "workspace_size",
        "stream",
        "arguments",
        "gemm_op",
        "hw_info",
        "status",
        "coord_t",
        "ElementComputeEpilogue",
        "lda",
        "ldb",
        "ldc",
        "ldd",
    }
)
NEEDS_DEF_KERNEL = ("ptr", "check_not_null", "arg_name")


@dataclass(frozen=True)
class CParam:
    """One parameter of the exported C function, in order."""

    name: str
    ctype: str
    buffer: str
    is_output: bool

    def declaration(self) -> str:
        return (
            f"{self.ctype}* {self.name}" if self.is_output else f"const {self.ctype}* {self.name}"
        )


def undefined_buffer(
    recorder: Recorder, rec: CallRecord, inputs: list[Any], outputs: list[Any]
) -> None:
    """A name in def_kernel's lists that the instance does not define (a typo: `[Lhs, Rsh]`)
    stops the render as KT102 at that name's token, before any follow-on finding."""
    for arg, nodes in ((0, inputs), (1, outputs)):
        for node in nodes:
            if isinstance(node, jinja2.Undefined):
                name = getattr(node, "_undefined_name", None) or "?"
                raise recorder.abort("KT102", f"'{name}' is undefined", rec, arg)


def swapped_message(name: str, own: str, position: int, count: int) -> str:
    """What KT213 says (static and render-time): a names_str entry that is another buffer's
    own name."""
    return (
        f"names_str calls buffer {own} (position {position + 1} of {count} in inputs + "
        f"outputs) '{name}', the name of buffer {name}: the C parameter '{name}' would hold "
        f"{own}'s data; list the names in the order of inputs, then outputs"
    )


def _normalize(index: int, total: int) -> int:
    return index if index >= 0 else index + total


class Kernel:
    """The `kernel` object a template sees."""

    # What a template may reach (the sandbox refuses everything else): Inductor's helpers.
    TEMPLATE_API: ClassVar[frozenset[str]] = frozenset(
        {
            "def_kernel",
            "arg_name",
            "ptr",
            "check_not_null",
            "size",
            "stride",
            "row_or_column_stride",
            "dtype",
            "offset",
            "kernel_name",
        }
    )

    def __repr__(self) -> str:
        """What `{{ kernel }}` or `|pprint` shows: what it is, nothing of kls's insides."""
        return f"<kernel {self.kernel_name}: def_kernel and the buffer helpers>"

    def __init__(
        self, name: str, recorder: Recorder, reserved: frozenset[str] = RESERVED_C_NAMES
    ) -> None:
        self.kernel_name = name
        self.recorder = recorder
        self.reserved = reserved  # C names a parameter must not take (profile and kind)
        self.input_buffers: dict[str, str] = {}  # buffer name -> C parameter name
        self.output_buffers: dict[str, str] = {}
        self.input_ctypes: dict[str, str] = {}
        self.output_ctypes: dict[str, str] = {}
        self.named_nodes: dict[str, Buffer] = {}
        self.def_kernel_calls: list[CallRecord] = []
        self.declared: dict[str, CallRecord] = {}  # C name -> the def_kernel call
        self.used: set[str] = set()  # buffer names passed to helpers after def_kernel

    # -- def_kernel -------------------------------------------------------------------------
    def def_kernel(
        self,
        inputs: list[Buffer | None],
        outputs: list[Buffer | None],
        names_str: str = "",
        input_reorder: list[int] | None = None,
    ) -> str:
        rec = self._declare_buffers(inputs, outputs, names_str, input_reorder)
        rec.result = self.signature_text()
        return rec.result

    def _second_call_message(self) -> str:
        return (
            "def_kernel is called a second time; its parameters are appended to the first "
            "call's and the C signature is emitted twice. Call it once."
        )

    def _declare_buffers(
        self,
        inputs: list[Buffer | None],
        outputs: list[Buffer | None],
        names_str: str,
        input_reorder: list[int] | None,
    ) -> CallRecord:
        """What every profile's def_kernel does first (Inductor's CUDATemplateKernel): names
        split on ',', checked against the buffers, inputs registered in `input_reorder` order,
        then outputs. Returns the call's record."""
        rec = self.recorder.call("kernel", "def_kernel", inputs, outputs, names_str, input_reorder)
        if self.def_kernel_calls:
            self.recorder.add("KT210", Severity.ERROR, self._second_call_message(), rec)
        self.def_kernel_calls.append(rec)
        names = [x.strip() for x in str(names_str).strip().split(",")]
        inputs, outputs = list(inputs), list(outputs)
        undefined_buffer(self.recorder, rec, inputs, outputs)
        if len(inputs) + len(outputs) != len(names):
            raise self.recorder.abort(
                "KT201",
                f"names_str has {len(names)} name(s) ({', '.join(names)}) but def_kernel got "
                f"{len(inputs)} input(s) + {len(outputs)} output(s); "
                "give one name per buffer, inputs first, then outputs",
                rec,
                2,
            )
        self._swapped(names, [*inputs, *outputs], rec)
        order = self._reorder(input_reorder, len(inputs), rec)
        for idx in order:
            self._register(names[idx], inputs[idx], self.input_buffers, self.input_ctypes, rec)
        for name, node in zip(names[len(inputs) :], outputs):
            self._register(name, node, self.output_buffers, self.output_ctypes, rec)
        return rec

    def _swapped(self, names: list[str], nodes: list[Buffer | None], rec: CallRecord) -> None:
        """KT213 for names built at render time (a literal names_str is checked statically,
        name by name): one finding for the call, at its first swapped name."""
        own = [n.get_name() if isinstance(n, Buffer) else None for n in nodes]
        swaps = [i for i, name in enumerate(names) if own[i] not in (None, name) and name in own]
        if swaps:
            i = swaps[0]
            message = swapped_message(names[i], str(own[i]), i, len(names))
            more = f" ({len(swaps) - 1} more name(s) swapped)" if len(swaps) > 1 else ""
            self.recorder.add("KT213", Severity.ERROR, message + more, rec, 2)

    def _reorder(self, input_reorder: list[int] | None, n: int, rec: CallRecord) -> list[int]:
        if input_reorder is None:
            return list(range(n))
        order = list(input_reorder)
        if len(order) != n:
            raise self.recorder.abort(
                "KT202",
                f"input_reorder has {len(order)} entries but def_kernel got {n} inputs; "
                f"give a permutation of range({n})",
                rec,
                3,
            )
        if sorted(order) != list(range(n)):
            bad = [i for i in order if not 0 <= i < n]
            what = f"index {bad[0]} is out of range" if bad else "an index repeats"
            missing = sorted(set(range(n)) - set(order))
            dropped = f"; input(s) {missing} would get no C parameter" if missing else ""
            raise self.recorder.abort(
                "KT203",
                f"input_reorder {order} is not a permutation of range({n}): {what}{dropped}",
                rec,
                3,
            )
        return order

    def _register(
        self,
        name: str,
        node: Buffer | None,
        table: dict[str, str],
        ctypes: dict[str, str],
        rec: CallRecord,
    ) -> None:
        if node is None:
            return
        if not isinstance(node, Buffer):
            raise self.recorder.abort(
                "KT212", f"def_kernel got {node!r} for '{name}', which is not a buffer", rec
            )
        if not name.isidentifier():
            self.recorder.add(
                "KT207", Severity.ERROR, f"'{name}' is not a valid C identifier", rec, 2
            )
        elif self._is_reserved(name):
            self.recorder.add("KT208", Severity.ERROR, self._reserved_message(name), rec, 2)
        previous = table.get(node.get_name())
        if previous is not None:
            self.recorder.add(
                "KT206",
                Severity.WARNING,
                f"buffer '{node.get_name()}' is passed twice (as '{previous}' and '{name}'); "
                f"Inductor keeps one C parameter, named '{name}'",
                rec,
            )
            self.declared.pop(previous, None)
        table[node.get_name()] = name
        ctypes[node.get_name()] = self._param_ctype(node)
        self.named_nodes[name] = node
        self.declared[name] = rec

    # What differs between profiles in registering a buffer: reserved names and C types.
    def _is_reserved(self, name: str) -> bool:
        return name in self.reserved

    def _reserved_message(self, name: str) -> str:
        return (
            f"parameter name '{name}' collides with a name the signature or the template's "
            "C code declares; rename it in names_str"
        )

    def _param_ctype(self, node: Buffer) -> str:
        return node.spec.dtype.cpp

    def params(self) -> list[CParam]:
        out = [
            CParam(name, self.input_ctypes[buf], buf, False)
            for buf, name in self.input_buffers.items()
        ]
        out += [
            CParam(name, self.output_ctypes[buf], buf, True)
            for buf, name in self.output_buffers.items()
        ]
        return out

    def signature_text(self) -> str:
        params = ", ".join(p.declaration() for p in self.params())
        sep = ", " if params else ""
        return f"PT_EXPORT int {self.kernel_name}({params}{sep}{EXTRA_CPP_ARGS})"

    def call_signature(self) -> str:
        """The newer profile's `kernel_call_signature` (without PT_EXPORT)."""
        return self.signature_text().removeprefix("PT_EXPORT ")

    # -- helpers ----------------------------------------------------------------------------
    def arg_name(self, node: Buffer | None) -> str | None:
        rec = self._use("arg_name", node)
        return self._arg_name(node, rec)

    def _arg_name(self, node: Buffer | None, rec: CallRecord) -> str | None:
        if node is None:
            return None
        name = self.input_buffers.get(node.get_name()) or self.output_buffers.get(node.get_name())
        if name is None and self.def_kernel_calls:
            self.recorder.add(
                "KT204",
                Severity.ERROR,
                f"buffer '{node.get_name()}' is not declared in def_kernel, so "
                f"kernel.{rec.helper} gives "
                f"{'nullptr' if rec.helper == 'ptr' else 'nothing'} (Inductor does this "
                "silently); add it to def_kernel's inputs/outputs and names_str",
                rec,
                0,
            )
        return name

    def ptr(self, node: Buffer | None) -> str:
        rec = self._use("ptr", node)
        name = self._arg_name(node, rec)
        if node is None or name is None:
            rec.result = "nullptr"
            return rec.result
        offset = str(node.spec.offset)
        rec.result = name if offset == "0" else f"{name} + {offset}"
        return rec.result

    def check_not_null(self, node: Buffer | None) -> str:
        rec = self._use("check_not_null", node)
        if node is None:
            return ""
        name = self._arg_name(node, rec)
        if name is None:
            return ""
        size = self._size(node, 0, -1, 0, rec)
        body = f"""\
        {{
          if (!{name}) {{
            int64_t {name}_size = {size};
            if ({name}_size > 0) {{
              throw std::runtime_error("input {name} is null but size is not 0!");
            }}
          }}
        }}"""
        rec.result = textwrap.indent(textwrap.dedent(body), "  ").strip()
        return rec.result

    def size(
        self,
        node: Buffer | None,
        start_index: int,
        end_index: int | None = None,
        default_value: int = 0,
    ) -> str:
        rec = self._use("size", node)
        rec.result = self._size(node, start_index, end_index, default_value, rec)
        return rec.result

    def _size(
        self,
        node: Buffer | None,
        start_index: int,
        end_index: int | None,
        default_value: int,
        rec: CallRecord,
    ) -> str:
        if node is None:
            return str(default_value)
        rank = len(node.shape)
        if start_index >= rank:
            self._out_of_rank(node, start_index, rec, 1)
        start = _normalize(start_index, rank)
        end = start if end_index is None else _normalize(end_index, rank)
        sizes = node.shape[start : end + 1] if start >= 0 else ()
        if len(sizes) == 0:
            return str(default_value)
        product = 1
        for s in sizes:
            product *= s
        return str(product)

    def stride(self, node: Buffer | None, index: int, default_value: int = 0) -> str:
        rec = self._use("stride", node)
        norm = self._stride_index(node, index, rec)
        if node is None or norm is None:
            rec.result = str(default_value)
        else:
            rec.result = str(node.stride[norm])
        return rec.result

    def _stride_index(self, node: Buffer | None, index: int, rec: CallRecord) -> int | None:
        """`index` normalised by `node`'s rank, or None where Inductor gives the default
        (no node, an index past the rank (KT302), one still negative: the "no batch" idiom)."""
        if node is None:
            return None
        rank = len(node.shape)
        if index >= rank:
            self._out_of_rank(node, index, rec, 1)
            return None
        norm = _normalize(index, rank)
        return norm if norm >= 0 else None

    def row_or_column_stride(self, node: Buffer | None, default_value: int = 0) -> str:
        rec = self._use("row_or_column_stride", node)
        if node is None or len(node.stride) < 2:
            rec.result = str(default_value)
            return rec.result
        last, second = node.stride[-1], node.stride[-2]
        if last == 1:
            rec.result = str(second)
        elif second == 1:
            rec.result = str(last)
        else:
            self.recorder.add(
                "KT306",
                Severity.ERROR,
                f"buffer '{node.get_name()}' has strides {node.stride}: neither of the last two "
                "is 1, so it is neither row- nor column-major (Inductor raises here)",
                rec,
                0,
            )
            rec.result = str(default_value)
        return rec.result

    def dtype(self, node: Buffer | None) -> str:
        rec = self._use("dtype", node)
        rec.result = "void" if node is None else node.spec.dtype.cpp
        return rec.result

    def offset(self, node: Buffer | None) -> str:
        rec = self._use("offset", node)
        rec.result = "0" if node is None else str(node.spec.offset)
        return rec.result

    def _use(self, helper: str, node: Any) -> CallRecord:
        rec = self.recorder.call("kernel", helper, node)
        if isinstance(node, Buffer):
            self.used.add(node.get_name())
        if helper in NEEDS_DEF_KERNEL and node is not None and not self.def_kernel_calls:
            self.recorder.add(
                "KT211",
                Severity.ERROR,
                f"kernel.{helper} is called before def_kernel, when no buffer has a C name yet "
                "(Inductor returns nothing useful here); call def_kernel first",
                rec,
            )
        return rec

    def _out_of_rank(self, node: Buffer, index: int, rec: CallRecord, arg: int) -> None:
        self.recorder.add(
            "KT302",
            Severity.ERROR,
            f"index {index} is out of range for '{node.get_name()}' of rank {len(node.shape)} "
            f"(valid: {-len(node.shape)}..{len(node.shape) - 1})",
            rec,
            arg,
        )
