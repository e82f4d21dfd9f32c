"""Issue 11: a new user's first template of their own (an elementwise add, buffers A, B, C),
from nothing to a verified kernel: each wall the issue names, as a test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kls.cli import main
from tests.conftest import Workspace, codes, find_span, only, span
from tests.upstream import needs_torch_source

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
    from kls.profiles import PROFILES

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
    assert "1/2 compiled;" in err


def test_compile_all_runs_in_parallel_within_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from kls.compile import CompileResult
    from kls.compile import batch as compiled

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


# -- 8: the user's own reference (CPU: loading, calling, comparing; the GPU run is gpu-marked) ----
REFS = """\
import numpy as np


def add(A, B):
    return A + B


def add_wrong(A, B):
    out = A + B
    out[3, 4] += 1.0
    return out


def total(A, B):
    raise ValueError("not written yet")
"""


def host(name: str, values: np.ndarray, dtype: str, output: bool = False, col: bool = False):  # type: ignore[no-untyped-def]
    from kls.bench.job import TensorJob
    from kls.bench.numerics import to_storage
    from kls.bench.reference import HostTensor

    rows, cols = values.shape
    stride = [1, rows] if col else [cols, 1]
    flat = (values.T if col else values).reshape(-1).astype(np.float32)
    return HostTensor(
        TensorJob(name, [rows, cols], stride, dtype, 0, output), to_storage(flat, dtype)
    )


def add_case(dtype: str, col: bool = False):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (8, 16)), rng.uniform(-1, 1, (8, 16))
    from kls.bench.numerics import to_float64, to_storage

    def rounded(x: np.ndarray) -> np.ndarray:
        return to_float64(to_storage(x.astype(np.float32), dtype), dtype).reshape(x.shape)

    c = rounded(rounded(a) + rounded(b))  # what a correct kernel writes
    return [host("A", a, dtype, col=col), host("B", b, dtype)], [host("C", c, dtype, True)]


def write_refs(root: Path) -> Path:
    path = root / "refs.py"
    path.write_text(REFS, encoding="utf-8")
    return path


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("col", [False, True])
def test_user_reference_verifies_an_add(tmp_path: Path, dtype: str, col: bool) -> None:
    from kls.bench.reference import load_reference, verify_user

    refs = write_refs(tmp_path)
    inputs, outputs = add_case(dtype, col)
    v = verify_user(load_reference(f"{refs}:add"), inputs, outputs, None)
    assert v.ok and v.checked == 8 * 16
    wrong = verify_user(load_reference(f"{refs}:add_wrong"), inputs, outputs, None)
    assert not wrong.ok and wrong.worst == [3, 4]


def test_user_reference_sees_numpy_arrays_with_the_instances_strides(tmp_path: Path) -> None:
    from kls.bench.reference import as_numpy

    (a, _), _ = add_case("bfloat16", col=True)
    view = as_numpy(a)
    assert view.shape == (8, 16) and view.dtype == np.float32  # bf16 values, exactly
    assert view.strides == (4, 32) and not view.flags.writeable


def test_tolerance_is_per_instance(tmp_path: Path) -> None:
    from kls.bench.reference import verify_user

    inputs, outputs = add_case("float32")

    def off(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return np.asarray((A + B) * (1 + 1e-3))

    assert not verify_user(off, inputs, outputs, None).ok  # fp32's default: 1e-4
    v = verify_user(off, inputs, outputs, 1e-2)
    assert v.ok and v.tolerance == 1e-2


def test_user_reference_problems_are_messages(tmp_path: Path) -> None:
    from kls.bench.reference import UserReferenceError, load_reference, verify_user

    refs = write_refs(tmp_path)
    inputs, outputs = add_case("float32")
    with pytest.raises(UserReferenceError, match=r"defines no function 'ad'.*did you mean 'add'"):
        load_reference(f"{refs}:ad")
    with pytest.raises(UserReferenceError, match=r"raised ValueError: not written yet at refs.py:"):
        verify_user(load_reference(f"{refs}:total"), inputs, outputs, None)
    with pytest.raises(UserReferenceError, match="does not fit its shape"):
        verify_user(lambda A, B: np.zeros(3), inputs, outputs, None)
    with pytest.raises(UserReferenceError, match=r"value for C \(list\) does not fit"):
        verify_user(lambda A, B: [A, B], inputs, outputs, None)  # two arrays for one output


def test_reference_in_kls_toml_is_checked_but_never_imported(ws: Workspace) -> None:
    from kls.checks.run import check_file

    marker = ws.root / "imported"
    write_refs(ws.root).write_text(f"open({str(marker)!r}, 'w').close()\n" + REFS)
    ws.write("t.cu.jinja", ADD)
    good = ws.config(
        f'[instances.i]\ntemplate = "t.cu.jinja"\nreference = "refs.py:add"\ntolerance = 1e-3\n'
        f"{ADD_TENSORS}"
    )
    spec = good.instances["i"]
    assert spec.reference == f"{(ws.root / 'refs.py').resolve()}:add" and spec.tolerance == 1e-3
    check_file(ws.root / "t.cu.jinja", instances=good)
    assert not marker.exists()  # kls check and the server only name the file
    for value, code in (
        ('"refs:add"', "KT002"),
        ('"nothere.py:add"', "KT004"),
        ('"../x.py:add"', "KT004"),
    ):
        bad = ws.config(
            f'[instances.i]\ntemplate = "t.cu.jinja"\nreference = {value}\n{ADD_TENSORS}'
        )
        assert codes(bad.findings) == [code], [f.format_line() for f in bad.findings]


class FakeCuda:
    """The worker's verify() reads outputs with download: they are already on the host."""

    def download(self, ptr: int, host: np.ndarray) -> None:
        pass


