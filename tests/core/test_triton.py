"""The triton profile: instances of Inductor's Triton templates, rendered by Inductor itself in
a torch worker, mapped back to template lines, and checked. The torch-backed tests need torch
2.11 importable by kls (or KLS_TORCH_PYTHON) and the torch source; without them they skip
(KLS_REQUIRE_TORCH=1 makes that a failure, as CI does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kls.checks.run import check_paths
from kls.findings import Severity
from kls.instances import load_instances
from kls.lsp.settings import Settings
from kls.profiles import profile
from kls.profiles.triton.align import align
from kls.profiles.triton.client import torch_python
from kls.profiles.triton.errors import finding_for
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from tests.conftest import TEMPLATES
from tests.upstream import needs_torch, needs_torch_source

# A template of kls's own shape (not Inductor's text): literal lines, spans, an expansion.
TEMPLATE = """{{def_kernel("X", "Y")}}
    n = {{size("X", 0)}}
    pid = tl.program_id(0)
    {{store_output(("pid",), "acc")}}
    return
"""
RENDERED = """import triton
@triton.jit
def k(arg_X, arg_Y, out_ptr0):
    X = arg_X
    n = 64
    pid = tl.program_id(0)
    xindex = pid
    tl.store(out_ptr0 + xindex, acc)
    return
