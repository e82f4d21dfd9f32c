"""The CLI through the installed console script, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import GEMM_TENSORS, TEMPLATES

KLS = str(Path(sys.executable).parent / "kls")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KLS, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_check_shipped_templates_is_clean() -> None:
    proc = run("check", str(TEMPLATES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s)" in proc.stderr


def test_check_reports_like_a_compiler_and_fails(tmp_path: Path) -> None:
    (tmp_path / "t.cu.jinja").write_text("{{template.header()}}\n")
    (tmp_path / "kls.toml").write_text(f'[instances.i]\ntemplate = "t.cu.jinja"\n{GEMM_TENSORS}')
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1
    assert f"{tmp_path / 't.cu.jinja'}:1:3: KT303 error:" in proc.stdout


def test_check_json(tmp_path: Path) -> None:
    (tmp_path / "t.cu.jinja").write_text("{% if %}\n")
    proc = run("check", "--format", "json", str(tmp_path))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["findings"][0]["code"] == "KT101"
    assert data["findings"][0]["range"]["start"] == {"line": 0, "column": 0}


def test_instances_lists_names_first() -> None:
    proc = run("instances", str(TEMPLATES / "softmax.cu.jinja"))
    assert proc.returncode == 0
    names = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    assert names == ["softmax_bf16_8192x4096", "softmax_f32_4096x1024"]


def test_render_prints_cuda() -> None:
    proc = run(
        "render", str(TEMPLATES / "cutlass3x_gemm.cu.jinja"), "--instance", "sm90_bf16_4096_bias"
    )
    assert proc.returncode == 0, proc.stderr
    assert 'extern "C" {' in proc.stdout
    assert "PT_EXPORT int kls_sm90_bf16_4096_bias(const bfloat16* Bias" in proc.stdout


def test_render_unknown_instance_suggests() -> None:
    proc = run("render", str(TEMPLATES / "softmax.cu.jinja"), "-i", "softmax_f32_4096x1023")
    assert proc.returncode == 2
    assert "did you mean 'softmax_f32_4096x1024'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_broken_config_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "t.cu.jinja").write_text("x\n")
    (tmp_path / "kls.toml").write_text('[instances.i]\ntemplate = "t.cu.jinja"\nbeta = [\n')
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1
    assert "KT001" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_missing_path_and_no_config(tmp_path: Path) -> None:
    proc = run("check", str(tmp_path / "nope"))
    assert proc.returncode == 1 and "no such file" in proc.stdout
    (tmp_path / "t.cu.jinja").write_text("x\n")
    proc = run("instances", str(tmp_path / "t.cu.jinja"))
    assert proc.returncode == 2 and "no kls.toml" in proc.stderr


def test_empty_and_huge_templates(tmp_path: Path) -> None:
    (tmp_path / "empty.cu.jinja").write_text("")
    (tmp_path / "huge.cu.jinja").write_text("x" * (11 * 1024 * 1024))
    proc = run("check", str(tmp_path))
    assert "huge.cu.jinja:1:1: KT105" in proc.stdout
    assert "empty.cu.jinja" not in proc.stdout


def test_check_a_config_file_checks_its_instances() -> None:
    from kls.instances import load_instances

    config = TEMPLATES.parent / "benchmarks" / "tune_sm90.toml"
    # Its templates are in ../templates, outside its own folder: an extra root (issue 9).
    count = len(load_instances(config, extra_roots=[TEMPLATES]).instances)
    assert count > 0
    proc = run("check", str(config), "--extra-root", str(TEMPLATES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{count} instance(s) rendered" in proc.stderr
