"""Differential proof: kls's torch-2.11 profile against torch 2.11's own Inductor.

For each case (an mm/addmm/bmm, dtype, W layout and one CUTLASS op), Inductor renders the GEMM
with its own classes and kls renders the same upstream templates (read in place from
gemm_template.py in the torch source kls locates: KLS_TORCH_SOURCE, or the installed torch) for
the same op and tensors. The texts are compared after replacing only the kernel name; then both
are built and called through Inductor's calling convention on the same inputs, and the outputs
compared. What is kept for the CPU regression test (tests/data/inductor211_renders.json) is
digests, not text: per case the sha256 of Inductor's render, its length and a hash per line
(`digest`), so a failing test names the first differing line.

Steps (GPU steps run on the device machine, the others here):
  inductor (GPU)  PYTHONPATH=server python3 benchmarks/conformance.py inductor --out $OUT
                  torch.compile(mode max-autotune, backend CUTLASS) of each case with the op
                  allow-listed by name; CUTLASSTemplate.generate_code_and_args is wrapped to
                  keep the rendered source and the extra args Inductor passes at each call
                  (sizes, offsets, swizzle). No CUTLASS choice is compiled or timed there
                  (precompile/benchmark are stubbed; ATen wins the autotune).
  kls             .venv/bin/python benchmarks/conformance.py kls --inductor FILE --dir DIR
                  renders every case with kls, compares, writes DIR/compare.json + sources.
  build           .venv/bin/python benchmarks/conformance.py build --dir DIR
                  builds Inductor's source with Inductor's nvcc flags and kls's source with
                  `kls compile --mode build`'s pipeline (nvcc here; the .so runs on the H200).
  run (GPU)       python3 benchmarks/conformance.py run --dir DIR --out $OUT
                  both libraries, same inputs, Inductor's calling convention; outputs compared
                  with each other (bitwise) and with torch (tolerance).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # mm | addmm | bmm
    dtype: str  # bfloat16 | float16
    m: int
    n: int
    k: int
    batch: int  # bmm only
    w_layout: str  # col (a transposed weight, w.t()) | row (contiguous)
    op: str  # cutlass_library generator name (a 'tn' op)
    swizzle: int
    arch: str = "90a"
    # addmm: torch 2.11 passes (X, W, Bias) with no input_reorder; reorder=True makes the
    # harness hand Inductor's template (Bias, X, W)-order semantics: input_reorder=[2, 0, 1].
    reorder: bool = False

    @property
    def is_3x(self) -> bool:
        return self.op.startswith("cutlass3x_")


_COOP = "cutlass3x_sm90_tensorop_gemm_{t}_{t}_f32_{t}_{t}_{tile}_{cl}_0_tnn_align8_{sched}"
CASES = [
    Case(
        "mm_bf16_coop",
        "mm",
        "bfloat16",
        1024,
        2048,
        512,
        1,
        "col",
        _COOP.format(t="bf16", tile="128x256x64", cl="2x1x1", sched="warpspecialized_cooperative")
        + "_epi_tma",
        8,
    ),
    Case(
        "addmm_bf16_coop_bias",
        "addmm",
        "bfloat16",
        1024,
        2048,
        512,
        1,
        "col",
        _COOP.format(t="bf16", tile="128x256x64", cl="2x1x1", sched="warpspecialized_cooperative")
        + "_epi_tma",
        8,
    ),
    Case(
        "mm_fp16_pingpong_rowW",
        "mm",
        "float16",
        1024,
        2048,
        512,
        1,
        "row",
        _COOP.format(t="f16", tile="128x128x64", cl="1x2x1", sched="warpspecialized_pingpong")
        + "_epi_tma",
        4,
    ),
    Case(
        "mm_bf16_streamk",
        "mm",
        "bfloat16",
        1024,
        2048,
        512,
        1,
        "col",
        _COOP.format(
            t="bf16", tile="128x128x64", cl="2x1x1", sched="stream_k_warpspecialized_cooperative"
        )
        + "_epi_tma",
        1,
    ),
    Case(
        "bmm_bf16_coop",
        "bmm",
        "bfloat16",
        512,
        1024,
        256,
        4,
        "col",
        _COOP.format(t="bf16", tile="128x128x64", cl="2x1x1", sched="warpspecialized_cooperative")
        + "_epi_tma",
        2,
    ),
    Case(
        "addmm_fp16_coop_rowW_bias",
        "addmm",
        "float16",
        1024,
        2048,
        512,
        1,
        "row",
        _COOP.format(t="f16", tile="128x256x64", cl="2x1x1", sched="warpspecialized_cooperative")
        + "_epi_tma",
        2,
    ),
    Case(
        "addmm_bf16_coop_bias_reorder",
        "addmm",
        "bfloat16",
        1024,
        2048,
        512,
        1,
        "col",
        _COOP.format(t="bf16", tile="128x128x64", cl="1x2x1", sched="warpspecialized_cooperative")
        + "_epi_tma",
        4,
        reorder=True,
    ),
    Case(
        "mm_bf16_sm80_2x",
        "mm",
        "bfloat16",
        1024,
        2048,
        512,
        1,
        "col",
        "cutlass_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align8",
        1,
        "80",
    ),
    Case(
        "mm_fp16_sm80_2x_rowW",
        "mm",
        "float16",
        1024,
        2048,
        512,
        1,
        "row",
        "cutlass_tensorop_f16_s16816gemm_f16_128x256_64x3_tn_align8",
        1,
        "80",
    ),
]


def tensor_layouts(case: Case) -> dict[str, dict[str, Any] | None]:
    """Shape, strides (elements) and offset of X, W, Bias, Y as Inductor sees them."""
    b, m, n, k = case.batch, case.m, case.n, case.k
    if case.kind == "bmm":
        w_stride = [n * k, 1, k] if case.w_layout == "col" else [k * n, n, 1]
        return {
            "X": {"shape": [b, m, k], "stride": [m * k, k, 1]},
            "W": {"shape": [b, k, n], "stride": w_stride},
            "Bias": None,
            "Y": {"shape": [b, m, n], "stride": [m * n, n, 1]},
        }
    w = [1, k] if case.w_layout == "col" else [n, 1]
    bias = {"shape": [m, n], "stride": [0, 1]} if case.kind == "addmm" else None
    return {
        "X": {"shape": [m, k], "stride": [k, 1]},
        "W": {"shape": [k, n], "stride": w},
        "Bias": bias,
        "Y": {"shape": [m, n], "stride": [n, 1]},
    }


# str(torch._inductor.utils.Placeholder.KERNEL_NAME): the name Inductor renders with before it
# substitutes cutlass_<hash>.
PLACEHOLDER = "Placeholder.KERNEL_NAME"


def normalize(text: str, kernel_name: str) -> str:
    return text.replace(kernel_name, "KERNEL")


# ---------------------------------------------------------------------------------------------
# inductor (GPU machine)
# ---------------------------------------------------------------------------------------------
def _cutlass_dir() -> str:
    """A CUTLASS 'checkout' made of links into the installed nvidia-cutlass (what Inductor's
    try_import_cutlass and its nvcc command look for)."""
    import cutlass_cppgen
    import cutlass_library
    import pycute

    src = Path(cutlass_library.source_path)
    root = Path("/tmp/cutlass_checkout")
    (root / "python").mkdir(parents=True, exist_ok=True)
    for sub in ("include", "tools", "examples"):
        if (src / sub).exists() and not (root / sub).exists():
            (root / sub).symlink_to(src / sub)
    for mod in (cutlass_library, cutlass_cppgen, pycute):
        link = root / "python" / mod.__name__
        if not link.exists():
            link.symlink_to(Path(mod.__file__).parent)
    return str(root)


def filtered_name(case: Case) -> str:
    """The op's configuration name after Inductor's filter_op (what its allowlist matches)."""
    from kls.cutlass.ops import family_of, generated
    from kls.profiles.torch211.ops import TensorLayout, emit_torch211

    lay = tensor_layouts(case)

    def tl(name: str) -> TensorLayout | None:
        t = lay[name]
        if t is None:
            return None
        return TensorLayout(case.dtype, tuple(t["shape"]), tuple(t["stride"]))

    op = generated(family_of(case.op))[case.op]
    x, w, y = tl("X"), tl("W"), tl("Y")
    assert x is not None and w is not None and y is not None
    return emit_torch211(op, x, w, tl("Bias"), y, int(case.arch[:2])).filtered_name


def _with_input_reorder(template_class: Any, reorder: list[int]) -> Any:
    """The 3.x template class whose add_cutlass_gemm_choices passes `input_reorder` (the
    parameter CUTLASSGemmTemplate takes; torch 2.11's addmm lowering no longer passes it)."""

    class Reordered:
        @staticmethod
        def add_cutlass_gemm_choices(choices: Any, layout: Any, nodes: Any, **kw: Any) -> None:
            kw["input_reorder"] = reorder
            template_class.add_cutlass_gemm_choices(choices, layout, nodes, **kw)

    return Reordered


def run_inductor(out: Path, only: list[str]) -> None:
    import torch
    import torch._inductor.config as cfg  # type: ignore[import-not-found]

    # mm first: importing gemm_template first runs into a circular import in torch 2.11
    from torch._inductor.kernel import mm as mm_lowering  # type: ignore[import-not-found]
    from torch._inductor.codegen.cutlass import (  # type: ignore[import-not-found]  # isort: skip
        gemm_template as cg,
    )
    from torch._inductor.codegen.cutlass import kernel as ck  # type: ignore[import-not-found]
    from torch._inductor.codegen.cutlass import template as ct  # type: ignore[import-not-found]

    cutlass_dir = _cutlass_dir()
    current: dict[str, Any] = {}
    captured: dict[str, list[dict[str, Any]]] = {}
    original = ct.CUTLASSTemplate.generate_code_and_args

    def node_info(node: Any) -> dict[str, Any]:
        return {
            "name": node.get_name(),
            "shape": [int(s) for s in node.get_size()],
            "stride": [int(s) for s in node.get_stride()],
            "offset": int(node.get_layout().offset),
            "dtype": str(node.get_dtype()),
        }

    def hook(self: Any, name: str, input_key: str, layout_repr: str, **kwargs: Any) -> Any:
        code, extra = original(
            self, name=name, input_key=input_key, layout_repr=layout_repr, **kwargs
        )
        reorder = self.input_reorder or list(range(len(self.input_nodes)))
        order = []
        for i in reorder:
            n = self.input_nodes[i].get_name()
            if n not in order:
                order.append(n)
        captured.setdefault(current["case"], []).append(
            {
                "template": type(self).__name__,
                "op_conf_name": kwargs["op"].configuration_name(),
                "swizzle": kwargs.get("swizzle"),
                "code": code,
                "extra_args": [int(a) for a in extra],
                "inputs": [node_info(n) for n in self.input_nodes],
                "output": node_info(self.output_node),
                "input_reorder": self.input_reorder,
                "pointer_order": order,
            }
        )
        return code, extra

    ct.CUTLASSTemplate.generate_code_and_args = hook
    ck.CUTLASSTemplateCaller.precompile = lambda self: None
    ck.CUTLASSTemplateCaller.benchmark = lambda self, *a, out: float("inf")
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "cases": {},
    }
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16}
    for case in CASES:
        if only and case.name not in only:
            continue
        current["case"] = case.name
        torch._dynamo.reset()
        cg.CUTLASSGemmTemplate.filtered_ops_cache.clear()
        ct.CUTLASSTemplate.code_cache.clear()
        lay = tensor_layouts(case)
        dtype = dt[case.dtype]

        def make(name: str, lay: dict[str, Any] = lay, dtype: Any = dtype) -> Any:
            t = lay[name]
            assert t is not None
            size = sum((s - 1) * st for s, st in zip(t["shape"], t["stride"])) + 1
            base = torch.randn(size, device="cuda", dtype=dtype)
            return torch.as_strided(base, t["shape"], t["stride"])

        x, w = make("X"), make("W")
        regex = "^" + re.escape(filtered_name(case)) + "$"
        patches = {
            "max_autotune": True,
            "max_autotune_gemm_backends": "ATEN,CUTLASS",
            "force_disable_caches": True,
            "cutlass.cutlass_dir": cutlass_dir,
            "cutlass.cutlass_op_allowlist_regex": regex,
            "cutlass.cutlass_max_profiling_swizzle_options": [case.swizzle],
        }
        saved = mm_lowering.CUTLASS3xGemmTemplate
        if not case.is_3x:
            patches["cuda.arch"] = case.arch
            mm_lowering.CUTLASS3xGemmTemplate = cg.CUTLASS2xGemmTemplate
        if case.reorder:
            mm_lowering.CUTLASS3xGemmTemplate = _with_input_reorder(saved, [2, 0, 1])
        started = time.perf_counter()
        error = None
        try:
            with cfg.patch(patches):
                if case.kind == "mm":
                    torch.compile(lambda a, b: a @ b)(x, w)
                elif case.kind == "bmm":
                    torch.compile(torch.bmm)(x, w)
                else:
                    bias = torch.randn(case.n, device="cuda", dtype=dtype)
                    torch.compile(lambda c, a, b: torch.addmm(c, a, b))(bias, x, w)
        except Exception as exc:  # report and go on with the other cases
            error = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            mm_lowering.CUTLASS3xGemmTemplate = saved
        got = captured.get(case.name, [])
        results["cases"][case.name] = {
            "case": asdict(case),
            "allowlist": regex,
            "seconds": round(time.perf_counter() - started, 1),
            "error": error,
            "renders": got[:1],
            "render_count": len(got),
        }
        print(f"{case.name}: {len(got)} render(s), error={error}", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "inductor.json").write_text(json.dumps(results, indent=1))


