"""Tensors that do not fit the op are KT005 at kls.toml's op line, naming the tensor, the op's
element type or layout and the tensor's (Inductor's filter would never pick the op); an
unknown op's "did you mean" draws from the ops Inductor accepts for the instance's dtypes."""

from __future__ import annotations

from pathlib import Path

from kls.checks.run import check_paths
from tests.conftest import TEMPLATES, only
from tests.upstream import needs_torch_source

BF16_OP = (
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_2x1x1_0_tnn_align8_"
    "warpspecialized_cooperative_epi_tma"
)


def _one(tmp_path: Path, instance: str, edit: tuple[str, str]) -> tuple[Path, int]:
    """kls.toml with the shipped `instance` only, `edit` applied; the op line (0-based)."""
    text = (TEMPLATES / "kls.toml").read_text()
    start = text.index(f"[instances.{instance}]")
    table = text[start : text.index("\n[", start + 1)]
    assert edit[0] in table
    table = table.replace(*edit)
    for name in TEMPLATES.glob("*.jinja"):
        (tmp_path / name.name).write_text(name.read_text())
    body = '[defaults]\narch = "90a"\n' + table + "\n"
    (tmp_path / "kls.toml").write_text(body)
    line = next(i for i, s in enumerate(body.split("\n")) if s.startswith(("op =", "op_filter")))
    return tmp_path / "kls.toml", line


W_BF16 = 'tensors.W = { shape = [4096, 4096], dtype = "bf16"'
W_F16 = 'tensors.W = { shape = [4096, 4096], dtype = "f16"'


def test_w_f16_against_a_bf16_op_2023(tmp_path: Path) -> None:
    config, line = _one(tmp_path, "sm90_bf16_4096", (W_BF16, W_F16))
    f = only(check_paths([config]).findings, "KT005")
    assert f.path == str(config) and f.range.start.line == line
    assert f"op '{BF16_OP}' does not fit the tensors" in f.message
    assert "its B element (for tensor W) is bf16; tensor W is float16" in f.message


@needs_torch_source
def test_w_f16_against_a_bf16_op_torch211(tmp_path: Path) -> None:
    config, line = _one(tmp_path, "torch211_sm90_bf16_4096", (W_BF16, W_F16))
    f = only(check_paths([config]).findings, "KT005")
    assert f.path == str(config) and f.range.start.line == line
    assert "its B element (for tensor W) is bf16; tensor W is float16" in f.message
    assert "Inductor would never pick it" in f.message


def test_an_op_filter_that_picks_an_nnn_op(tmp_path: Path) -> None:
    config, line = _one(
        tmp_path, "sm90_bf16_4096", (f'op = "{BF16_OP}"', 'op_filter = { contains = ["_nnn_"] }')
    )
    f = only(check_paths([config]).findings, "KT005")
    assert f.range.start.line == line
    assert "layouts 'nn' but X/W are 'tn'" in f.message


def test_a_typo_in_an_f16_op_suggests_an_f16_op(tmp_path: Path) -> None:
    f16_op = BF16_OP.replace("bf16", "f16")
    edit = (f'op = "{BF16_OP}"', f'op = "{f16_op.replace("cooperative", "cooprative")}"')
    config, _ = _one(tmp_path, "sm90_bf16_4096", edit)
    text = config.read_text().replace('dtype = "bf16"', 'dtype = "f16"')
    config.write_text(text)
    f = only(check_paths([config]).findings, "KT005")
    assert f"(did you mean '{f16_op}'?)" in f.message, f.message
