"""Differential proof for the `triton` profile: an instance declared in kls.toml reaches the
same kernel as `torch.compile` does for the same op, shapes and config.

For each instance of benchmarks/triton_conformance.toml (mm with three configs, bmm,
persistent-TMA mm):
- **kls** renders it (`render_isolated`: Inductor's template in kls's torch worker, with kls's
  IR, layouts, device model and sandbox);
- **Inductor** compiles the op (`torch.mm`/`torch.bmm` on tensors with the instance's shapes,
  strides and dtype) with `torch.compile(mode="max-autotune-no-cudagraphs")`, Triton templates
  only, one config per template; `TritonTemplate.generate` is wrapped so that the choice it
  generates for the instance's template carries the instance's config (its `vars`,
  `num_warps`, `num_stages` put in place of Inductor's values, every other argument Inductor's
  own). That choice is autotuned, and its module (`choice.bmreq.module_path`) is the text
  torch.compile benchmarks.
The texts are compared after normalising only what Inductor generates per process (the
kernel's name). Then both modules run through Inductor's own launcher (the choice's benchmark
request, `make_run_fn`) on the same inputs (uniform[-1, 1]), and the outputs are compared
bitwise and with a float64 reference.

    PYTHONPATH=server python3 benchmarks/triton_conformance.py compile --out FILE   (GPU)
    .venv/bin/python benchmarks/triton_conformance.py lower --out FILE            (CPU)

`lower` needs no GPU: Inductor's own lowering of the op (`tuned_mm`/`tuned_bmm` over input
buffers with the instance's layouts, the generate wrapper pinning the config) runs in a
process where kls's device model answers for the GPU, as in kls's torch worker. It proves the
same text identity up to torch.compile's front end (tracing, the FX graph), and is what the CPU
test runs (tests/core/test_triton_conformance.py).

`--digests` writes tests/data/triton211_renders.json: per instance the digest (sha256, length,
a hash per line) of Inductor's module, which the CPU test compares with kls's render; no
upstream text is kept.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).resolve().parent / "triton_conformance.toml"
KERNEL = "KERNEL_NAME"
OPS = {"mm": "mm", "mm_persistent_tma": "mm", "bmm": "bmm"}
# generate()'s launch arguments, given beside the config in kls.toml's vars.
LAUNCH_ARGS = frozenset({"tma_store", "transpose_discontiguous_tensor_descriptors_override"})


def normalize(text: str) -> str:
    """The module with what Inductor generates per process and machine replaced: the
    kernel's function name, inductor_meta's kernel_name, and its backend_hash (a hash of the
    Triton build, whose native library differs between Python versions)."""
    found = re.search(r"^def (\w+)\(", text, re.M)
    if found:
        text = re.sub(rf"\b{re.escape(found.group(1))}\b", KERNEL, text)
    text = re.sub(r"'kernel_name': '[^']*'", f"'kernel_name': '{KERNEL}'", text)
    return re.sub(r"'backend_hash': '[0-9A-Fa-f]+'", "'backend_hash': 'BACKEND_HASH'", text)


def first_difference(inductor: str, kls: str) -> str:
    """'' when the texts are equal, else the first line that differs, both sides quoted."""
    a, b = inductor.split("\n"), kls.split("\n")
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            col = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            start = max(0, col - 40)
            return (
                f"line {i + 1}, column {col + 1}: inductor {x[start : col + 80]!r} / "
                f"kls {y[start : col + 80]!r}"
            )
    if len(a) != len(b):
        return f"line {min(len(a), len(b)) + 1}: lengths {len(a)} vs {len(b)} lines"
    return ""


def digest(text: str) -> dict[str, Any]:
    """What the CPU regression test keeps of a render: sha256, length, a hash per line."""
    return {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "length": len(text),
        "lines": [hashlib.sha256(line.encode()).hexdigest()[:12] for line in text.split("\n")],
    }


def pinned_kwargs(inductor: dict[str, Any], spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """generate()'s keyword arguments with the instance's config in place of Inductor's, and
    the config keys only one side has (a conformance finding in itself)."""
    kwargs = dict(inductor)
    kwargs["num_warps"] = spec.num_warps
    kwargs["num_stages"] = spec.num_stages
    own = dict(spec.variables)
    for key, value in own.items():
        kwargs[key] = value
    config_keys = {k for k in inductor if k.isupper()}
    mismatch = {
        "kls_only": sorted(set(own) - set(inductor)),
        "inductor_only": sorted(config_keys - set(own)),
        "values_changed": {
            k: [inductor[k], own[k]]
            for k in own
            if k in inductor and inductor[k] != own[k] and k not in LAUNCH_ARGS
        },
    }
    return kwargs, mismatch


class Pin:
    """Wraps TritonTemplate.generate: the instance's template is generated with its config,
    and the resulting choice is kept."""

    def __init__(self, template: str, spec: Any) -> None:
        self.template = template
        self.spec = spec
        self.choice: Any = None
        self.mismatch: dict[str, Any] = {}
        self.calls: list[str] = []

    def __enter__(self) -> Pin:
        from torch._inductor.select_algorithm import TritonTemplate

        self.original = TritonTemplate.generate
        pin = self

        def generate(template: Any, **kwargs: Any) -> Any:
            pin.calls.append(template.name)
            if template.name != pin.template or pin.choice is not None:
                return None  # one choice, the pinned template's: nothing else is compiled
            pinned, pin.mismatch = pinned_kwargs(kwargs, pin.spec)
            pin.choice = pin.original(template, **pinned)
            return pin.choice

        TritonTemplate.generate = generate  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from torch._inductor.select_algorithm import TritonTemplate

        TritonTemplate.generate = self.original  # type: ignore[method-assign]


def tensors(torch: Any, spec: Any, generator: Any) -> list[Any]:
    """The instance's tensors on the GPU, uniform[-1, 1], with its shapes and strides."""
    made = []
    for t in spec.tensors.values():
        base = torch.empty_strided(
            t.shape, t.stride, dtype=getattr(torch, t.dtype.name), device="cuda"
        )
        made.append(base.uniform_(-1, 1, generator=generator))
    return made


