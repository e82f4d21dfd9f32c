"""The `triton` profile: PyTorch Inductor's Triton templates (`*.py.jinja` and the
`TritonTemplate(source=...)` strings), as torch 2.11 renders them.

The render is Inductor's own, in a persistent torch worker (kls.profiles.triton.worker), with
kls's sandbox in place of Inductor's Jinja environment and the instance's device model in
place of a GPU; the module text is what Inductor benchmarks while autotuning. Where torch
cannot be imported the instance gets the static checks only, and one note says so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kls.findings import Severity
from kls.instances.schema import UNSET_REFERENCE, InstanceSpec, TensorSpec
from kls.profiles.base import ConfigSpace, ConfigSpaceError, Profile
from kls.profiles.triton.align import align
from kls.profiles.triton.client import WorkerUnavailable, shared_worker, torch_python
from kls.profiles.triton.errors import finding_for
from kls.profiles.triton.flex_parts import flex_op
from kls.profiles.triton.flex_render import render_flex
from kls.profiles.triton.flex_space import flex_space
from kls.profiles.triton.overridden import overridden_findings
from kls.profiles.triton.tensors import output_name
from kls.runtime.kernel import SIGNATURE_C_NAMES
from kls.runtime.record import RuntimeFinding, Site
from kls.runtime.result import RenderResult
from kls.sourcemap import Origin, SourceMap
from kls.template.source import TemplateRef, read_source

# TritonTemplateKernel.render's helpers, passed to the template as plain names.
HELPERS = frozenset(
    {
        "def_kernel",
        "size",
        "stride",
        "store_output",
        "load_input",
        "make_load",
        "modification",
        "gen_argdefs",
        "gen_defines",
    }
)

# Inductor's matmul templates (their registered names): verified by a float64 matmul.
MATMUL_TEMPLATES = frozenset(
    {"mm", "bmm", "mm_persistent_tma", "blackwell_ws_persistent_device_tma"}
)


def _tensor(spec: TensorSpec, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(spec.shape),
        "stride": list(spec.stride),
        "dtype": spec.dtype.name,
    }


def _layout_findings(instance: InstanceSpec, stride: Any) -> list[RuntimeFinding]:
    """A warning where Inductor's lowering gave the output another layout than kls.toml
    declares (Inductor's mm makes its output contiguous, whatever an out= would ask): the
    module writes Inductor's layout, and the benchmark follows it."""
    out = output_name(instance)
    spec = instance.tensors.get(out) if out is not None else None
    if spec is None or not isinstance(stride, list) or list(spec.stride) == stride:
        return []
    return [
        RuntimeFinding(
            "KT813",
            Severity.WARNING,
            f"Inductor's lowering writes {out} with stride {tuple(stride)}; kls.toml declares "
            f"stride {tuple(spec.stride)}. The module (and kls bench) use Inductor's layout: "
            f"declare {out} with stride = {list(stride)} to say what runs",
            Site(str(instance.config_path), instance.line),
        )
    ]


class Triton(Profile):
    language = "python"
    tunes_configs = True

    def reserved_c_names(self, kind: str) -> frozenset[str]:
        return SIGNATURE_C_NAMES

    def template_calls_def_kernel(self, kind: str) -> bool:
        return False

    def request(self, instance: InstanceSpec, text: str, disk_text: str) -> dict[str, Any]:
        """What the torch worker is asked: the template's text, its tensors as Inductor's
        input buffers (in kls.toml order) and output layout, the config and launch."""
        out = output_name(instance)
        inputs = [
            _tensor(spec, f"arg{i}_1")
            for i, (name, spec) in enumerate(
                (n, s) for n, s in instance.tensors.items() if n != out and s is not None
            )
        ]
        output = instance.tensors.get(out) if out is not None else None
        return {
            "text": text,
            "disk_sha256": hashlib.sha256(disk_text.encode()).hexdigest(),
            "inductor_template": instance.inductor_template,
            # file.py::NAME: Inductor's registered name when NAME is one (conv.py::convolution2d)
            "constant": TemplateRef.parse(instance.template).constant,
            "inputs": inputs,
            "output": _tensor(output, "out") if output is not None else None,
            "vars": instance.variables,
            "num_warps": instance.num_warps,
            "num_stages": instance.num_stages,
            "device": instance.device,
        }

    def render_elsewhere(
        self, instance: InstanceSpec, overrides: dict[Path, str], seconds: float | None = None
    ) -> Any:
        if flex_op(instance) is not None:
            return render_flex(instance, overrides, seconds)
        path = str(instance.template)
        result = RenderResult(instance, None, None, [], [])
        result.files = [path]
        try:
            source = read_source(instance.template, overrides)
            disk = read_source(instance.template).text if overrides else source.text
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            result.findings.append(
                RuntimeFinding("KT105", Severity.ERROR, f"cannot read template: {exc}", None)
            )
            return result
        if (
            output_name(instance) is None
            or instance.tensors.get(output_name(instance) or "") is None
        ):
            result.findings.append(
                RuntimeFinding(
                    "KT801",
                    Severity.ERROR,
                    "a Triton instance needs its tensors: the inputs in def_kernel's order, "
                    "then the output (named out)",
                    Site(str(instance.config_path), instance.line),
                )
            )
            return result
        try:
            request = self.request(instance, source.text, disk)
            answer = shared_worker().render({**request, "template_seconds": seconds})
        except WorkerUnavailable as exc:
            result.findings.append(RuntimeFinding("KT800", Severity.INFO, str(exc), Site(path, 0)))
            return result
        error = answer.get("error")
        if error:
            result.findings.append(finding_for(error, instance, source.text))
            return result
        module = str(answer.get("module", ""))
        result.text = module
        launch = answer.get("launch")
        written = launch.get("output_stride") if isinstance(launch, dict) else None
        result.findings.extend(_layout_findings(instance, written))
        result.findings.extend(overridden_findings(instance, module))
        result.launch = launch if isinstance(launch, dict) else None
        result.source_map = SourceMap(
            [
                Origin(path, line) if line is not None else None
                for line in align(source.text, module)
            ]
        )
        return result

    # -- the benchmark ---------------------------------------------------------------------
    def bench_reference(self, instance: InstanceSpec, rendered: Any) -> str:
        """Inductor's own mm and bmm: a float64 matmul of the first two inputs; flex
        attention's forward: torch's flex_attention with its mods on the GPU ("flex"), its
        decode and backward: their op's name (no built-in reference yet: the worker says
        what to do); a project's template (which may borrow mm's launch and compute
        anything): kls.toml's."""
        if instance.reference != UNSET_REFERENCE:
            return instance.reference
        launch = getattr(rendered, "launch", None) or {}
        template = str(launch.get("template", ""))
        if "flex" in launch:  # Inductor's flex op, whatever the template's text
            if launch.get("mask_reads_batch_or_head") is not False:
                return "flex_per_head"  # the kernel's [1, 1] block mask is batch 0, head 0's
            return "flex" if template == "flex_attention" else template
        if launch.get("inductor_text") and template in MATMUL_TEMPLATES:
            return "gemm"
        return instance.reference

    def bench_operands(self, instance: InstanceSpec) -> tuple[str, ...]:
        out = output_name(instance)
        return tuple(n for n, s in instance.tensors.items() if n != out and s is not None)[:2]

    def config_space(self, instance: InstanceSpec, exhaustive: bool = False) -> ConfigSpace | None:
        """Inductor's own configs for the instance's template and tensors, from its lowering
        in the torch worker ([] for a template kls knows no lowering of); for flex, its
        heuristics' configs and flags (kls.profiles.triton.flex_space)."""
        try:
            return self._config_space(instance, exhaustive)
        except WorkerUnavailable as exc:
            raise ConfigSpaceError(
                f"{exc}; kls tune of a Triton instance renders through torch: "
                "pip install -e '.[torch]' (docs/TRITON.md)"
            ) from None

    def _config_space(self, instance: InstanceSpec, exhaustive: bool) -> ConfigSpace:
        op = flex_op(instance)
        if op is not None:
            return flex_space(instance, op, exhaustive)
        text = read_source(instance.template).text
        request = {**self.request(instance, text, text), "kind": "configs"}
        request["exhaustive"] = exhaustive
        answer = shared_worker().render(request)
        error = answer.get("error")
        if error:
            raise ConfigSpaceError(str(error.get("message", error)))
        return ConfigSpace(list(answer.get("configs", [])))

    def bench_launch(self, instance: InstanceSpec, rendered: Any) -> dict[str, Any] | None:
        """The module, its kernel, the tensors in the kernel's argument order (the inputs in
        kls.toml's order, then the output) and Inductor's launch arguments."""
        launch = getattr(rendered, "launch", None)
        text = getattr(rendered, "text", None)
        out = output_name(instance)
        if text is None or out is None:
            return None
        inputs = [n for n, s in instance.tensors.items() if n != out and s is not None]
        launch = launch if isinstance(launch, dict) else {}
        return {
            **launch,
            "module": text,
            "tensors": launch.get("tensors") or [*inputs, out],  # flex: the kernel's own
            "num_warps": instance.num_warps,
            "num_stages": instance.num_stages,
        }

    def bench_python(self) -> str | None:
        return torch_python()


PROFILE = Triton(
    name="triton",
    mirrors="torch 2.11.0 (torch/_inductor/select_algorithm.py TritonTemplate)",
    kernel_api=frozenset(),
    template_api={"triton": frozenset()},
    context={"triton": HELPERS},
    torch_versions=((2, 11),),
)