def fake_cuda() -> Any:
    return FakeCuda()


def _job(reference: str, tolerance: float | None = None):  # type: ignore[no-untyped-def]
    from kls.bench.job import BenchJob

    inputs, outputs = add_case("float32")
    tensors = {t.spec.name: t.spec for t in inputs + outputs}
    job = BenchJob("lib.so", "k", ["A", "B", "C"], tensors, reference, tolerance=tolerance)
    return job, {t.spec.name: t for t in inputs + outputs}


def test_worker_loads_and_runs_the_reference(tmp_path: Path) -> None:
    from kls.bench import worker

    refs = write_refs(tmp_path)
    job, hosts = _job(f"{refs}:add")
    function = worker._load_user_reference(job.reference)
    v = worker.verify(
        fake_cuda(), job, hosts, dict.fromkeys(hosts, 0), np.random.default_rng(0), function
    )
    assert v.ok and v.checked == 128
    with pytest.raises(
        worker.StageError, match=r'reference = ".*refs\.py:nope": refs\.py defines no'
    ):
        worker._load_user_reference(f"{refs}:nope")


def test_reference_none_times_unverified_and_says_so_loudly() -> None:
    from kls.bench import worker
    from kls.bench.report import build_report

    job, hosts = _job("none")
    v = worker.verify(fake_cuda(), job, hosts, dict.fromkeys(hosts, 0), np.random.default_rng(0))  # type: ignore[arg-type]
    assert v.ok and v.checked == 0
    timing = {
        "n": 50,
        "median": 0.01,
        "p25": 0.01,
        "p75": 0.01,
        "minimum": 0.01,
        "mean": 0.01,
        "spread": 0.0,
    }
    report = build_report("i", job, {"ok": True, "timing": timing, "verified": False})
    assert report.headline().startswith('⚠ UNVERIFIED (reference = "none"')
    assert report.to_json()["verified"] is False and "UNVERIFIED" in report.message


