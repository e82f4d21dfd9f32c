"""Issue 11: a new user's first template of their own (an elementwise add, buffers A, B, C),
from nothing to a verified kernel: each wall the issue names, as a test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kls.cli import main
from tests.conftest import Workspace, codes, find_span, only, span

ADD_TENSORS = """\
tensors.A = { shape = [1024, 512], dtype = "fp32" }
tensors.B = { shape = [1024, 512], dtype = "fp32" }
tensors.C = { shape = [1024, 512], dtype = "fp32" }
"""

# The 2023 API (default profile): def_kernel prints PT_EXPORT itself.
ADD = """\
{{template.header().getvalue()}}
{{template.globals().getvalue()}}
__global__ void add_kernel(const float* a, const float* b, float* c, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" {
{{kernel.def_kernel(inputs=[A, B], outputs=[C], names_str="A, B, C")}} {
  if (workspace_size) { *workspace_size = 0; return 0; }
  const int64_t n = {{kernel.size(C, 0, -1)}};
  add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(
      {{kernel.ptr(A)}}, {{kernel.ptr(B)}}, {{kernel.ptr(C)}}, n);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
}
"""
TORCH211 = 'profile = "torch-2.11"'


def variant(old: str, new: str, text: str = ADD) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("extra", ["", TORCH211])
def test_add_template_is_clean(ws: Workspace, extra: str) -> None:
    text = ADD if not extra else variant("{{kernel.def_kernel", "PT_EXPORT {{kernel.def_kernel")
    result = ws.check(text, extra, ADD_TENSORS)
    assert result.findings == [], [f.format_line() for f in result.findings]


# -- 1: a doubled PT_EXPORT ----------------------------------------------------------------------
def test_doubled_pt_export_warns_at_its_line(ws: Workspace) -> None:
    text = variant("{{kernel.def_kernel", "PT_EXPORT {{kernel.def_kernel")
    f = only(ws.check(text, "", ADD_TENSORS).findings, "KT405")
    assert f.range.start.line == 7 and "def_kernel's signature already starts" in f.message


def test_torch211_entry_without_pt_export_says_to_write_it(ws: Workspace) -> None:
    f = only(ws.check(ADD, TORCH211, ADD_TENSORS).findings, "KT401")
    assert f.range.start.line == 7
    assert "PT_EXPORT {{kernel.def_kernel(...)}}" in f.message


# -- 2: forgetting template.globals() ------------------------------------------------------------
@pytest.mark.parametrize("extra", ["", TORCH211])
def test_missing_globals_is_named_before_nvcc(ws: Workspace, extra: str) -> None:
    text = variant("{{template.globals().getvalue()}}\n", "")
    if extra:
        text = variant("{{kernel.def_kernel", "PT_EXPORT {{kernel.def_kernel", text)
    f = only(ws.check(text, extra, ADD_TENSORS).findings, "KT404")
    assert f.range.start.line == 6  # the def_kernel line, where PT_EXPORT is printed
    assert "{{template.globals().getvalue()}}" in f.message
    assert "no storage class or type specifier" in f.message


# -- 3: KT208 only for names the signature or the rendered code declares --------------------------
@pytest.mark.parametrize("extra", ["", TORCH211])
def test_buffer_named_b_is_not_reserved_in_a_plain_kernel(ws: Workspace, extra: str) -> None:
    text = ADD if not extra else variant("{{kernel.def_kernel", "PT_EXPORT {{kernel.def_kernel")
    assert "KT208" not in codes(ws.check(text, extra, ADD_TENSORS).findings)


def test_kt208_when_the_rendered_body_declares_the_name(ws: Workspace) -> None:
    text = variant("  const int64_t n =", "  int B = 0;\n  const int64_t n =")
    f = only(ws.check(text, "", ADD_TENSORS).findings, "KT208")
    assert span(f)[0] == 9 and "declares 'B' again" in f.message


def test_kt208_still_for_the_signatures_own_names(ws: Workspace) -> None:
    text = variant('names_str="A, B, C"', 'names_str="A, stream, C"')
    f = only(ws.check(text, "", ADD_TENSORS).findings, "KT208")
    assert span(f) == find_span(text, "stream", 0)


def test_gemm_profiles_keep_their_body_names_reserved() -> None:
    from kls.runtime.profiles import PROFILES

    assert "B" in PROFILES["inductor-2023"].reserved_c_names("cutlass_gemm")
    assert "B" in PROFILES["torch-2.11"].reserved_c_names("cutlass_gemm")
    for p in PROFILES.values():
        assert p.reserved_c_names("cuda") == {"workspace", "workspace_size", "stream"}


# -- 4: config mistakes on their own line ----------------------------------------------------------
def test_bad_arch_is_kt002_on_its_line_with_valid_forms(ws: Workspace) -> None:
    ws.write("t.cu.jinja", ADD)
    instances = ws.config(f'[instances.i]\ntemplate = "t.cu.jinja"\narch = "9a"\n{ADD_TENSORS}')
    f = only(instances.findings, "KT002")
    assert f.range.start.line == 2
    assert "'90a'" in f.message and '"80"' in f.message
    assert not instances.instances


@pytest.mark.parametrize("arch", ["80", "89", "90a", "100a", "120", 90])
def test_valid_archs_pass(ws: Workspace, arch: str | int) -> None:
    ws.write("t.cu.jinja", ADD)
    value = f'"{arch}"' if isinstance(arch, str) else str(arch)
    instances = ws.config(f'[instances.i]\ntemplate = "t.cu.jinja"\narch = {value}\n{ADD_TENSORS}')
    assert instances.findings == [] and "i" in instances.instances


def test_sm_prefix_says_write_the_bare_number() -> None:
    from kls.arch import arch_problem

    problem = arch_problem("sm_90a")
    assert problem is not None and "'90a'" in problem


@pytest.mark.parametrize(
    "typo, meant",
    [("bfloat", "bf16"), ("nv_bfloat16", "bf16"), ("half_t", "fp16"), ("flaot", "fp32")],
)
def test_dtype_suggested_by_meaning_and_valid_ones_listed(
    ws: Workspace, typo: str, meant: str
) -> None:
    ws.write("t.cu.jinja", ADD)
    tensors = ADD_TENSORS.replace('dtype = "fp32" }', f'dtype = "{typo}" }}', 1)
    instances = ws.config(f'[instances.i]\ntemplate = "t.cu.jinja"\n{tensors}')
    f = only(instances.findings, "KT002")
    assert f"did you mean '{meant}'" in f.message
    assert "valid dtypes: float32 (f32/float/fp32)" in f.message and "bfloat16 (bf16)" in f.message


# -- 5: a typo inside def_kernel ---------------------------------------------------------
def test_typo_in_def_kernel_is_one_finding_at_its_token(ws: Workspace) -> None:
    text = variant("inputs=[A, B]", "inputs=[A, Bb]")
    findings = ws.check(text, "", ADD_TENSORS).findings
    f = only(findings, "KT102")
    assert span(f) == find_span(text, "Bb")
    assert "did you mean 'B'" in f.message
    assert codes(findings) == ["KT102"], [x.format_line() for x in findings]


def test_undeclared_buffer_without_an_instance_is_still_kt204(tmp_path: Path) -> None:
    from kls.checks.run import check_file

    path = tmp_path / "t.cu.jinja"
    path.write_text(variant("inputs=[A, B]", "inputs=[A, Bb]"), encoding="utf-8")
    assert "KT204" in codes(check_file(path).findings)


# -- 7: no kls.toml: say that only the static checks ran; KT211 statically ---------------
def test_check_without_config_says_only_static_checks_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "add.cu.jinja").write_text(ADD, encoding="utf-8")
    assert main(["check", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "only the static checks ran" in err and "[instances." in err and "kls init" in err


def test_kt211_found_without_an_instance(tmp_path: Path) -> None:
    from kls.checks.run import check_file

    text = variant("__global__", "// {{kernel.ptr(A)}}\n__global__")
    path = tmp_path / "t.cu.jinja"
    path.write_text(text, encoding="utf-8")
    f = only(check_file(path).findings, "KT211")
    assert span(f) == find_span(text, "kernel.ptr(A)")


def test_kt211_not_for_a_macro_defined_above_def_kernel(tmp_path: Path) -> None:
    from kls.checks.run import check_file

    text = variant("__global__", "{% macro p(x) %}{{kernel.ptr(x)}}{% endmacro %}\n__global__")
    path = tmp_path / "t.cu.jinja"
    path.write_text(text, encoding="utf-8")
    assert "KT211" not in codes(check_file(path).findings)


# -- 6 and 10: nvcc's detail lines; kls check --compile ------------------------------------------
# bf16 * double is ambiguous for nvcc (two operator* candidates); float * double is fine: a type
# error that only the bf16 instance has, which no check of the template or its render sees.
TYPED = variant(
    "const float* a, const float* b, float* c",
    "const {{kernel.dtype(A)}}* a, const {{kernel.dtype(B)}}* b, {{kernel.dtype(C)}}* c",
).replace("c[i] = a[i] + b[i];", "c[i] = a[i] * 2.0 + b[i];")
TWO_DTYPES = f"""\
[instances.add_f32]
template = "t.cu.jinja"
{ADD_TENSORS}
[instances.add_bf16]
template = "t.cu.jinja"
{ADD_TENSORS.replace('"fp32"', '"bf16"')}
"""


def test_nvcc_detail_lines_are_kept_in_the_message(ws: Workspace) -> None:
    from kls.compile.diagnostics import map_messages, parse_nvcc
    from kls.render import render

    ws.write("t.cu.jinja", TYPED)
    rendered = render(ws.config(TWO_DTYPES).instances["add_bf16"])
    line = (rendered.text or "").split("\n").index("  if (i < n) c[i] = a[i] * 2.0 + b[i];")
    log = (
        f'/c/kernel.cu({line + 1}): error: more than one operator "*" matches these operands:\n'
        '            built-in operator "arithmetic * arithmetic"\n'
        "            operand types are: const bfloat16 * double\n"
        "    if (i < n) c[i] = a[i] * 2.0 + b[i];\n"
        "                           ^\n"
        f'/c/kernel.cu({line + 2}): error: no instance of overloaded function "max" matches\n'
        "            argument types are: (const float *, int)\n"
    )
    first, second = map_messages(parse_nvcc(log), Path("/c/kernel.cu"), rendered)
    assert first.message == (
        'nvcc: more than one operator "*" matches these operands '
        "(operand types are: const bfloat16 * double)"
    )
    assert first.range.start.line == TYPED.split("\n").index(
        "  if (i < n) c[i] = a[i] * 2.0 + b[i];"
    )
    assert second.message.endswith("(argument types are: (const float *, int))")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_check_compile_fails_on_the_bf16_only_type_error(
    ws: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLS_CACHE_DIR", str(ws.root / "cache"))
    ws.write("t.cu.jinja", TYPED)
    ws.config(TWO_DTYPES)
    assert main(["check", str(ws.root)]) == 0  # every check that reads the template passes
    capsys.readouterr()
    assert main(["check", "--compile", str(ws.root)]) == 1
    out, err = capsys.readouterr()
    assert "KT601" in out and "[add_bf16]" in out and "operand types are" in out
    assert "[add_f32]" not in out
    assert "1/2 compiled by nvcc" in err


def test_compile_all_runs_in_parallel_within_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from kls.checks import compiled
    from kls.compile import CompileResult

    running, peak, lock = [0], [0], threading.Lock()

    def fake(spec: object, options: object) -> CompileResult:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return CompileResult(str(spec), "check", ok=True)

    monkeypatch.setattr(compiled, "compile_instance", fake)
    results = compiled.compile_all([f"i{n}" for n in range(6)], limit=2)  # type: ignore[misc]
    assert [r.instance for r in results] == [f"i{n}" for n in range(6)]
    assert peak[0] == 2
    assert 1 <= compiled.default_limit() <= (os.cpu_count() or 1)
