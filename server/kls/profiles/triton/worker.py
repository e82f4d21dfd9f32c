"""The torch render worker: `python -m kls.profiles.triton.worker`, one process kept alive.

It imports torch once and renders Inductor's Triton templates through Inductor itself
(`TritonTemplate.generate`), as Inductor renders them while autotuning: every placeholder
finished right after the render, nothing fused. No GPU is needed: the instance's device model
answers Inductor's questions about the device (capability, SM count, shared memory), and a
stand-in Triton driver names the target. Template code runs in kls's allowlist sandbox, put in
place of Inductor's own Jinja environment (with Inductor's `indent_except_first` filter).

Requests and answers are JSON lines on stdin/stdout; anything else printed goes to stderr.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from kls.profiles.triton.generate_args import inductor_arguments
from kls.profiles.triton.jit_error import innermost_compile_error, module_line
from kls.profiles.triton.launch import launch_of
from kls.profiles.triton.lowering import inductor_configs, lowered_choice
from kls.profiles.triton.template_time import TimedTemplate, install_alarm, start_budget


@dataclass(frozen=True)
class DeviceProps:
    """What torch.cuda.get_device_properties answers, for the instance's device model."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int
    regs_per_multiprocessor: int
    max_threads_per_multi_processor: int
    warp_size: int
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    L2_cache_size: int
    gcnArchName: str
    max_threads_per_block: int


def device_props(model: dict[str, Any]) -> Any:
    cc = int(model.get("cc", 90))
    return DeviceProps(
        name=str(model.get("name", "NVIDIA H200")),
        major=cc // 10,
        minor=cc % 10,
        multi_processor_count=int(model.get("sm_count", 132)),
        total_memory=int(model.get("memory_bytes", 143771 * 2**20)),
        regs_per_multiprocessor=int(model.get("regs_per_sm", 65536)),
        max_threads_per_multi_processor=int(model.get("threads_per_sm", 2048)),
        warp_size=int(model.get("warp_size", 32)),
        shared_memory_per_block_optin=int(model.get("shared_memory_per_block", 232448)),
        shared_memory_per_multiprocessor=int(model.get("shared_memory_per_sm", 233472)),
        L2_cache_size=int(model.get("l2_bytes", 50 * 2**20)),
        gcnArchName="",
        max_threads_per_block=1024,
    )


class _Device:
    """What the patched torch.cuda answers: the current request's device model."""

    props: Any = device_props({})


def _patch_device(torch: Any) -> None:
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: (_Device.props.major, _Device.props.minor)
    cuda.get_device_properties = lambda device=None: _Device.props
    cuda.get_device_name = lambda device=None: _Device.props.name
    cuda.is_tf32_supported = lambda: _Device.props.major >= 8
    cuda.is_bf16_supported = lambda including_emulation=True: _Device.props.major >= 8

    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class StandInDriver:
        """Triton's driver for a device that is not here: the target, nothing to launch."""

        def get_current_target(self) -> Any:
            props = _Device.props
            return GPUTarget("cuda", props.major * 10 + props.minor, props.warp_size)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: Any = None) -> int:
            return 0

        def get_device_interface(self) -> Any:
            return cuda

        def get_active_torch_device(self) -> Any:
            return torch.device("cuda", 0)

    driver.set_active(StandInDriver())


def _sandboxed_env() -> Any:
    """kls's allowlist sandbox with Inductor's Jinja settings and filter."""
    import jinja2
    from torch._inductor.codegen.common import KernelTemplate

    from kls.runtime.policy import AllowlistSandbox

    env = AllowlistSandbox(undefined=jinja2.StrictUndefined)
    env.filters["indent_except_first"] = KernelTemplate.indent_except_first
    return env