"""


def test_rendered_lines_map_to_the_template_line_that_made_them() -> None:
    assert align(TEMPLATE, RENDERED) == [0, 0, 0, 0, 1, 2, 3, 3, 4, 5]


def _instance(tmp_path: Path, extra: str = "") -> object:
    (tmp_path / "k.py.jinja").write_text(TEMPLATE)
    (tmp_path / "kls.toml").write_text(
        '[instances.k]\nprofile = "triton"\ntemplate = "k.py.jinja"\n'
        'tensors.X = { shape = [64], dtype = "f32" }\n'
        'tensors.out = { shape = [64], dtype = "f32" }\n'
        f"vars = {{ BLOCK = 64 }}\nnum_warps = 8\n{extra}"
    )
    return load_instances(tmp_path / "kls.toml")


def test_a_triton_instance_reads_its_launch_and_device(tmp_path: Path) -> None:
    loaded = _instance(tmp_path, "device = { cc = 80, sm_count = 108 }\n")
    spec = loaded.instances["k"]  # type: ignore[attr-defined]
    assert (spec.kind, spec.num_warps, spec.num_stages) == ("triton", 8, 3)
    assert spec.device == {"cc": 80, "sm_count": 108}
    request = profile("triton").request(spec, TEMPLATE, TEMPLATE)  # type: ignore[attr-defined]
    assert [t["name"] for t in request["inputs"]] == ["arg0_1"]  # out is the output
    assert request["output"]["shape"] == [64] and request["vars"] == {"BLOCK": 64}
    bad = _instance(tmp_path, "device = { cc = 0, smcount = 1 }\n")
    said = {f.code: f.message for f in bad.findings}  # type: ignore[attr-defined]
    assert "smcount" in said["KT003"] and "sm_count" in said["KT003"]  # did you mean
    assert "positive integer" in said["KT002"]


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        (
            {"kind": "KeyError", "message": "'C'", "function": "size", "line": 1},
            "KT802",
            "no buffer 'C'",
        ),
        (
            {"kind": "AssertionError", "message": "(1, 2, 0, 2)", "function": "def_kernel"},
            "KT803",
            "number of inputs",
        ),
        (
            {"kind": "AssertionError", "message": "", "function": "load_input", "line": 3},
            "KT805",
            "twice",
        ),
        (
            {"kind": "UndefinedError", "message": "'BLOCK_Q' is undefined", "line": 2},
            "KT102",
            "BLOCK_Q",
        ),
        (
            {"kind": "ZeroDivisionError", "message": "division by zero", "function": "grid"},
            "KT103",
            "ZeroDivisionError",
        ),
    ],
)
def test_inductors_bare_errors_become_sentences(
    tmp_path: Path, error: dict[str, object], code: str, words: str
) -> None:
    spec = _instance(tmp_path).instances["k"]  # type: ignore[attr-defined]
    found = finding_for(error, spec, TEMPLATE)
    assert found.code == code and words in found.message
    if isinstance(error.get("line"), int):
        assert found.site is not None and found.site.line == error["line"]
    elif error.get("function") == "def_kernel":
        assert found.site is not None and found.site.line == 0  # the def_kernel call


MM = "torch:_inductor/kernel/templates/triton_mm.py.jinja"
MM_VARS = (
    "vars = { BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 32, GROUP_M = 8, EVEN_K = true, "
    'ALLOW_TF32 = false, USE_FAST_ACCUM = false, ACC_TYPE = "tl.float32" }\n'
)


def _mm_project(tmp_path: Path, template: str = MM) -> Path:
    config = tmp_path / "kls.toml"
    config.write_text(
        f'[instances.mm]\nprofile = "triton"\ntemplate = "{template}"\n'
        'tensors.A = { shape = [256, 512], dtype = "bf16" }\n'
        'tensors.B = { shape = [512, 128], dtype = "bf16", layout = "col" }\n'
        'tensors.out = { shape = [256, 128], dtype = "bf16" }\n' + MM_VARS
    )
    return config


def _inductors_mm() -> str:
    """torch's own triton_mm.py.jinja, read from the torch source (tests plant mistakes in a
    copy made at test time; nothing of it is stored)."""
    from tests.upstream import require_torch_source

    path = require_torch_source().package / "_inductor/kernel/templates/triton_mm.py.jinja"
    return path.read_text()


def _mm_copy_project(tmp_path: Path, text: str) -> Path:
    """A project whose mm instance renders `text` (a changed copy of Inductor's mm) as
    Inductor's own mm template."""
    (tmp_path / "mm.py.jinja").write_text(text)
    config = _mm_project(tmp_path, "mm.py.jinja")
    config.write_text(
        config.read_text().replace(
            'template = "mm.py.jinja"\n', 'template = "mm.py.jinja"\ninductor_template = "mm"\n'
        )
    )
    return config


@needs_torch
@needs_torch_source
def test_triton_mm_renders_through_inductor_and_checks_clean(tmp_path: Path) -> None:
    spec = load_instances(_mm_project(tmp_path)).instances["mm"]
    result: RenderResult = render_isolated(spec)
    assert result.text is not None, [f.message for f in result.findings]
    assert "def triton_mm(arg_A, arg_B, out_ptr0):" in result.text
    assert "    M = 256" in result.text and "stride_bn = 512" in result.text
    assert result.source_map is not None
    line = result.text.split("\n").index("    M = 256")
    origin = result.source_map.origin(line)
    assert origin is not None
    template = Path(origin.path).read_text().split("\n")
    assert template[origin.line].strip().startswith("M = {{size(")
    checked = check_paths([tmp_path])
    assert [f.format_line() for f in checked.findings if f.severity <= Severity.WARNING] == []
    assert "mm" in checked.renders


@needs_torch
@needs_torch_source
def test_an_output_layout_inductor_does_not_make_is_a_warning_and_bench_follows_it(
    tmp_path: Path,
) -> None:
    """Inductor's mm writes its output contiguous, whatever kls.toml declares: kls says so
    (KT813) and times the layout the module writes."""
    from kls.bench.run import BenchOptions, make_module_job
    from kls.profiles import profile

    config = _mm_project(tmp_path)
    padded = 'tensors.out = { shape = [256, 128], dtype = "bf16", stride = [1024, 1] }\n'
    config.write_text(
        config.read_text().replace('tensors.out = { shape = [256, 128], dtype = "bf16" }\n', padded)
    )
    spec = load_instances(config).instances["mm"]
    result: RenderResult = render_isolated(spec)
    assert result.text is not None
    [warning] = [f for f in result.findings if f.code == "KT813"]
    assert "(128, 1)" in warning.message and "(1024, 1)" in warning.message
    launch = profile(spec.profile).bench_launch(spec, result)
    assert launch is not None
    job = make_module_job(spec, result, launch, BenchOptions())
    out = job.tensors["out"]
    assert out is not None and out.is_output and out.stride == [128, 1]


@needs_torch
@needs_torch_source
def test_a_name_the_kernel_never_defines_is_found_at_its_template_line(tmp_path: Path) -> None:
    """KT852: a typo in the Python of a copy of Inductor's mm (made here, never stored) is
    found in the rendered module's jit function and reported at the template line; the
    shipped instances have none."""
    text = _inductors_mm()
    typo = "rm = pid_mm * BLOCK_M + tl.arange(0, BLOCK_M)"
    planted = text.replace("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", typo, 1)
    assert planted != text
    _mm_copy_project(tmp_path, planted)
    found = [f for f in check_paths([tmp_path]).findings if f.code == "KT852"]
    assert len(found) == 1, [f.format_line() for f in found]
    assert found[0].range.start.line == next(
        i for i, line in enumerate(planted.split("\n")) if typo in line
    )
    assert "'pid_mm' is not defined" in found[0].message
    shipped = check_paths([TEMPLATES])
    assert [f.format_line() for f in shipped.findings if f.code == "KT852"] == []


@needs_torch
@needs_torch_source
def test_a_mistake_in_a_copy_lands_on_its_line(tmp_path: Path) -> None:
    text = _inductors_mm()
    planted = text.replace('{{size("B", 1)}}', '{{size("C", 1)}}', 1)  # made here, never stored
    _mm_copy_project(tmp_path, planted)
    found = [f for f in check_paths([tmp_path]).findings if f.code == "KT802"]
    assert len(found) == 1
    assert found[0].range.start.line == planted.split("\n").index('    N = {{size("C", 1)}}')
    assert "no buffer 'C'" in found[0].message and "A, B" in found[0].message


@needs_torch
@needs_torch_source
def test_an_index_past_the_rank_is_one_finding_at_its_token(tmp_path: Path) -> None:
    """KT806 (static, at the index) and Inductor's IndexError in the render (KT103, at the
    line) are one mistake: the static finding stays, alone."""
    text = _inductors_mm()
    planted = text.replace('{{size("B", 1)}}', '{{size("B", 2)}}', 1)  # made here, never stored
    _mm_copy_project(tmp_path, planted)
    found = check_paths([tmp_path]).findings
    assert [f.code for f in found] == ["KT806"], [f.format_line() for f in found]
    assert found[0].range.start.line == planted.split("\n").index('    N = {{size("B", 2)}}')


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_runaway_loop_stops_at_the_render_limit_on_its_line(tmp_path: Path) -> None:
    """`--render-timeout` bounds a Triton template's own code as it bounds a CUDA one's: a loop
    without end in a copy of Inductor's mm (made here, never stored) is a KT104 at its line
    after the limit, not after the torch worker's 60 s deadline for the whole render."""
    import json
    import subprocess
    import sys
    import time

    text = _inductors_mm()
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if "def_kernel(" in line) + 1
    _mm_copy_project(tmp_path, "\n".join([*lines[:at], loop, *lines[at:]]))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(tmp_path), "--render-timeout", "2"]
        + ["--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    spent = time.monotonic() - started
    findings = json.loads(done.stdout)["findings"]
    stopped = [f for f in findings if f["code"] == "KT104"]
    assert len(stopped) == 1, findings
    assert stopped[0]["range"]["start"]["line"] == at, stopped
    assert "render limit of 2 s" in stopped[0]["message"]
    assert spent < 45, spent  # the whole render's deadline is 60 s


def test_the_worker_python_is_kls_own_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("KLS_TORCH_PYTHON", raising=False)
    assert torch_python() == sys.executable
    monkeypatch.setenv("KLS_TORCH_PYTHON", "/opt/torch/bin/python3")
    assert torch_python() == "/opt/torch/bin/python3"


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_out_of_resource_is_found_before_any_gpu(tmp_path: Path) -> None:
    """Triton's compile for sm_90 without a GPU: 256x256x128 blocks over 5 stages need 640 KiB
    of shared memory, beyond an H200's 227 KiB; the registers spill too."""
    from kls.compile import CompileOptions, compile_instance

    config = _mm_project(tmp_path)
    big = config.read_text().replace(
        "BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 32", "BLOCK_M = 256, BLOCK_N = 256, BLOCK_K = 128"
    )
    config.write_text(big + "num_stages = 5\n")
    result = compile_instance(load_instances(config).instances["mm"], CompileOptions())
    codes = {f.code: f for f in result.findings}
    assert not result.ok and "KT862" in codes and "KT863" in codes
    assert "Required: 655360 Hardware limit: 232448" in codes["KT862"].message
    template = Path(codes["KT862"].path).read_text().split("\n")
    assert "def_kernel" in template[codes["KT862"].range.start.line]


@needs_torch
@needs_torch_source
def test_a_clean_compile_reports_what_it_used(tmp_path: Path) -> None:
    from kls.compile import CompileOptions, compile_instance

    result = compile_instance(
        load_instances(_mm_project(tmp_path)).instances["mm"], CompileOptions()
    )
    assert result.ok, [f.message for f in result.findings]
    [used] = [f for f in result.findings if f.code == "KT860"]
    assert "24576 B shared memory of 232448 B" in used.message


SHIPPED_CONFIG = Path(__file__).parents[2] / "templates" / "kls.toml"
SHIPPED_TRITON = sorted(
    n for n, i in load_instances(SHIPPED_CONFIG).instances.items() if i.profile == "triton"
)


@needs_torch
@needs_torch_source
@pytest.mark.parametrize("name", SHIPPED_TRITON)
def test_shipped_triton_instances_render_with_every_line_mapped(name: str) -> None:
    spec = load_instances(SHIPPED_CONFIG).instances[name]
    result = render_isolated(spec)
    assert result.text is not None, [f.message for f in result.findings]
    assert result.source_map is not None
    assert all(o is not None for o in result.source_map.origins)
    assert "@triton.jit" in result.text


def test_torch_is_not_run_where_it_is_not_allowed(tmp_path: Path) -> None:
    """An untrusted workspace, or a server before the client's settings: no torch worker
    starts; the instance gets its static checks and one note that says why."""
    from kls.profiles.triton.client import allow_torch

    spec = _instance(tmp_path).instances["k"]  # type: ignore[attr-defined]
    allow_torch(False, "off in an untrusted workspace")
    try:
        result = render_isolated(spec)
    finally:
        allow_torch(True)
    assert result.text is None
    [note] = result.findings
    assert (note.code, note.severity) == ("KT800", Severity.INFO)
    assert "untrusted" in note.message


async def test_the_server_allows_torch_only_with_trusted_settings() -> None:
    from lsprotocol import types as lsp

    from kls.profiles.triton import client
    from tests.lsp.harness import Harness

    harness = Harness()
    await harness.initialize(lsp.ClientCapabilities())  # no settings yet
    try:
        assert client._ALLOWED[0] is not None and "settings" in client._ALLOWED[0]
        harness.server.apply_settings(Settings.from_client({"workspaceTrusted": False}))
        assert client._ALLOWED[0] is not None and "untrusted" in client._ALLOWED[0]
        harness.server.apply_settings(Settings.from_client({"workspaceTrusted": True}))
        assert client._ALLOWED[0] is None
    finally:
        await harness.close()
        client.allow_torch(True)