def settings(template: str) -> dict[str, Any]:
    """Inductor's configuration for the case: Triton templates only, one config each, no
    cache that could skip the lowering."""
    return {
        "max_autotune_gemm_backends": "TRITON",
        "triton.enable_persistent_tma_matmul": template == "mm_persistent_tma",
        "test_configs.max_mm_configs": 1,
        "fx_graph_cache": False,  # no cached graph may skip the lowering (not in the module)
    }


def template_of(spec: Any) -> str:
    return spec.inductor_template or name_from_template(spec)


def inductor_module(torch: Any, spec: Any, inputs: list[Any]) -> tuple[Any, Pin]:
    """torch.compile of the instance's op with its config pinned: the autotuned choice."""
    from torch._inductor import config

    template = template_of(spec)
    op = getattr(torch, OPS[template])
    torch._dynamo.reset()
    with config.patch(settings(template)), Pin(template, spec) as pin:
        compiled = torch.compile(lambda a, b: op(a, b), mode="max-autotune-no-cudagraphs")
        compiled(*inputs)
    if pin.choice is None:
        raise RuntimeError(f"torch.compile generated no {template!r} choice; it called {pin.calls}")
    return pin.choice, pin


def lowered_module(torch: Any, spec: Any) -> tuple[str, Pin]:
    """Inductor's lowering of the instance's op (tuned_mm/tuned_bmm) over input buffers with
    its layouts, the config pinned, under max-autotune's settings: the module text. Needs kls's
    device model in place of a GPU (kls.profiles.triton.worker's patch)."""
    from torch._inductor import config, ir
    from torch._inductor.graph import GraphLowering
    from torch._inductor.kernel.bmm import tuned_bmm
    from torch._inductor.kernel.mm import tuned_mm
    from torch._inductor.virtualized import V

    from kls.profiles.triton.tensors import output_name
    from kls.profiles.triton.worker import autotuning_config

    template = template_of(spec)
    lowering = {"mm": tuned_mm, "bmm": tuned_bmm}[OPS[template]]
    graph = GraphLowering(torch.fx.symbolic_trace(lambda *xs: xs[0]))
    device = torch.device("cuda", 0)
    out = output_name(spec)
    with V.set_graph_handler(graph), autotuning_config(), config.patch(settings(template)):
        nodes = []
        for i, t in enumerate(t for n, t in spec.tensors.items() if n != out):
            layout = ir.FixedLayout(device, getattr(torch, t.dtype.name), t.shape, t.stride)
            node = ir.TensorBox.create(ir.InputBuffer(name=f"arg{i}_1", layout=layout))
            graph.graph_inputs[f"arg{i}_1"] = node
            graph.graph_input_names.append(f"arg{i}_1")
            nodes.append(node)
        with Pin(template, spec) as pin:
            lowering(*nodes)
    if pin.choice is None:
        raise RuntimeError(f"Inductor generated no {template!r} choice; it called {pin.calls}")
    return Path(pin.choice.bmreq.module_path).read_text(), pin


