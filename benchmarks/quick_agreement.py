"""Agreement of the quick tier (clang) with nvcc on planted mistakes (docs/PERFORMANCE.md).

    python benchmarks/quick_agreement.py [--json out.json] [--only NAME ...]

Each case plants one mistake in a shipped template or one of torch 2.11's Inductor templates
(through the editor's unsaved-text overrides: no file is changed), then runs the quick tier as
the CLI does (preamble built if missing) and nvcc's check. A case counts as
- found by nvcc: nvcc's check reports an error;
- found first by quick: the quick tier reports an error on a template line where nvcc reports
  one (same file, same line), before nvcc's result;
- quick-only: the quick tier reports an error on a line where nvcc reports none (a false
  alarm, shown until nvcc's verdict replaces it).
Controls (the unchanged instances) count quick-only errors too. Prints a Markdown table.
"""

# ruff: noqa: E501  (the corpus is a table: one case a line)
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kls.compile import CompileOptions, compile_instance
from kls.compile.quick import quick_check
from kls.instances import load_instances

ROOT = Path(__file__).resolve().parent.parent / "templates"


@dataclass(frozen=True)
class Case:
    name: str
    instance: str
    file: str  # under templates/
    old: str
    new: str
    kind: str


SM90, SM80, SOFTMAX = "sm90_bf16_8192", "sm80_bf16_4096", "softmax_bf16_8192x4096"
T90, T80 = "torch211_sm90_bf16_8192", "torch211_sm80_bf16_4096"
G3, A3, E3 = "cutlass3x_gemm.cu.jinja", "cutlass3x_args.cuh.jinja", "cutlass3x_epilogue.cuh.jinja"
G2, A2, SM = "cutlass2x_gemm.cu.jinja", "cutlass2x_args.cuh.jinja", "softmax.cu.jinja"
I3, IA3 = "inductor/gemm_cutlass3x.cu.jinja", "inductor/gemm_args_cutlass3x.cuh.jinja"
I2 = "inductor/gemm_cutlass2x.cu.jinja"

CASES = [
    # shipped SM90 (CUTLASS 3.x)
    Case("sm90-return-expr", SM90, G3, "  return 0;\n}", "  return 0 +;\n}", "syntax"),
    Case("sm90-missing-semicolon", SM90, G3, "kernel.size(X, -2)}};", "kernel.size(X, -2)}}", "syntax"),
    Case("sm90-member-can-implement", SM90, G3, "gemm_op.can_implement(", "gemm_op.can_implemnt(", "member"),
    Case("sm90-member-scheduler", SM90, G3, ".max_swizzle_size", ".max_swizle_size", "member"),
    Case("sm90-initialize-arity", SM90, G3, "(arguments, workspace, stream)", "(arguments, workspace, stream, 1, 2)", "types"),
    Case("sm90-undeclared-name", SM90, G3, "get_workspace_size(arguments)", "get_workspace_size(argments)", "types"),
    Case("sm90-template-args-on-non-template", SM90, G3, "cutlass::gemm::GemmCoord::Index", "cutlass::gemm::GemmCoord<int>::Index", "template args"),
    Case("sm90-pointer-type", SM90, A3, "{{template.cutlass_type_cast(X, kernel.ptr(X))}},  // ptr_A", "(float*)({{kernel.ptr(X)}}),  // ptr_A", "types"),
    Case("sm90-cute-int-type", SM90, A3, '{{template.cute_int(kernel.stride(X, -1), "stride_x1")}}', "cute::Int<float>{}", "template args"),
    Case("sm90-member-on-pointer", SM90, E3, "{{template.cutlass_type_cast(Y, kernel.ptr(Y))}},  // ElementD", "{{template.cutlass_type_cast(Y, kernel.ptr(Y))}}->data,  // ElementD", "member"),
    Case("sm90-op-k-tile", SM90, G3, "{{instance_definition}}", '{{instance_definition | replace("cute::_256, cute::_64>", "cute::_256, cute::_60>")}}', "template args (op)"),
    Case("sm90-op-cluster", SM90, G3, "{{instance_definition}}", '{{instance_definition | replace("cute::Shape<cute::_2, cute::_1, cute::_1>", "cute::Shape<cute::_2, cute::_3, cute::_1>")}}', "template args (op)"),
    # shipped SM80 (CUTLASS 2.x)
    Case("sm80-extra-brace", SM80, G2, "kernel.size(X, -1)}};", "kernel.size(X, -1)}}};", "syntax"),
    Case("sm80-member-workspace", SM80, G2, "gemm_op.get_workspace_size(", "gemm_op.workspace_size(", "member"),
    Case("sm80-pointer-for-stride", SM80, A2, "    batch_stride_a, batch_stride_b,", "    &batch_stride_a, batch_stride_b,", "types"),
    Case("sm80-undeclared-stride", SM80, A2, "lda, ldb, ldc, ldd,", "lda, ldb, ldc, lddd,", "types"),
    Case("sm80-too-few-template-args", SM80, G2, "using ElementComputeEpilogue = {{instance_type}}::ElementAccumulator;", "using ElementComputeEpilogue = cutlass::NumericConverter<{{instance_type}}::ElementAccumulator>;", "template args"),
    Case("sm80-call-type", SM80, G2, "gemm_op(stream);", 'gemm_op("stream");', "types"),
    # shipped plain CUDA (device code)
    Case("softmax-device-syntax", SOFTMAX, SM, "value + other;\n  }\n  const int lane", "value + ;\n  }\n  const int lane", "device syntax"),
    Case("softmax-device-undeclared", SOFTMAX, SM, "__shared__ float scratch[32];", "__shared__ float scratch[32]; float bad = undefined_thing;", "device types"),
    Case("softmax-device-overload", SOFTMAX, SM, "fmaxf(row_max, static_cast<float>(row_in[c]))", "fmaxf(row_max, row_in)", "device types"),
    Case("softmax-device-template-arg", SOFTMAX, SM, "_block_reduce<BLOCK>(row_max, scratch, true)", "_block_reduce<float>(row_max, scratch, true)", "device template args"),
    Case("softmax-device-intrinsic", SOFTMAX, SM, "  __syncthreads();\n  value = threadIdx.x", "  __syncthreadz();\n  value = threadIdx.x", "device types"),
    Case("softmax-host-call-in-device", SOFTMAX, SM, "  value = scratch[0];", "  value = scratch[0]; std::cout << value;", "device wrong-side call"),
    Case("softmax-host-class-in-kernel", SOFTMAX, SM, "  const float scale = 1.0f / row_sum;", "  const float scale = 1.0f / row_sum; std::vector<float> v(4);", "device wrong-side call"),
    # torch 2.11's Inductor templates
    Case("t90-missing-semicolon", T90, I3, "query_device_multiprocessor_count(0);", "query_device_multiprocessor_count(0)", "syntax"),
    Case("t90-member-hw-info", T90, I3, "if (hw_info.sm_count == 0)", "if (hw_info.sm_counts == 0)", "member"),
    Case("t90-pointer-to-int", T90, IA3, "max_swizzle_size = swizzle;", "max_swizzle_size = &swizzle;", "types"),
    Case("t90-template-args-on-alias", T90, IA3, "static_cast<coord_t>(K)", "static_cast<coord_t<int>>(K)", "template args"),
    Case("t90-undeclared", T90, I3, "get_workspace_size(arguments)", "get_workspace_size(arguments, hw)", "types"),
    Case("t80-double-assign", T80, I2, "int B = {{", "int B = = {{", "syntax"),
    Case("t80-member-init", T80, I2, "gemm_op.initialize(", "gemm_op.init(", "member"),
    Case("t80-init-type", T80, I2, "static cutlass::KernelHardwareInfo hw_info;", "static cutlass::KernelHardwareInfo hw_info = 3.5;", "types"),
    Case("t80-template-args-on-non-template", T80, I2, "GemmCoord::Index;", "GemmCoord::Index<int>;", "template args"),
]  # fmt: skip
CONTROLS = [SM90, SM80, SOFTMAX, T90, T80]


