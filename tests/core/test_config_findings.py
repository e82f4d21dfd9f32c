"""Findings about kls.toml lines reach `kls check` (text, JSON, exit code): an unknown op, an
input_reorder the template never passes or that does not fit; every kls.toml below a folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kls.checks.run import check_paths
from tests.conftest import TEMPLATES, Workspace, codes, only
from tests.core.test_cli import run
from tests.upstream import needs_torch_source

OP = "warpspecialized_cooperative_epi_tma"
TYPO = "warpspecialized_pingpng_epi_tma"


def _misspell_op(workspace: Path, instance: str) -> int:
    """Misspell the op of `instance` in the workspace's kls.toml; the op's 0-based line."""
    config = workspace / "kls.toml"
    lines = config.read_text().split("\n")
    start = lines.index(f"[instances.{instance}]")
    line = next(i for i in range(start, len(lines)) if lines[i].startswith("op = "))
    lines[line] = lines[line].replace(OP, TYPO)
    config.write_text("\n".join(lines))
    return line


def test_unknown_op_reaches_kls_check_text_and_exit_code(workspace: Path) -> None:
    line = _misspell_op(workspace, "sm90_bf16_4096")
    proc = run("check", str(workspace))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{workspace / 'kls.toml'}:{line + 1}:1: KT005 error: unknown CUTLASS op" in proc.stdout
    assert "[sm90_bf16_4096]" in proc.stdout
    assert "1 did not render" in proc.stderr


def test_unknown_op_reaches_kls_check_json(workspace: Path) -> None:
    line = _misspell_op(workspace, "sm90_bf16_4096")
    proc = run("check", "--format", "json", str(workspace))
    assert proc.returncode == 1
    found = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "KT005"]
    assert len(found) == 1, found
    assert found[0]["path"] == str(workspace / "kls.toml")
    assert found[0]["range"]["start"]["line"] == line  # JSON positions are 0-based
    assert found[0]["instance"] == "sm90_bf16_4096"


def test_an_info_note_about_kls_toml_keeps_exit_code_0(workspace: Path) -> None:
    # Without a torch source the torch-2.11 instances are skipped with a KT007 info note.
    proc = run("check", str(workspace), "--torch-source", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KT007 info" in proc.stdout


# -- input_reorder: kls.toml against the def_kernel call ---------------------------------------

ENTRY = """\
{{template.header().getvalue()}}
{{template.globals().getvalue()}}
extern "C" {
{{kernel.def_kernel(inputs=[X, W], outputs=[Y], names_str="X, W, Y")}} {
  if (workspace_size) { *workspace_size = 0; return 0; }
  const void* a = {{kernel.ptr(X)}};
  const void* b = {{kernel.ptr(W)}};
  void* c = {{kernel.ptr(Y)}};
  return 0;
}
}
"""
TENSORS = """\
tensors.X = { shape = [256, 128], dtype = "bf16", layout = "row" }
tensors.W = { shape = [128, 64], dtype = "bf16", layout = "col" }
tensors.Y = { shape = [256, 64], dtype = "bf16", layout = "row" }
"""


def _project(root: Path, template: str, extra: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "t.cu.jinja").write_text(template)
    config = root / "kls.toml"
    config.write_text(f'[instances.i]\ntemplate = "t.cu.jinja"\n{extra}\n{TENSORS}')
    return config


def test_reorder_in_kls_toml_that_def_kernel_never_gets(ws: Workspace) -> None:
    result = ws.check(ENTRY, extra="input_reorder = [1, 0]", tensors=TENSORS)
    f = only(result.config_findings, "KT214")
    assert f.path == str(ws.root / "kls.toml") and f.range.start.line == 2
    assert "called without input_reorder" in f.message and "t.cu.jinja:4" in f.message
    assert f.related and f.related[0].range.start.line == 3
    assert "KT214" not in codes(result.findings)  # shown on kls.toml, not on the template


def test_reorder_passed_through_is_no_disagreement(ws: Workspace) -> None:
    text = ENTRY.replace(
        'names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=input_reorder)'
    )
    result = ws.check(text, extra="input_reorder = [1, 0]", tensors=TENSORS)
    assert result.findings == [] and result.config_findings == []


def test_reorder_another_list_than_kls_toml_says(ws: Workspace) -> None:
    text = ENTRY.replace('names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=[0, 1])')
    result = ws.check(text, extra="input_reorder = [1, 0]", tensors=TENSORS)
    assert "with input_reorder [0, 1]" in only(result.config_findings, "KT214").message


def test_reorder_disagreement_fails_kls_check(tmp_path: Path) -> None:
    config = _project(tmp_path, ENTRY, "input_reorder = [1, 0]")
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1
    assert f"{config}:3:1: KT214 error:" in proc.stdout


def test_reorder_longer_than_the_inputs(ws: Workspace) -> None:
    text = ENTRY.replace(
        'names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=input_reorder)'
    )
    result = ws.check(text, extra="input_reorder = [0, 1, 2]", tensors=TENSORS)
    f = only(result.findings, "KT202")
    assert "3 entries" in f.message and "2 inputs" in f.message
    assert f.range.start.line == 3


@needs_torch_source
def test_reorder_that_does_not_fit_torch211s_own_def_kernel_is_at_kls_toml(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kls.toml"
    text = (TEMPLATES / "kls.toml").read_text()
    start = text.index("[instances.torch211_sm90_bf16_4096_bias]")
    end = text.index("\n[", start + 1)
    table = text[start:end].replace("input_reorder = [2, 0, 1]", "input_reorder = [2, 0, 1, 3]")
    config.write_text(table + "\n")
    line = table.split("\n").index("input_reorder = [2, 0, 1, 3]")
    result = check_paths([config])
    f = only(result.findings, "KT202")
    assert f.path == str(config) and f.range.start.line == line
    assert "4 entries" in f.message


# -- kls check DIR: every config below DIR -----------------------------------------------------


def test_check_dir_reads_every_kls_toml_below_it(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    broken = ENTRY.replace("{{kernel.ptr(W)}}", "{{kernel.ptr(Wt)}}")
    _project(proj / "a", broken, "")
    _project(proj / "b", ENTRY, "")
    _project(proj / "c" / "deep", ENTRY, "")
    # Not the project's own: a virtual environment, node_modules, kls's cache, a hidden
    # folder and a folder git ignores.
    for skipped in (".venv/lib", "node_modules/pkg", ".kls", ".hidden", "build"):
        _project(proj / skipped, broken, "")
    (proj / ".gitignore").write_text("build/\n")
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    proc = run("check", str(proj))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if "KT102" in line]
    assert len(errors) == 1 and errors[0].startswith(str(proj / "a" / "t.cu.jinja")), errors
    assert "2 instance(s) rendered, 1 did not render" in proc.stderr
    assert "3 config(s) read" in proc.stderr
    data = json.loads(run("check", "--format", "json", str(proj)).stdout)
    assert len(data["configs"]) == 3


# -- tune tables: what each kind of instance's tune reads -------------------------------------


def test_a_tune_table_says_what_its_instance_kind_never_reads(tmp_path: Path) -> None:
    """A plain CUDA instance has nothing `kls tune` can search; a Triton instance's tune does
    not read a GEMM table's shapes or dispatch: warnings at the table and at those keys."""
    from kls.instances import load_instances

    (tmp_path / "t.cu.jinja").write_text(ENTRY)
    (tmp_path / "k.py.jinja").write_text("{{def_kernel('A')}}\n")
    config = tmp_path / "kls.toml"
    config.write_text(
        f'[instances.plain]\ntemplate = "t.cu.jinja"\n{TENSORS}\n'
        "[instances.plain.tune]\nTHREADS = [128, 256]\n\n"
        '[instances.tri]\nprofile = "triton"\ntemplate = "k.py.jinja"\n'
        'tensors.A = { shape = [64, 64], dtype = "bf16" }\n'
        'tensors.out = { shape = [64, 64], dtype = "bf16" }\n\n'
        "[instances.tri.tune]\nBLOCK_M = [32, 64]\n"
        'dispatch = "m"\nshapes = [[128, 64, 64], [256, 64, 64]]\n'
    )
    found = load_instances(config).findings
    assert {f.severity.name for f in found} == {"WARNING"}, [f.format_line() for f in found]
    lines = config.read_text().split("\n")
    by_line = {lines[f.range.start.line]: f.message for f in found}
    assert "has neither, so `kls tune` refuses it" in by_line["[instances.plain.tune]"]
    assert "'dispatch' is for a CUTLASS GEMM's tune table" in by_line['dispatch = "m"']
    assert (
        "'shapes' is for a CUTLASS GEMM's tune table"
        in by_line["shapes = [[128, 64, 64], [256, 64, 64]]"]
    )
    assert len(found) == 3


def test_a_bad_tune_table_key_is_found_at_its_own_line(tmp_path: Path) -> None:
    from kls.instances import load_instances

    (tmp_path / "t.cu.jinja").write_text(ENTRY)
    config = tmp_path / "kls.toml"
    config.write_text(
        f'[instances.g]\ntemplate = "t.cu.jinja"\nop_filter = {{ contains = ["x"] }}\n{TENSORS}\n'
        '[instances.g.tune]\nswizzle = [1, 2]\ndispatch = "n"\nshapes = [[128, 64, 64]]\n'
    )
    found = [f for f in load_instances(config).findings if f.code == "KT002"]
    assert len(found) == 1, [f.format_line() for f in found]
    lines = config.read_text().split("\n")
    assert lines[found[0].range.start.line] == 'dispatch = "n"'