# ---------------------------------------------------------------------------------------------
# kls (here)
# ---------------------------------------------------------------------------------------------
UPSTREAM = "torch:_inductor/codegen/cutlass/gemm_template.py::"


def digest(text: str) -> dict[str, Any]:
    """What the regression test keeps of a render: its sha256, length and a hash per line."""
    return {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "length": len(text),
        "lines": [hashlib.sha256(line.encode()).hexdigest()[:12] for line in text.split("\n")],
    }


def first_difference_from_digest(record: dict[str, Any], text: str) -> str:
    """'' when `text` has the recorded digest, else the first line whose hash differs."""
    if hashlib.sha256(text.encode()).hexdigest() == record["sha256"]:
        return ""
    lines = text.split("\n")
    for i, (want, line) in enumerate(zip(record["lines"], lines)):
        if hashlib.sha256(line.encode()).hexdigest()[:12] != want:
            return f"line {i + 1} differs from Inductor's; kls renders {line.strip()[:100]!r}"
    return f"lengths differ: Inductor {len(record['lines'])} lines, kls {len(lines)}"


def write_digests(inductor_json: Path, out: Path) -> None:
    """tests/data/inductor211_renders.json: per case the digest of Inductor's first render
    (kernel name normalised) and the figures the test compares; no upstream text."""
    data = json.loads(inductor_json.read_text())
    cases = {}
    for name, entry in sorted(data["cases"].items()):
        if not entry.get("renders"):
            continue
        first = entry["renders"][0]
        cases[name] = {
            "render": digest(normalize(first["code"], PLACEHOLDER)),
            "extra_args": first["extra_args"],
            "op_conf_name": first["op_conf_name"],
        }
    record = {"source": data.get("source", str(inductor_json)), "cases": cases}
    out.write_text(json.dumps(record, indent=1) + "\n")