def test_bench_without_any_reference_says_how_to_give_one(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kls.bench.run as run
    from kls.compile import CompileResult
    from kls.render import render

    ws.write("t.cu.jinja", ADD)
    spec = ws.config(f'[instances.i]\ntemplate = "t.cu.jinja"\n{ADD_TENSORS}').instances["i"]
    assert spec.reference == "unset"
    built = CompileResult("i", "build", ok=True, artifact=tmp_path / "x.so")
    built.rendered = render(spec)
    monkeypatch.setattr(run, "compile_instance", lambda *a, **k: built)
    report = run.benchmark_instance(spec, run.BenchOptions())
    assert not report.ok and 'reference = "refs.py:add"' in report.message
    assert '"none" to time without verifying' in report.message


# -- 9: kls init -------------------------------------------------------------------------
def test_init_writes_a_project_that_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mine"
    assert main(["init", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "kls check ." in out and "kls bench add.cu.jinja -i add_bf16" in out
    assert sorted(p.name for p in folder.iterdir()) == ["add.cu.jinja", "kls.toml", "refs.py"]
    assert main(["check", str(folder)]) == 0
    err = capsys.readouterr().err
    assert "0 error(s), 0 warning(s); 2 instance(s) rendered" in err
    toml = (folder / "kls.toml").read_text()
    assert toml.count("\n#") > 10  # commented
    assert main(["init", str(folder)]) == 2  # never overwrites
    assert "never overwrites" in capsys.readouterr().err


@needs_torch_source
def test_init_gemm_is_todays_inductor_template(tmp_path: Path) -> None:
    """--gemm writes only kls.toml: its instance reads torch 2.11's own templates in place."""
    folder = tmp_path / "g"
    assert main(["init", "--gemm", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["kls.toml"]
    assert (
        "torch:_inductor/codegen/cutlass/gemm_template.py::GEMM_TEMPLATE_CUTLASS_3X"
        in (folder / "kls.toml").read_text()
    )
    from kls.checks import check_paths

    result = check_paths([folder])
    assert result.findings == [] and list(result.renders) == ["gemm_bf16_4096"]
    spec = result.renders["gemm_bf16_4096"].instance
    assert spec.profile == "torch-2.11" and spec.kind == "cutlass_gemm" and spec.reference == "gemm"


def test_init_gemm_without_a_torch_source_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kls.upstream.locate import forget

    monkeypatch.setenv("KLS_TORCH_SOURCE", "none")
    forget()
    assert main(["init", "--gemm", str(tmp_path / "g")]) == 2
    assert "KLS_TORCH_SOURCE=none" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()  # nothing half-written
    forget()


def test_init_reference_verifies_the_add_on_the_cpu(tmp_path: Path) -> None:
    from kls.bench.reference import load_reference, verify_user

    main(["init", str(tmp_path)])
    inputs, outputs = add_case("bfloat16")
    assert verify_user(load_reference(f"{tmp_path / 'refs.py'}:add"), inputs, outputs, None).ok


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_init_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    main(["init", str(tmp_path / "p")])
    assert main(["check", "--compile", str(tmp_path / "p")]) == 0
    assert "2/2 compiled;" in capsys.readouterr().err


# -- 1: one documentation source: hover, completion, kls rules and docs/TEMPLATE_API.md ----------
def test_template_api_doc_is_up_to_date() -> None:
    from kls.docs import TARGET, generate
    from tests.conftest import ROOT

    assert (ROOT / TARGET).read_text(encoding="utf-8") == generate(), (
        "docs/TEMPLATE_API.md is stale: run .venv/bin/python -m kls.docs"
    )


@pytest.mark.parametrize("profile", ["inductor-2023", "torch-2.11"])
def test_every_documented_rendering_is_what_the_helper_renders(ws: Workspace, profile: str) -> None:
    from kls.checks.signatures import EXAMPLE_DEF_KERNEL, EXAMPLE_TENSORS, helpers
    from kls.render import render

    examples = [s for s in helpers(profile).values() if s.example and s.name != "def_kernel"]
    assert len(examples) >= 8
    lines = [f"{{{{{EXAMPLE_DEF_KERNEL}}}}}"] + [f"@@{{{{{s.example}}}}}@@" for s in examples]
    ws.write("ex.cu.jinja", "\n".join(lines) + "\n")
    tensors = "\n".join(
        f'tensors.{n} = {{ shape = {list(shape)}, dtype = "{d}", layout = "{lay}" }}'
        for n, (d, shape, lay) in EXAMPLE_TENSORS.items()
    )
    spec = ws.config(
        f'[instances.example]\nprofile = "{profile}"\ntemplate = "ex.cu.jinja"\n{tensors}\n'
    ).instances["example"]
    text = render(spec).text or ""
    assert text.split("\n")[0].removeprefix("PT_EXPORT ") == helpers(profile)[
        ("kernel", "def_kernel")
    ].renders.removeprefix("PT_EXPORT ")
    rendered = text.split("@@")[1::2]
    for sig, got in zip(examples, rendered, strict=True):
        assert got == sig.renders, sig.label


def test_every_context_name_is_documented_and_hover_shows_the_same_text() -> None:
    from kls.checks.signatures import CONTEXT_DOCS, helper_sig
    from kls.profiles import PROFILES

    for p in PROFILES.values():
        for kind in ("cuda", "cutlass_gemm"):
            assert p.context_names(kind) <= set(CONTEXT_DOCS), (p.name, kind)
    sig = helper_sig("kernel", "dtype", "torch-2.11")
    assert sig is not None and "at::BFloat16" in sig.doc and "Trap:" in sig.doc
    doc = (Path(__file__).parents[2] / "docs" / "TEMPLATE_API.md").read_text()
    assert sig.summary in doc and sig.traps in doc


def test_readme_quick_start_is_init_check_render_compile_bench() -> None:
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    top = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert top[0].startswith("python3 -m venv .venv && .venv/bin/pip install -e")
    assert top[1] == ".venv/bin/pytest -q"
    quick = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    verbs = [line.split()[1] for line in quick.splitlines()]
    assert verbs == ["init", "check", "render", "compile", "bench"]


def test_init_triton_writes_a_template_of_kls_own_that_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--triton: an elementwise scale in Inductor's Triton style and its instance; the static
    checks find nothing, and where torch is importable Inductor renders it."""
    import importlib.util

    from kls.checks import check_paths
    from kls.checks.triton_static import triton_findings
    from kls.findings import Severity
    from kls.instances import load_instances
    from kls.template.model import parse_template

    folder = tmp_path / "t"
    assert main(["init", "--triton", str(folder)]) == 0
    assert "kls render scale.py.jinja -i scale_bf16" in capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == ["kls.toml", "scale.py.jinja"]
    text = (folder / "scale.py.jinja").read_text()
    for helper in ("def_kernel(", "size(", "stride(", "store_output("):
        assert "{{" + helper in text
    loaded = load_instances(folder / "kls.toml")
    assert loaded.findings == []
    spec = loaded.instances["scale_bf16"]
    assert spec.profile == "triton" and spec.kind == "triton"
    assert triton_findings(parse_template(text), str(folder / "scale.py.jinja"), spec) == []
    result = check_paths([folder])
    assert [f.format_line() for f in result.findings if f.severity <= Severity.WARNING] == []
    if importlib.util.find_spec("torch") and importlib.util.find_spec("triton"):
        module = result.renders["scale_bf16"].text or ""
        assert "stride_xm, stride_xn = 512, 1" in module and "SCALE : tl.constexpr = 2.0" in module
    assert main(["init", "--triton", "--gemm", str(tmp_path / "both")]) == 2
    assert not (tmp_path / "both").exists()