class Renderer:
    def __init__(self) -> None:
        import torch

        _patch_device(torch)
        import torch._inductor.fx_passes.b2b_gemm
        import torch._inductor.kernel.bmm
        import torch._inductor.kernel.conv
        import torch._inductor.kernel.mm
        import torch._inductor.kernel.mm_grouped
        import torch._inductor.kernel.mm_plus_mm
        from torch._inductor.select_algorithm import TritonTemplate

        self.torch = torch
        self.templates = TritonTemplate.all_templates
        self.env = _sandboxed_env()
        self.by_hash = {t._hash: name for name, t in self.templates.items()}

    def template_for(self, req: dict[str, Any]) -> Any:
        """Inductor's template object for the request, rendering the editor's text."""
        import copy

        from torch._inductor.select_algorithm import GeneratedCodeCache

        name = req.get("inductor_template") or self.by_hash.get(req.get("disk_sha256", ""))
        if name is None and req.get("constant") in self.templates:
            name = req["constant"]  # an edited copy of a registered inline template
        if name is None or name not in self.templates:
            raise LookupError(
                "no Inductor Triton template has this file's text; name it in kls.toml with "
                f'inductor_template = "..." (one of: {", ".join(sorted(self.templates))})'
            )
        original = self.templates[name]
        template = copy.copy(original)
        source = req["text"]
        template.template = TimedTemplate(self.env.from_string(source))
        template._hash = hashlib.sha256(source.encode()).hexdigest()
        template._generated_code_cache = GeneratedCodeCache()
        return template

    def input_nodes(self, graph: Any, req: dict[str, Any]) -> list[Any]:
        """The request's inputs as Inductor's input buffers of `graph`, fixed layouts."""
        from torch._inductor import ir

        device = self.torch.device("cuda", 0)
        nodes = []
        for t in req["inputs"]:
            dtype = getattr(self.torch, t["dtype"])
            layout = ir.FixedLayout(device, dtype, t["shape"], t["stride"])
            node = ir.TensorBox.create(ir.InputBuffer(name=t["name"], layout=layout))
            graph.graph_inputs[t["name"]] = node
            graph.graph_input_names.append(t["name"])
            nodes.append(node)
        return nodes

    def configs(self, req: dict[str, Any]) -> dict[str, Any]:
        """The configs Inductor's own lowering tries for the request's template and tensors
        (its template heuristics for the device model), none of them rendered."""
        from torch._inductor.graph import GraphLowering
        from torch._inductor.virtualized import V

        _Device.props = device_props(req.get("device", {}))
        template = self.template_for(req)
        graph = GraphLowering(self.torch.fx.symbolic_trace(lambda *xs: xs[0]))
        with V.set_graph_handler(graph), autotuning_config():
            nodes = self.input_nodes(graph, req)
            found = inductor_configs(template, nodes, bool(req.get("exhaustive")))
        return {"configs": found}

    def render(self, req: dict[str, Any]) -> dict[str, Any]:
        from torch._inductor import ir
        from torch._inductor.graph import GraphLowering
        from torch._inductor.virtualized import V

        torch = self.torch
        _Device.props = device_props(req.get("device", {}))
        template = self.template_for(req)
        gm = torch.fx.symbolic_trace(lambda *xs: xs[0])
        graph = GraphLowering(gm)
        device = torch.device("cuda", 0)
        with V.set_graph_handler(graph), autotuning_config():
            nodes = self.input_nodes(graph, req)
            out = req["output"]
            layout = ir.FixedLayout(
                device, getattr(torch, out["dtype"]), out["shape"], out["stride"]
            )
            req = dict(req, vars=inductor_arguments(req.get("vars", {}), nodes, device))
            choice = lowered_choice(template, nodes, req, layout) or template.generate(
                input_nodes=tuple(nodes),
                layout=layout,
                num_stages=int(req["num_stages"]),
                num_warps=int(req["num_warps"]),
                **req.get("vars", {}),
            )
        if not hasattr(choice, "bmreq"):
            raise RuntimeError(f"Inductor did not render the template: {choice}")
        with open(choice.bmreq.module_path, encoding="utf-8") as f:
            return {
                "module": f.read(),
                "kernel_name": getattr(choice.bmreq, "kernel_name", ""),
                "launch": {
                    **launch_of(template.name, choice.bmreq),
                    "output_stride": [int(n) for n in choice.layout.stride],
                    # The file is Inductor's own template (not a project's that borrows its
                    # launch): what it computes is known (mm: a matmul).
                    "inductor_text": self.by_hash.get(req.get("disk_sha256", "")) is not None,
                },
            }


def autotuning_config() -> Any:
    """Inductor's settings under `torch.compile(mode="max-autotune")`, the mode in which it
    autotunes templates: they reach the module's `inductor_meta`, so a render made without
    them would differ from the module Inductor benchmarks."""
    from torch._inductor import config

    return config.patch(max_autotune=True, coordinate_descent_tuning=True)