def write_config(folder: Path) -> Path:
    """A kls.toml with one torch-2.11 instance per case over the upstream templates, read in
    place from the located torch source."""
    lines = ['[defaults]\nprofile = "torch-2.11"\nreference = "gemm"\n']
    for case in CASES:
        lay = tensor_layouts(case)
        sub = (
            f'argument_template = "{UPSTREAM}GEMM_ARGS_CUTLASS_3X"\n'
            f'epilogue_template = "{UPSTREAM}GEMM_ARGS_CUTLASS_3X_EPILOGUE"\n'
            if case.is_3x
            else f'argument_template = "{UPSTREAM}GEMM_ARGS_CUTLASS_2X"\n'
        )
        main = "GEMM_TEMPLATE_CUTLASS_3X" if case.is_3x else "GEMM_TEMPLATE_CUTLASS_2X"
        lines.append(f"[instances.{case.name}]\n")
        lines.append(f'template = "{UPSTREAM}{main}"\n{sub}arch = "{case.arch}"\n')
        lines.append(f'op = "{case.op}"\nvars = {{ swizzle = {case.swizzle} }}\n')
        if case.kind == "addmm":
            lines.append("beta = 1\n")
            if case.reorder:
                lines.append("input_reorder = [2, 0, 1]\n")
        for name, t in lay.items():
            if t is None:
                lines.append(f'tensors.{name} = "none"\n')
            else:
                lines.append(
                    f'tensors.{name} = {{ shape = {t["shape"]}, dtype = "{case.dtype}", '
                    f"stride = {t['stride']} }}\n"
                )
        lines.append("\n")
    config = folder / "kls.toml"
    config.write_text("".join(lines))
    return config


