"""A config value Inductor's lowering replaces (flex's USE_TMA where TMA cannot be used) is
a KT816 warning at its kls.toml line, and `kls tune` times the kernel as made: a candidate
Inductor made like an earlier one is dropped, naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kls.profiles.triton.overridden import overridden
from kls.tune.configs import ConfigTrial, drop_repeats
from tests.upstream import needs_torch, needs_torch_source

MODULE = """
@triton.jit
def triton_tem_fused_0(arg_Q, arg_K):
    USE_TMA : tl.constexpr = False
    BLOCK_N : tl.constexpr = 64
    SM_SCALE : tl.constexpr = 0.125
    FLOAT32_PRECISION : tl.constexpr = 'tf32'
    ACC_TYPE : tl.constexpr = tl.float32
"""


def test_a_value_printed_otherwise_is_overridden() -> None:
    same = {
        "BLOCK_N": 64,
        "SM_SCALE": 0.125,
        "FLOAT32_PRECISION": "'tf32'",
        "ACC_TYPE": "tl.float32",
    }
    assert overridden(same, MODULE) == {}
    assert overridden({"ACC_TYPE": 3}, MODULE) == {}  # a name printed (tl.float32): not compared
    assert overridden({"USE_TMA": True, "BLOCK_N": 64}, MODULE) == {"USE_TMA": "False"}
    assert overridden({"BLOCK_N": 128, "MISSING": 1}, MODULE) == {"BLOCK_N": "64"}
    assert overridden({"USE_TMA": 0}, MODULE) == {"USE_TMA": "False"}  # a bool is no int


def test_a_candidate_made_like_an_earlier_one_is_dropped() -> None:
    own = ConfigTrial({"BLOCK_N": 64}, "current", made={"BLOCK_N": 64, "USE_TMA": False})
    turned_off = ConfigTrial(
        {"BLOCK_N": 64, "USE_TMA": False}, "flags", made={"BLOCK_N": 64, "USE_TMA": False}
    )
    wider = ConfigTrial({"BLOCK_N": 128}, "inductor", made={"BLOCK_N": 128, "USE_TMA": False})
    drop_repeats([own, turned_off, wider], ("BLOCK_N", "USE_TMA"))
    assert own.problem == "" and wider.problem == ""
    assert (
        turned_off.problem
        == "KT816: Inductor's lowering made the same kernel as the instance's own"
    )
    assert "made" not in turned_off.to_json()


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_use_tma_turned_off_for_a_misaligned_head_dim_is_a_warning(tmp_path: Path) -> None:
    """Head dim 36 in bf16 is 72 bytes a row, not a multiple of 16: Inductor's can_use_tma
    says no and the kernel is made with USE_TMA = False."""
    (tmp_path / "mods.py").write_text("def causal(b, h, q, kv):\n    return q >= kv\n")
    shape = '{ shape = [1, 2, 256, 36], dtype = "bf16" }'
    (tmp_path / "kls.toml").write_text(
        "[instances.flex]\nprofile = 'triton'\n"
        'template = "torch:_inductor/kernel/flex/templates/flex_attention.py.jinja"\n'
        'mask_mod = "mods.py:causal"\n'
        f"tensors.q = {shape}\ntensors.k = {shape}\ntensors.v = {shape}\n"
        "num_warps = 4\nnum_stages = 2\nvars = { BLOCK_M = 64, BLOCK_N = 64, USE_TMA = true }\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", "kls.toml", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # a warning
    [warning] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "KT816"]
    assert warning["severity"] == "warning" and warning["range"]["start"]["line"] == 9
    assert "USE_TMA = False, not True as kls.toml says" in warning["message"]
