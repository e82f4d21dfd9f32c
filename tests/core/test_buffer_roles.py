"""render_gemm_arguments takes X, W, Bias, Y by role: another buffer in a role's place is
KT307 at that argument, naming what it got and what the role wants (before nvcc's
`no instance of constructor "cute::tuple<...>"` deep in the argument sub-template)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kls.checks.run import check_paths
from tests.conftest import TEMPLATES, codes
from tests.upstream import needs_torch_source

CALL = "X, W, Bias, Y, alpha, beta, kernel"
SWAPPED = "W, X, Bias, Y, alpha, beta, kernel"


def _ws(tmp_path: Path, template: str, instance: str, text_edit: tuple[str, str]) -> Path:
    """The shipped templates with one instance table kept, its template edited."""
    for name in TEMPLATES.iterdir():
        if name.suffix == ".jinja":
            shutil.copy(name, tmp_path / name.name)
    path = tmp_path / template
    old, new = text_edit
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    text = (TEMPLATES / "kls.toml").read_text()
    start = text.index(f"[instances.{instance}]")
    end = text.find("\n[", start + 1)
    (tmp_path / "kls.toml").write_text('[defaults]\narch = "90a"\n' + text[start:end] + "\n")
    return path


def test_x_and_w_swapped_in_a_2023_gemm(tmp_path: Path) -> None:
    path = _ws(tmp_path, "cutlass3x_gemm.cu.jinja", "sm90_bf16_4096", (CALL, SWAPPED))
    result = check_paths([tmp_path])
    found = [f for f in result.findings if f.code == "KT307"]
    assert len(found) == 2, [f.format_line() for f in result.findings]
    x, w = found
    line = path.read_text().split("\n")
    assert x.path == str(path) and line[x.range.start.line][x.range.start.column :].startswith(
        "W, X"
    )  # at the argument in X's place
    assert line[w.range.start.line][w.range.start.column :].startswith("X, Bias")
    assert "got buffer 'W' (bfloat16[4096x4096] stride=(1, 4096)) as X" in x.message
    assert "which is buffer 'X' (bfloat16[4096x4096] stride=(4096, 1))" in x.message
    assert "pass X, W, Bias, Y in this order" in x.message


def test_a_bias_where_the_instance_has_none(tmp_path: Path) -> None:
    _ws(
        tmp_path,
        "cutlass2x_gemm.cu.jinja",
        "sm80_bf16_4096",
        (CALL, "X, W, X, Y, alpha, beta, kernel"),
    )
    found = [f for f in check_paths([tmp_path]).findings if f.code == "KT307"]
    assert len(found) == 1
    assert "got buffer 'X'" in found[0].message and "as Bias" in found[0].message
    assert "which is None (the instance has no tensor of that role)" in found[0].message


def test_the_shipped_order_is_clean(tmp_path: Path) -> None:
    _ws(tmp_path, "cutlass3x_gemm.cu.jinja", "sm90_bf16_4096_bias", (CALL, CALL))
    assert "KT307" not in codes(check_paths([tmp_path]).findings)


TORCH211 = """\
{{kernel_call_signature}} {
{{template.render_gemm_arguments(argument_template, epilogue_template, should_swap_xw,
    W, X, Bias, Y, alpha, beta, kernel, epilogue_args)}}
}
"""
GEMM = "torch:_inductor/codegen/cutlass/gemm_template.py"


@needs_torch_source
def test_x_and_w_swapped_in_a_torch211_gemm(tmp_path: Path) -> None:
    (tmp_path / "t.cu.jinja").write_text(TORCH211)
    text = (TEMPLATES / "kls.toml").read_text()
    start = text.index("[instances.torch211_sm90_bf16_4096_bias]")
    table = text[start : text.index("\n[", start + 1)]
    table = table.replace(f'"{GEMM}::GEMM_TEMPLATE_CUTLASS_3X"', '"t.cu.jinja"')
    (tmp_path / "kls.toml").write_text('[defaults]\narch = "90a"\n' + table + "\n")
    found = [f for f in check_paths([tmp_path]).findings if f.code == "KT307"]
    assert [f.range.start.line for f in found] == [2, 2], [f.format_line() for f in found]
    assert [f.range.start.column for f in found] == [4, 7]
    assert (
        "got buffer 'W'" in found[0].message and "as X (the GEMM's A operand)" in found[0].message
    )
