"""What the CLI says around its findings: follow-up notes that are true, one JSON flag, help
that explains itself, `-i` only when needed, caches, bench honesty, progress, hints."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TEMPLATES, Workspace
from tests.core.test_cli import KLS, run
from tests.core.test_config_findings import ENTRY, TENSORS

GEMM_PY = '''\
HELPER = "not a template"
GEMM = r"""
{% if should_swap_xw,, %}
x
{% endif %}
"""
'''


def _config(root: Path, template: str) -> None:
    (root / "kls.toml").write_text(f'[instances.i]\ntemplate = "{template}"\n{TENSORS}')


# -- follow-up notes -----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["syntax", "missing-file", "bad-constant"])
def test_no_declares_no_instance_note_when_an_error_stopped_the_render(
    tmp_path: Path, case: str
) -> None:
    (tmp_path / "t.cu.jinja").write_text(ENTRY.replace("return 0;\n}", "{% if %}\n}", 1))
    (tmp_path / "g.py").write_text(GEMM_PY)
    template = {
        "syntax": "t.cu.jinja",
        "missing-file": "gone.cu.jinja",
        "bad-constant": "g.py::NOPE",
    }
    _config(tmp_path, template[case])
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "declares no instance" not in proc.stderr
    assert "the error(s) above stop it" in proc.stderr


def test_an_instance_whose_template_does_not_parse_is_counted_as_not_rendered(
    tmp_path: Path,
) -> None:
    (tmp_path / "t.cu.jinja").write_text(ENTRY)
    (tmp_path / "bad.cu.jinja").write_text(ENTRY.replace("return 0;\n}", "{% if %}\n}", 1))
    (tmp_path / "kls.toml").write_text(
        f'[instances.ok]\ntemplate = "t.cu.jinja"\n{TENSORS}\n'
        f'[instances.broken]\ntemplate = "bad.cu.jinja"\n{TENSORS}'
    )
    proc = run("check", str(tmp_path))
    assert "KT101" in proc.stdout
    assert "1 instance(s) rendered, 1 did not render" in proc.stderr, proc.stderr
    proc = run("check", str(tmp_path), "--format", "json")
    payload = json.loads(proc.stdout)
    assert payload["instances_rendered"] == ["ok"]
    assert payload["instances_not_rendered"] == ["broken"]


def test_an_instance_whose_template_is_missing_is_named_as_declared_not_unknown(
    tmp_path: Path,
) -> None:
    (tmp_path / "t.cu.jinja").write_text(ENTRY)
    (tmp_path / "kls.toml").write_text(
        f'[instances.i]\ntemplate = "gone.cu.jinja"\n{TENSORS}\n'
        f'[instances.ok]\ntemplate = "t.cu.jinja"\n{TENSORS}'
    )
    proc = run("render", str(tmp_path / "kls.toml"), "-i", "i")
    assert proc.returncode != 0
    assert "KT004" in proc.stderr and "template file not found: gone.cu.jinja" in proc.stderr
    assert "instance 'i' is declared in" in proc.stderr and "mend the problem above" in proc.stderr
    assert "no instance 'i'" not in proc.stderr
    proc = run("render", str(tmp_path / "kls.toml"), "-i", "j")
    assert "no instance 'j'" in proc.stderr  # a name nobody declared is still unknown


def test_python_file_without_kls_toml_gets_the_static_checks_in_its_strings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "file.py"
    path.write_text(GEMM_PY)
    proc = run("check", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{path}:3:21: KT101 error:" in proc.stdout  # in the file's own lines and columns
    assert 'template = "file.py::GEMM"' in proc.stderr and "add.cu.jinja" not in proc.stderr


# -- one JSON flag, help, -i, instances DIR ---------------------------------------------------

SOFTMAX = str(TEMPLATES / "softmax.cu.jinja")


@pytest.mark.parametrize("flag", [["--json"], ["--format", "json"]])
@pytest.mark.parametrize(
    "command",
    [
        ["check", SOFTMAX],
        ["info"],
        ["instances", SOFTMAX],
        ["render", SOFTMAX, "-i", "softmax_f32_4096x1024"],
        ["compile", SOFTMAX, "-i", "softmax_f32_4096x1024", "--nvcc", "/nonexistent/nvcc"],
        ["rules"],
        ["cache", "info"],
        ["docs", "kernel.ptr"],
    ],
    ids=lambda c: c[0] if isinstance(c, list) and c and not c[0].startswith("-") else None,
)
def test_every_command_takes_the_one_json_flag(
    command: list[str], flag: list[str], tmp_path: Path
) -> None:
    proc = run(*command, *flag, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    json.loads(proc.stdout)


def test_compile_json_says_what_nvcc_did(tmp_path: Path) -> None:
    proc = run(
        "compile", SOFTMAX, "-i", "softmax_f32_4096x1024", "--nvcc", "/nonexistent/nvcc", "--json"
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["ok"] is False and data["mode"] == "check"
    assert [f["code"] for f in data["findings"]] == ["KT604"]


def test_help_describes_positionals_and_exit_codes() -> None:
    top = run("--help").stdout
    assert "exit codes:" in top and "1-based" in top and "0-based" in top
    render = run("render", "--help").stdout
    assert "file.py::NAME" in render and "exit codes:" in render
    assert "may be left out" in render
    assert "kls.toml below" in run("check", "--help").stdout


def test_instance_may_be_left_out_when_the_template_has_one(tmp_path: Path) -> None:
    (tmp_path / "t.cu.jinja").write_text(ENTRY)
    _config(tmp_path, "t.cu.jinja")
    proc = run("render", str(tmp_path / "t.cu.jinja"))
    assert proc.returncode == 0, proc.stderr
    assert "PT_EXPORT int kls_i(" in proc.stdout


def test_instance_must_be_named_when_the_template_has_several() -> None:
    proc = run("render", SOFTMAX)
    assert proc.returncode == 2
    assert "has 2 instances: name one with -i" in proc.stderr
    assert "softmax_bf16_8192x4096, softmax_f32_4096x1024" in proc.stderr


def test_instances_of_a_folder_lists_every_config_below_it(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "t.cu.jinja").write_text(ENTRY)
        (tmp_path / sub / "kls.toml").write_text(
            f'[instances.{sub}_one]\ntemplate = "t.cu.jinja"\n{TENSORS}'
        )
    proc = run("instances", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["a_one", "b_one"]
    shipped = run("instances", str(TEMPLATES), "--json")
    assert "softmax_f32_4096x1024" in {r["name"] for r in json.loads(shipped.stdout)}


# -- caches -----------------------------------------------------------------------------------


def test_cache_info_and_clear_cover_every_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for name in ("compile/ab", "preamble/cd", "cutlass/4.2.0.0/emitted", "torch-source/x/torch"):
        (cache / name).mkdir(parents=True)
        (cache / name / "f.bin").write_bytes(b"x" * 1000)
    (cache / "torch-source" / "x" / "torch").chmod(0o555)  # unpacked read-only
    project = tmp_path / "proj"
    (project / ".kls" / "tune" / "i").mkdir(parents=True)
    (project / ".kls" / "tune" / "i" / "results.json").write_text("{}")
    (project / "kls.toml").write_text("")
    env = {**os.environ, "KLS_CACHE_DIR": str(cache)}
    info = subprocess.run(
        [KLS, "cache", "info", "--json"], cwd=project, env=env, capture_output=True, text=True
    )
    by_name = {c["name"]: c for c in json.loads(info.stdout)["caches"]}
    for name in ("compile", "preamble", "cutlass", "torch-source", "tune", "bench"):
        assert name in by_name, by_name
    assert by_name["preamble"]["files"] == 1 and by_name["preamble"]["bytes"] == 1000
    assert by_name["tune"]["files"] == 1
    clear = subprocess.run(
        [KLS, "cache", "clear"], cwd=project, env=env, capture_output=True, text=True
    )
    assert clear.returncode == 0, clear.stderr
    assert "removed preamble: 1 file(s)" in clear.stdout
    assert not any(p.is_file() for p in cache.rglob("*"))
    assert not (project / ".kls" / "tune").exists()


# -- bench: a GPU first, and no "verified" for what did not run ---------------------------------


def test_bench_without_a_gpu_builds_nothing_and_verifies_nothing(tmp_path: Path) -> None:
    from tests.conftest import gpu_available

    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    # nvcc that does not exist: had kls built first, it would say so instead.
    proc = run(
        "bench", SOFTMAX, "-i", "softmax_f32_4096x1024", "--nvcc", "/nonexistent/nvcc", "--json"
    )
    assert proc.returncode == 1
    (report,) = json.loads(proc.stdout)
    assert report["ok"] is False and report["verified"] is False
    assert "no usable NVIDIA GPU/driver" in report["message"]
    assert "nvcc" not in proc.stdout + proc.stderr


# -- check --compile: each instance as it finishes -----------------------------------------


def test_check_compile_prints_each_instance_as_it_finishes() -> None:
    proc = run("check", SOFTMAX, "--compile", "--nvcc", "/nonexistent/nvcc")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("kls: [")]
    assert {line.split("]")[0] for line in lines} == {"kls: [1/2", "kls: [2/2"}, proc.stderr
    assert {line.split("] ")[1].split(":")[0] for line in lines} == {
        "softmax_bf16_8192x4096",
        "softmax_f32_4096x1024",
    }
    assert all(line.endswith("failed (0.0 s)") for line in lines)


# -- one colon or two ---------------------------------------------------------------------


def test_a_wrong_colon_count_gets_a_hint(ws: Workspace) -> None:
    ws.write("g.py", GEMM_PY)
    ws.write("refs.py", "def add(A, B):\n    return A + B\n")
    found = ws.config(
        '[instances.a]\ntemplate = "g.py:GEMM"\n'
        '[instances.b]\ntemplate = "g.py::GEMM"\nreference = "refs.py::add"\n'
    ).findings
    messages = {f.code: f.message for f in found}
    assert 'two colons: "g.py::GEMM"' in messages["KT004"]
    assert 'one colon: "refs.py:add"' in messages["KT002"]


# -- docs -----------------------------------------------------------------------------------


def test_kls_docs_prints_the_template_api_or_a_section() -> None:
    whole = run("docs")
    assert whole.returncode == 0 and whole.stdout.startswith("# The template API")
    section = run("docs", "kernel.ptr").stdout
    assert section.count("#### `kernel.ptr(") == 2  # once per profile, each under its heading
    assert "## Profile `torch-2.11`" in section and "kernel.size(" not in section
    assert run("docs", "no-such-thing").returncode == 2


def test_the_scaffolds_kls_toml_points_at_a_command_that_exists() -> None:
    from kls.scaffold import __file__ as scaffold

    text = (Path(scaffold).parent / "default" / "kls.toml").read_text()
    assert "docs/TEMPLATE_API.md" not in text and "`kls docs`" in text


def test_template_api_says_per_kind_which_names_are_missing() -> None:
    from kls.docs import generate, sections

    gemm = sections(generate(), "Context names, kind `cutlass_gemm`")
    assert "`kernel_name` (write `kernel.kernel_name`)" in gemm


def test_kt102_for_a_kernel_attribute_written_bare_points_at_kernel(ws: Workspace) -> None:
    text = ENTRY.replace("return 0;\n}", "return {{dtype}};\n}", 1)
    found = [f for f in ws.check(text, tensors=TENSORS).findings if f.code == "KT102"]
    assert len(found) == 1 and "write kernel.dtype" in found[0].message
    assert "declare it under vars" not in found[0].message
