"""Flex attention's promises (ROWS_GUARANTEED_SAFE, BLOCKS_ARE_CONTIGUOUS) decided from the
instance's mask: a promise the mask breaks is an error at its kls.toml line, with the first
row or block that breaks it, and `kls tune` offers only the promises the mask keeps, with
Inductor's own flex configs and USE_TMA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kls.instances import load_instances
from kls.instances.tune_table import TuneSpace
from kls.profiles import profile
from kls.profiles.base import ConfigSpace
from kls.profiles.triton.flex_space import flag_sets
from kls.tune.configs import ConfigTrial, candidates, varying_keys
from tests.upstream import needs_torch, needs_torch_source

ROWS, BLOCKS = "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS"


def causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q >= kv


def strictly_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q > kv  # query 0 sees no key


def prefix_and_window(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return (kv < 128) | ((q >= kv) & (q - kv < 512))  # "prefix LM + sliding window"


def global_queries(b: Any, h: Any, q: Any, kv: Any) -> Any:
    """Causal, and the first 128 queries see every key: each query block's key blocks are
    consecutive, but key block 1 is seen (whole) by query block 0 and then blocks 2 on."""
    return (q < 128) | (q >= kv)


def late_start(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q >= 300  # the whole first query block sees nothing


def _breaks(mask: Any, sq: int = 1024, skv: int = 1024, backward: bool = False) -> Any:
    import torch

    from kls.profiles.triton.flex_promises import promise_breaks

    return promise_breaks(torch, mask, sq, skv, backward)


@needs_torch
def test_causal_keeps_both_promises_in_forward_decode_and_backward() -> None:
    assert _breaks(causal) == {ROWS: None, BLOCKS: None}
    assert _breaks(causal, backward=True) == {ROWS: None, BLOCKS: None}
    assert _breaks(causal, sq=1) == {ROWS: None, BLOCKS: None}  # decode: one query
    assert _breaks(None) == {ROWS: None, BLOCKS: None}  # no mask: flex's full one


@needs_torch
def test_the_first_row_and_block_that_break_a_promise_are_named() -> None:
    assert _breaks(strictly_causal) == {ROWS: "query row 0 attends to no key", BLOCKS: None}
    late = _breaks(late_start)[ROWS]
    assert late == "query row 0 attends to no key (its whole block is masked)"
    window = _breaks(prefix_and_window)
    assert window[ROWS] is None
    assert window[BLOCKS] == (
        "query block 5 (queries 640-767) visits key block 5 after key block 1"
    )
    # Only the backward walks key blocks' query lists.
    assert _breaks(global_queries)[BLOCKS] is None
    assert _breaks(global_queries, backward=True)[BLOCKS] == (
        "key block 1 (keys 128-255) visits query block 2 after query block 0"
    )


MODS = """def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def strictly_causal(b, h, q_idx, kv_idx):
    return q_idx > kv_idx
"""


def _flex_project(tmp_path: Path, mask: str, flags: str) -> Path:
    (tmp_path / "mods.py").write_text(MODS)
    template = "torch:_inductor/kernel/flex/templates/flex_attention.py.jinja"
    shape = '{ shape = [1, 2, 512, 64], dtype = "bf16" }'
    (tmp_path / "kls.toml").write_text(
        "[instances.flex]  # a small causal-like attention\n"
        f'profile = "triton"\ntemplate = "{template}"\nmask_mod = "mods.py:{mask}"\n'
        f"tensors.q = {shape}\ntensors.k = {shape}\ntensors.v = {shape}\n"
        "num_warps = 4\nnum_stages = 3\n"
        f"vars = {{ BLOCK_M = 64, BLOCK_N = 64{flags} }}\n"
    )
    return tmp_path / "kls.toml"


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(config), "--format", "json"],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_a_broken_promise_is_an_error_at_its_kls_toml_line(tmp_path: Path) -> None:
    promises = f", {ROWS} = true, {BLOCKS} = true"
    config = _flex_project(tmp_path, "strictly_causal", promises)
    done = _check(config)
    assert done.returncode == 1, done.stdout + done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "KT814"]
    assert len(found) == 1, found  # the window promise holds for this mask
    [broken] = found
    assert broken["path"].endswith("kls.toml") and broken["range"]["start"]["line"] == 9  # vars =
    assert f"{ROWS} = true promises" in broken["message"]
    assert "query row 0 attends to no key" in broken["message"]
    # The same promises over a causal mask: kept, no finding.
    done = _check(_flex_project(tmp_path, "causal", promises))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_the_tune_space_offers_inductors_configs_and_only_the_kept_promises(
    tmp_path: Path,
) -> None:
    spec = load_instances(_flex_project(tmp_path, "causal", "")).instances["flex"]
    space = profile("triton").config_space(spec)
    assert space is not None and space.notes == []
    assert len(space.configs) == 6  # torch 2.11's max-autotune list: head dim 64, bf16, sm90
    assert {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} == set(space.configs[0])
    assert space.flag_sets == flag_sets([ROWS, BLOCKS])
    spec = load_instances(_flex_project(tmp_path, "strictly_causal", "")).instances["flex"]
    strict = profile("triton").config_space(spec)
    assert strict is not None and strict.flag_sets == flag_sets([BLOCKS])
    assert strict.notes == [
        f"{ROWS} is not offered: the mask breaks it (query row 0 attends to no key)"
    ]


def test_flags_overlay_every_config_once_and_show_where_they_differ() -> None:
    assert flag_sets([ROWS]) == [{}, {ROWS: True}, {"USE_TMA": True}, {"USE_TMA": True, ROWS: True}]

    class Spec:
        num_warps, num_stages, variables = 4, 3, {"BLOCK_M": 64}

    found = ConfigSpace(
        [
            {"BLOCK_M": 64, "num_warps": 4, "num_stages": 3},
            {"BLOCK_M": 128, "num_warps": 4, "num_stages": 3},
        ],
        flag_sets([ROWS]),
    )
    trials = candidates(Spec(), TuneSpace(), found, None)  # type: ignore[arg-type]
    # Inductor's first config is the instance's own: its four flag sets are not tried again.
    assert [t.origin for t in trials] == ["current"] + ["flags"] * 3 + ["inductor"] * 4
    assert len({json.dumps(t.config, sort_keys=True) for t in trials}) == 8
    assert varying_keys(trials) == ("BLOCK_M", ROWS, "USE_TMA")
    assert trials[0].label(varying_keys(trials)) == "BLOCK_M=64"  # a flag it lacks is not shown
    assert (
        ConfigTrial({"BLOCK_M": 64, "USE_TMA": True}, "flags").label(("USE_TMA",)) == "USE_TMA=True"
    )