def lower_cases(instances: dict[str, Any]) -> list[dict[str, Any]]:
    """`lower`: every instance's kls render against Inductor's lowering, on the CPU."""
    import torch

    from kls.profiles.triton.worker import _patch_device
    from kls.sandbox.workers import render_isolated

    _patch_device(torch)
    rows = []
    for name, spec in instances.items():
        row: dict[str, Any] = {"case": name}
        rendered = render_isolated(spec)
        try:
            inductor_text, pin = lowered_module(torch, spec)
        except Exception as exc:
            row["inductor_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            rows.append(row)
            continue
        row["config_mismatch"] = pin.mismatch
        if rendered.text is None:
            row["kls_error"] = [f.message for f in rendered.findings]
        else:
            difference = first_difference(normalize(inductor_text), normalize(rendered.text))
            row["identical"] = difference == ""
            row["first_difference"] = difference
        rows.append(row)
    return rows


def name_from_template(spec: Any) -> str:
    stem = Path(str(spec.template)).name
    return {
        "triton_mm.py.jinja": "mm",
        "triton_bmm.py.jinja": "bmm",
        "triton_persistent_tma_mm.py.jinja": "mm_persistent_tma",
    }[stem]


def with_module(bmreq: Any, text: str, kernel: str | None = None) -> Any:
    """Inductor's benchmark request with `text` as its module (kls's render in Inductor's
    place; its kernel `kernel`, else the text's first function)."""
    path = Path(tempfile.mkdtemp(prefix="kls-conf-")) / "module.py"
    path.write_text(text)
    swapped = copy.copy(bmreq)
    swapped.module_path = str(path)
    swapped.module_cache_key = hashlib.sha256(text.encode()).hexdigest()
    found = re.search(r"^def (\w+)\(", text, re.M)
    swapped.kernel_name = kernel or (found.group(1) if found else bmreq.kernel_name)
    return swapped


def launcher(choice: Any, text: str, kernel: str, inputs: list[Any], out: Any) -> Any:
    """A launch of the module `text` through Inductor's launcher for `choice` (its grid, extra
    args, workspace), writing `out`; Inductor's own module where `text` is empty."""
    request = with_module(choice.bmreq, text, kernel) if text else choice.bmreq
    return request.make_run_fn(*inputs, out=out)


def run_module(choice: Any, text: str, kernel: str, inputs: list[Any], out: Any) -> None:
    launcher(choice, text, kernel, inputs, out)()


def check_case(torch: Any, name: str, spec: Any) -> dict[str, Any]:
    from kls.profiles.triton.worker import template_kernel
    from kls.sandbox.workers import render_isolated

    row: dict[str, Any] = {"case": name, "template": str(spec.template)}
    started = time.monotonic()
    rendered = render_isolated(spec)
    row["kls_render_s"] = round(time.monotonic() - started, 2)
    if rendered.text is None:
        row["kls_error"] = [f.message for f in rendered.findings]
        return row
    kls_text = rendered.text
    generator = torch.Generator(device="cuda").manual_seed(0)
    *inputs, out_like = tensors(torch, spec, generator)
    started = time.monotonic()
    try:
        choice, pin = inductor_module(torch, spec, inputs)
    except Exception as exc:
        row["inductor_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        return row
    row["inductor_compile_s"] = round(time.monotonic() - started, 2)
    row["config_mismatch"] = pin.mismatch
    inductor_text = Path(choice.bmreq.module_path).read_text()
    row["inductor_digest"] = digest(normalize(inductor_text))
    difference = first_difference(normalize(inductor_text), normalize(kls_text))
    row["identical"] = difference == ""
    row["first_difference"] = difference
    found = template_kernel(kls_text)
    kernel = found[0] if found else choice.bmreq.kernel_name
    outputs = []
    for text in ("", kls_text):
        out = torch.empty_strided(
            out_like.shape, out_like.stride(), dtype=out_like.dtype, device="cuda"
        )
        out.fill_(float("nan"))
        run_module(choice, text, kernel, inputs, out)
        torch.cuda.synchronize()
        outputs.append(out)
    row["bitwise_equal"] = bool(torch.equal(outputs[0], outputs[1]))
    a, b = (x.double() for x in inputs)
    want = a @ b
    err = ((outputs[1].double() - want).abs().max() / want.abs().max()).item()
    row["kls_max_rel_err"] = err
    row["verified"] = err < 1e-2
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("compile", "lower"))
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--digests", type=Path)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    from kls.instances import load_instances

    instances = {
        name: spec
        for name, spec in load_instances(args.config).instances.items()
        if not args.only or name in args.only
    }
    if args.mode == "lower":
        rows = lower_cases(instances)
        args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
        print(json.dumps(rows, indent=1))
        return 0 if all(r.get("identical") for r in rows) else 1
    import torch

    rows = []
    for name, spec in instances.items():
        try:
            row = check_case(torch, name, spec)
        except Exception as exc:
            row = {"case": name, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        print(json.dumps({k: v for k, v in row.items() if k != "inductor_digest"}), flush=True)
        rows.append(row)
    record = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "method": "kls render_isolated vs torch.compile(mode='max-autotune-no-cudagraphs') "
        "with the instance's config pinned; texts compared with the kernel name normalised; "
        "both modules run through Inductor's launcher on the same uniform[-1,1] inputs",
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    if args.digests:
        digests = {r["case"]: r["inductor_digest"] for r in rows if "inductor_digest" in r}
        args.digests.write_text(
            json.dumps({"torch": torch.__version__, "cases": digests}, indent=1) + "\n"
        )
    good = all(r.get("identical") and r.get("bitwise_equal") for r in rows)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