def run_case(case: Case | None, instance_name: str) -> dict[str, object]:
    instances = load_instances(ROOT / "kls.toml").instances
    spec = instances[instance_name]
    overrides = None
    if case is not None:
        path = (ROOT / case.file).resolve()
        text = path.read_text(encoding="utf-8")
        if case.old not in text:
            raise SystemExit(f"{case.name}: {case.old!r} is not in {case.file}")
        overrides = {path: text.replace(case.old, case.new, 1)}
    options = CompileOptions(mode="check")
    started = time.monotonic()
    quick = quick_check(spec, options, overrides)
    quick_s = time.monotonic() - started
    started = time.monotonic()
    nvcc = compile_instance(spec, options, overrides)
    nvcc_s = time.monotonic() - started

    def lines(findings: list) -> set[tuple[str, int]]:  # type: ignore[type-arg]
        return {(f.path, f.range.start.line) for f in findings if f.severity.label == "error"}

    q, n = lines(quick.findings), lines(nvcc.findings)
    return {
        "case": case.name if case else f"control:{instance_name}",
        "instance": instance_name,
        "kind": case.kind if case else "control",
        "nvcc_error": bool(n),
        "quick_error": bool(q),
        "quick_first": bool(q & n),
        "quick_only": sorted(f"{Path(p).name}:{ln + 1}" for p, ln in q - n),
        "notice": quick.notice,
        "quick_s": round(quick_s, 2),
        "nvcc_s": round(nvcc_s, 2),
        "quick_messages": [f.message[:160] for f in quick.findings][:2],
        "nvcc_messages": [f.message[:160] for f in nvcc.findings][:2],
        "nvcc_lines": sorted(f"{Path(p).name}:{ln + 1}" for p, ln in n),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    rows = []
    todo: list[tuple[Case | None, str]] = [(c, c.instance) for c in CASES]
    todo += [(None, name) for name in CONTROLS]
    for case, name in todo:
        label = case.name if case else f"control:{name}"
        if args.only and label not in args.only:
            continue
        row = run_case(case, name)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    mistakes = [r for r in rows if r["kind"] != "control"]
    print("| | cases | nvcc finds | quick finds first | quick-only (false alarms) |")
    print("|---|---|---|---|---|")
    controls = [r for r in rows if r["kind"] == "control"]
    for title, group in (("planted mistakes", mistakes), ("controls (unchanged)", controls)):
        print(
            f"| {title} | {len(group)} | {sum(bool(r['nvcc_error']) for r in group)} | "
            f"{sum(bool(r['quick_first']) for r in group)} | "
            f"{sum(bool(r['quick_only']) for r in group)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
