"""`kls ops`: the ops Inductor would accept for an instance's tensors, arch and level,
filterable, with the reason each other op is refused (text and JSON)."""

from __future__ import annotations

import json

from tests.conftest import TEMPLATES
from tests.core.test_cli import run

CONFIG = str(TEMPLATES / "kls.toml")


def test_ops_lists_accepted_ops_for_the_instance() -> None:
    proc = run("ops", CONFIG, "-i", "sm90_bf16_4096", "--contains", "pingpong")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all("pingpong" in line and "_bf16_bf16_f32_" in line for line in lines)
    assert "refused for instance 'sm90_bf16_4096'" in proc.stderr


def test_ops_json_says_why_each_other_op_is_refused() -> None:
    args = ("ops", CONFIG, "-i", "sm90_bf16_4096", "--refused", "--format", "json")
    data = json.loads(run(*args, "--contains", "_f16_f16_f32_f16_f16_").stdout)
    assert data["accepted"] == [] and data["refused"]
    reasons = {r["reason"] for r in data["refused"]}
    assert "its A element (for tensor X) is f16; tensor X is bfloat16" in reasons
    names = {a["op"] for a in json.loads(run(*args).stdout)["accepted"]}
    op = "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_void_bf16_128x256x64_2x1x1_0_tnn_align8"
    assert any(n.startswith(op) for n in names)