def compile_module(req: dict[str, Any]) -> dict[str, Any]:
    """Triton's compile of a rendered module for the request's target, without a GPU: the
    module's @triton.jit kernel (Inductor's autotuning decorator taken off), its signature and
    specialisation from the module's own triton_meta. Shared memory from the compile's
    metadata; registers, stack and local memory from the wheel's cuobjdump."""
    import importlib.util
    import subprocess
    import tempfile

    import triton
    import triton.backends.nvidia as nvidia
    from torch._inductor.runtime.hints import DeviceProperties
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    text = req["module"]
    found = template_kernel(text)
    if found is None:
        raise LookupError("the module has no Inductor template kernel to compile")
    kernel, first_line, meta_src, _decorator = found
    folder = tempfile.mkdtemp(prefix="kls-triton-")
    path = os.path.join(folder, "kernel.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(without_template_decorator(text))
    spec = importlib.util.spec_from_file_location("kls_triton_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    meta = eval(meta_src, {"DeviceProperties": DeviceProperties})  # the module's own literal
    configs = meta.get("configs") or [None]
    source = ASTSource(getattr(module, kernel), dict(meta["signature"]), {}, attrs=configs[0])
    cc = int(req.get("cc", 90))
    compiled = triton.compile(
        source,
        target=GPUTarget("cuda", cc, 32),
        options={"num_warps": int(req["num_warps"]), "num_stages": int(req["num_stages"])},
    )
    usage: dict[str, int | None] = {"REG": None, "STACK": None, "LOCAL": None}
    cubin = os.path.join(folder, "kernel.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    dump = subprocess.run(
        [tool, "--dump-resource-usage", cubin], capture_output=True, text=True, timeout=60
    ).stdout
    for key in usage:
        figure = re.search(rf"\b{key}:(\d+)", dump)
        usage[key] = int(figure.group(1)) if figure else None
    return {
        "shared": int(compiled.metadata.shared),
        "registers": usage["REG"],
        "stack": usage["STACK"],
        "local": usage["LOCAL"],
        "kernel_line": first_line - 1,
        "ptx": compiled.asm.get("ptx", "")[:2_000_000],
        "sass": sass_listing(os.path.dirname(tool), cubin) if req.get("sass") else None,
    }


def sass_listing(tools: str, cubin: str) -> str:
    """The cubin's SASS with its line info (`//## File "...", line N` before the instructions
    of each source line), by the triton wheel's nvdisasm; cuobjdump's plain listing where
    nvdisasm fails."""
    import subprocess

    done = subprocess.run(
        [os.path.join(tools, "nvdisasm"), "-c", "-g", cubin],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 or not done.stdout.strip():
        done = subprocess.run(
            [os.path.join(tools, "cuobjdump"), "-sass", cubin],
            capture_output=True,
            text=True,
            timeout=60,
        )
    return done.stdout[:4_000_000]


def template_kernel(text: str) -> tuple[str, int, str, range] | None:
    """The module's kernel under Inductor's `@triton_heuristics.template(...)`: its name, its
    `def` line (1-based), the source of its `triton_meta` literal and the decorator's lines
    (0-based); None when the module has none."""
    import ast

    for node in ast.parse(text).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "template":
                meta = next((k.value for k in deco.keywords if k.arg == "triton_meta"), None)
                source = ast.get_source_segment(text, meta) if meta is not None else None
                if source is None:
                    return None
                lines = range(deco.lineno - 1, deco.end_lineno or deco.lineno)
                return node.name, node.lineno, source, lines
    return None


def without_template_decorator(text: str) -> str:
    """The module with `@triton_heuristics.template(...)` removed (its lines left blank, so
    compile errors name the module's own lines)."""
    found = template_kernel(text)
    if found is None:
        return text
    lines = text.split("\n")
    for i in found[3]:
        lines[i] = ""
    return "\n".join(lines)


def _inductor_function(exc: BaseException) -> str | None:
    """The innermost function of Inductor's own code the exception passed through."""
    name = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if "_inductor" in frame.filename and frame.name != "<module>":
            name = frame.name
    return name


def _template_line(exc: BaseException) -> int | None:
    """The 0-based template line the exception was raised at (Jinja maps its frames)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "<template>" and frame.lineno is not None:
            line = frame.lineno - 1
    return line


def answer(renderer: Renderer | None, req: dict[str, Any]) -> dict[str, Any]:
    if renderer is None:
        return {"error": {"kind": "unavailable", "message": "torch is not importable"}}
    start_budget(req.get("template_seconds"))
    try:
        if req.get("kind") == "compile":
            return compile_module(req)
        if req.get("kind") == "configs":
            return renderer.configs(req)
        if req.get("kind") == "flex":
            from kls.profiles.triton.flex import render_flex

            _Device.props = device_props(req.get("device", {}))
            return render_flex(renderer.torch, renderer.env, req)
        if req.get("kind") == "flex_tune":
            from kls.profiles.triton.flex_configs import flex_tune_facts

            _Device.props = device_props(req.get("device", {}))
            return flex_tune_facts(renderer.torch, req)
        return renderer.render(req)
    except Exception as exc:
        shown: BaseException = exc
        where = None
        if req.get("kind") == "compile":  # the failing statement, in its own jit function
            shown = innermost_compile_error(exc)
            where = module_line(shown, str(req.get("module", "")))
        message = str(shown) or type(shown).__name__
        return {
            "error": {
                "kind": type(shown).__name__,
                "message": message,
                "line": _template_line(exc),
                "function": _inductor_function(exc),
                "module_line": where,
                "trace": "".join(traceback.format_exception(exc))[-4000:],
            }
        }


def main() -> int:
    answers = sys.stdout
    sys.stdout = sys.stderr  # torch and Inductor print; only answers go to the real stdout
    from kls.cache_dir import cache_dir

    # Inductor's own caches go to kls's cache, never into the user's project.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir("inductor")))
    try:
        renderer: Renderer | None = Renderer()
        ready: dict[str, Any] = {"ready": True}
    except Exception as exc:
        renderer = None
        buf = io.StringIO()
        traceback.print_exc(file=buf)
        ready = {"ready": False, "message": f"{type(exc).__name__}: {exc}", "trace": buf.getvalue()}
    answers.write(json.dumps(ready) + "\n")
    answers.flush()
    install_alarm()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(renderer, json.loads(line))
        answers.write(json.dumps(reply) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