def first_difference(a: str, b: str) -> str:
    la, lb = a.split("\n"), b.split("\n")
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: inductor {x.strip()[:80]!r} / kls {y.strip()[:80]!r}"
    if len(la) != len(lb):
        return f"line {min(len(la), len(lb)) + 1}: lengths {len(la)} vs {len(lb)} lines"
    return ""


def run_kls(inductor_json: Path, folder: Path) -> None:
    from kls.instances import load_instances
    from kls.profiles.torch211.runtime import Torch211Kernel
    from kls.render import render

    data = json.loads(inductor_json.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(folder)
    loaded = load_instances(config)
    assert not [f for f in loaded.findings if f.severity.name == "ERROR"], loaded.findings
    src = folder / "src"
    src.mkdir(exist_ok=True)
    rows = []
    for case in CASES:
        entry = data["cases"].get(case.name)
        spec = loaded.instances[case.name]
        result = render(spec)
        row: dict[str, Any] = {"case": case.name, "op": case.op, "kind": case.kind}
        if result.text is None:
            row["kls_error"] = [f.message for f in result.findings]
        kernel = result.kernel
        kls_extra = kernel.extra_args() if isinstance(kernel, Torch211Kernel) else []
        row["kls_extra_args"] = [v for _, v in kls_extra]
        row["kls_params"] = [p.buffer for p in result.params]
        if not entry or not entry["renders"]:
            row["inductor_error"] = entry["error"] if entry else "not run"
            rows.append(row)
            continue
        ind = entry["renders"][0]
        ind_text = normalize(ind["code"], PLACEHOLDER)
        kls_text = normalize(result.text or "", spec.kernel_name)
        (src / f"{case.name}.inductor.cu").write_text(ind["code"].replace(PLACEHOLDER, "entry"))
        (src / f"{case.name}.kls.cu").write_text(
            (result.text or "").replace(spec.kernel_name, "entry")
        )
        row["inductor_op_conf_name"] = ind["op_conf_name"]
        row["identical"] = ind_text == kls_text
        row["first_difference"] = first_difference(ind_text, kls_text)
        row["inductor_extra_args"] = ind["extra_args"]
        row["extra_args_equal"] = ind["extra_args"] == row["kls_extra_args"]
        row["layouts_equal"] = all(
            (t["shape"], t["stride"]) == (list(s.shape), list(s.stride))
            for t, s in zip(
                ind["inputs"],
                [spec.tensors[n] for n in ("X", "W", "Bias") if spec.tensors.get(n)],
            )
            if s is not None
        )
        rows.append(row)
        print(
            f"{case.name:28s} identical={row['identical']} extra_args_equal="
            f"{row['extra_args_equal']} {row['first_difference']}"
        )
    (folder / "compare.json").write_text(json.dumps({"inductor": data, "rows": rows}, indent=1))


# ---------------------------------------------------------------------------------------------
# build (here)
# ---------------------------------------------------------------------------------------------
def inductor_nvcc(src: Path, out: Path, arch: str, include: Path, nvcc: str) -> list[str]:
    """torch 2.11's cuda_compile_command for a .so (its -L/-lcuda/-lcudart linker flags
    aside: cudart is linked statically, as kls's build does)."""
    a = "90a" if arch.startswith("90") else arch
    return [
        nvcc,
        "-t=0",
        "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
        "-DCUTLASS_ENABLE_SM90_EXTENDED_MMA_SHAPES=1",
        "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
        "-w",
        f"-gencode=arch=compute_{a},code=[sm_{a},compute_{a}]",
        "-O1",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-DNDEBUG",
        "-Xcompiler=-fPIC",
        "-Xcompiler=-fno-strict-aliasing",
        "-Xcompiler=-fvisibility=hidden",
        "-Xcompiler=-Wconversion",
        f"-I{include / 'include'}",
        f"-I{include / 'tools/library/include'}",
        f"-I{include / 'tools/library/src'}",
        f"-I{include / 'tools/util/include'}",
        "-shared",
        "-o",
        str(out),
        str(src),
    ]


def run_build(folder: Path, parallel: int, nvcc: str) -> None:
    import cutlass_library

    from kls.compile import CompileOptions, compile_instance
    from kls.instances import load_instances

    include = Path(cutlass_library.source_path)
    libs = folder / "lib"
    libs.mkdir(exist_ok=True)
    loaded = load_instances(folder / "kls.toml")
    compare = json.loads((folder / "compare.json").read_text())
    todo = [r["case"] for r in compare["rows"] if "inductor_extra_args" in r]

    def build(name: str) -> dict[str, Any]:
        case = next(c for c in CASES if c.name == name)
        t0 = time.perf_counter()
        out = libs / f"{name}.inductor.so"
        proc = subprocess.run(
            inductor_nvcc(folder / "src" / f"{name}.inductor.cu", out, case.arch, include, nvcc),
            capture_output=True,
            text=True,
        )
        ind_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        built = compile_instance(loaded.instances[name], CompileOptions(mode="build", nvcc=nvcc))
        if built.ok and built.artifact is not None:
            shutil.copyfile(built.artifact, libs / f"{name}.kls.so")
        print(
            f"{name}: inductor rc={proc.returncode} ({ind_s:.0f} s), kls ok={built.ok} "
            f"({time.perf_counter() - t1:.0f} s)",
            flush=True,
        )
        return {
            "case": name,
            "inductor_rc": proc.returncode,
            "inductor_log": proc.stderr[-2000:],
            "kls_ok": built.ok,
            "kls_symbol": loaded.instances[name].kernel_name,
        }

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        builds = list(pool.map(build, todo))
    (folder / "builds.json").write_text(json.dumps(builds, indent=1))


# ---------------------------------------------------------------------------------------------
# run (GPU machine)
# ---------------------------------------------------------------------------------------------
def call_library(lib: Path, symbol: str, pointers: list[int], extra: list[tuple[str, int]]) -> Any:
    """Inductor's calling convention (CUTLASSTemplateKernel.call_kernel / make_run_fn):
    pointers, then sizes/offsets/runtime args, then workspace_size*, workspace*, stream; the
    workspace size is queried first with null data pointers."""
    import torch

    fn = getattr(ctypes.CDLL(str(lib)), symbol)
    fn.restype = ctypes.c_int
    ctype = {"const int": ctypes.c_int, "const uint8_t": ctypes.c_uint8}
    fn.argtypes = (
        [ctypes.c_void_p] * len(pointers)
        + [ctype[t] for t, _ in extra]
        + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    )
    values = [v for _, v in extra]
    stream = torch.cuda.current_stream().cuda_stream
    size = ctypes.c_size_t(0)
    rc = fn(*([None] * len(pointers)), *values, ctypes.addressof(size), None, stream)
    if rc != 0:
        return f"workspace query returned {rc}"
    workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")
    rc = fn(*pointers, *values, None, workspace.data_ptr(), stream)
    torch.cuda.synchronize()
    return None if rc == 0 else f"run returned {rc}"


def run_outputs(folder: Path, out: Path) -> None:
    import torch

    compare = json.loads((folder / "compare.json").read_text())
    builds = {b["case"]: b for b in json.loads((folder / "builds.json").read_text())}
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16}
    rows = []
    for row in compare["rows"]:
        name = row["case"]
        case = next(c for c in CASES if c.name == name)
        if name not in builds:
            continue
        ind = compare["inductor"]["cases"][name]["renders"][0]
        lay = tensor_layouts(case)
        gen = torch.Generator(device="cuda").manual_seed(0)
        dtype = dt[case.dtype]
        tensors: dict[str, Any] = {}
        for key in ("X", "W"):
            t = lay[key]
            assert t is not None
            size = sum((s - 1) * st for s, st in zip(t["shape"], t["stride"])) + 1
            base = torch.empty(size, device="cuda", dtype=dtype).uniform_(-1, 1, generator=gen)
            tensors[key] = torch.as_strided(base, t["shape"], t["stride"])
        bias_vec = None
        if lay["Bias"] is not None:
            bias_vec = torch.empty(case.n, device="cuda", dtype=dtype).uniform_(
                -1, 1, generator=gen
            )
            tensors["Bias"] = bias_vec.expand(case.m, case.n)
        ref = (tensors["X"].float() @ tensors["W"].float()).to(dtype)
        if bias_vec is not None:
            ref = (tensors["X"].float() @ tensors["W"].float() + bias_vec.float()).to(dtype)
        y_shape = lay["Y"]["shape"] if lay["Y"] else []
        outputs = {}
        errors = {}
        for who in ("inductor", "kls"):
            y = torch.full(y_shape, float("nan"), device="cuda", dtype=dtype)
            tensors["Y"] = y
            if who == "inductor":
                # pointer order: Inductor's call args (unique inputs in input_reorder order)
                by_name = {n["name"]: key for n, key in zip(ind["inputs"], ("X", "W", "Bias"))}
                names = [by_name[n] for n in ind["pointer_order"]] + ["Y"]
                extra = [("const int", v) for v in ind["extra_args"][:-1]]
                extra.append(("const uint8_t", ind["extra_args"][-1]))
                symbol = "entry"
            else:
                names = row["kls_params"]
                extra = [("const int", v) for v in row["kls_extra_args"][:-1]]
                extra.append(("const uint8_t", row["kls_extra_args"][-1]))
                symbol = builds[name]["kls_symbol"]
            lib = folder / "lib" / f"{name}.{who}.so"
            if not lib.exists():
                errors[who] = "not built"
                continue
            pointers = [tensors[n].data_ptr() for n in names]
            errors[who] = call_library(lib, symbol, pointers, extra)
            outputs[who] = y.clone()
        result: dict[str, Any] = {"case": name, "errors": errors}
        if "inductor" in outputs and "kls" in outputs:
            a, b = outputs["inductor"], outputs["kls"]
            result["bitwise_equal"] = bool(torch.equal(a, b))
            result["max_abs_diff"] = float((a.float() - b.float()).abs().max())
            for who in ("inductor", "kls"):
                err = (outputs[who].float() - ref.float()).abs().max()
                result[f"{who}_max_err_vs_torch"] = float(err)
                result[f"{who}_nan"] = int(torch.isnan(outputs[who]).sum())
        rows.append(result)
        print(json.dumps(result), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(
        json.dumps({"device": torch.cuda.get_device_name(0), "rows": rows}, indent=1)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("inductor")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    p.add_argument("--only", nargs="*", default=[])
    p = sub.add_parser("kls")
    p.add_argument("--inductor", type=Path, required=True)
    p.add_argument("--dir", type=Path, required=True)
    p = sub.add_parser("digests", help="the regression test's record of an inductor run")
    p.add_argument("--inductor", type=Path, required=True)
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "inductor211_renders.json")
    p = sub.add_parser("build")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--nvcc", default="nvcc")
    p = sub.add_parser("run")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "server"))
    if args.step == "inductor":
        run_inductor(args.out, args.only)
    elif args.step == "kls":
        run_kls(args.inductor, args.dir)
    elif args.step == "digests":
        write_digests(args.inductor, args.out)
    elif args.step == "build":
        run_build(args.dir, args.parallel, args.nvcc)
    else:
        run_outputs(args.dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
