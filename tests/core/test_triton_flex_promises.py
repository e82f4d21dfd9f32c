"""Flex attention's promises (ROWS_GUARANTEED_SAFE, BLOCKS_ARE_CONTIGUOUS) decided from the
instance's mask and the kernel's BLOCK_N, as the kernels read them: a promise the mask breaks
is an error at its kls.toml line with the first row or block that breaks it, one kls cannot
decide is a warning, and `kls tune` offers only the promises the mask keeps, with Inductor's
own flex configs and USE_TMA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kls.instances import load_instances
from kls.instances.tune_table import TuneSpace
from kls.profiles import profile
from kls.profiles.base import ConfigSpace
from kls.profiles.triton.flex_space import flag_sets
from kls.tune.configs import ConfigTrial, candidates, varying_keys
from tests.upstream import needs_torch, needs_torch_source

ROWS, BLOCKS = "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS"
FORWARD, DECODE, BACKWARD = "flex_attention", "flex_decoding", "flex_attention_backward"


def causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q >= kv


def strictly_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q > kv  # query 0 sees no key


def window(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return (q >= kv) & (q - kv < 128)  # a sliding window of 128 keys


def prefix_and_window(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return (kv < 128) | ((q >= kv) & (q - kv < 512))  # "prefix LM + sliding window"


def global_queries(b: Any, h: Any, q: Any, kv: Any) -> Any:
    """Causal, and the first 128 queries see every key: each query block's key blocks are
    consecutive, but key block 1 is seen (whole) by query block 0 and then blocks 2 on."""
    return (q < 128) | (q >= kv)


def late_start(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q >= 128  # the first query block sees nothing: it runs no tile at all


def first_head_sees_all(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return (h == 0) | (q >= kv)


def _breaks(
    mask: Any, op: str = FORWARD, block_n: int = 64, sq: int = 1024, skv: int = 1024
) -> Any:
    import torch

    from kls.profiles.triton.flex_promises import promise_breaks

    return promise_breaks(torch, mask, sq, skv, op, block_n)


@needs_torch
def test_causal_keeps_both_promises_and_the_backward_reads_only_one() -> None:
    assert _breaks(causal) == {ROWS: None, BLOCKS: None}
    assert _breaks(causal, block_n=128, sq=1000, skv=777) == {ROWS: None, BLOCKS: None}
    assert _breaks(causal, BACKWARD) == {BLOCKS: None}  # its kernel never reads ROWS
    assert _breaks(None) == {ROWS: None, BLOCKS: None}  # no mask: flex's one-block mask


@needs_torch
def test_a_row_blind_in_its_first_tile_breaks_rows_safe_at_that_block_n() -> None:
    """The running maximum starts at -inf: a row with no key among the first BLOCK_N keys
    its block visits is NaN under the promise, even when later keys are its own."""
    at_64 = _breaks(window, sq=512, skv=512)[ROWS]
    assert at_64 == (
        "query row 191 sees no key in the first BLOCK_N=64 keys its block visits "
        "(keys 0-63, key block 0)"
    )
    assert _breaks(window, block_n=128, sq=512, skv=512)[ROWS] is not None
    assert "query row 255" in _breaks(window, block_n=128, sq=512, skv=512)[ROWS]
    assert "query row 0 sees no key" in _breaks(strictly_causal)[ROWS]
    assert "query row 703" in _breaks(prefix_and_window)[ROWS]
    # A query block with no block at all runs no tile: zeros either way, no promise broken.
    assert _breaks(late_start)[ROWS] is None


@needs_torch
def test_decode_asks_every_tile_of_a_partial_block_for_a_key() -> None:
    """Flex decoding restarts the running maximum at each split; kls does not model the
    splits, so one token against a causal cache (key 0 only) is not offered the promise."""
    decode = _breaks(causal, DECODE, sq=1, skv=4096)[ROWS]
    assert decode is not None and "keys 64-127" in decode and "split" in decode
    assert _breaks(lambda b, h, q, kv: kv >= 0, DECODE, sq=1, skv=4096)[ROWS] is None


@needs_torch
def test_decode_counts_a_tile_past_the_last_key_and_reads_its_splits() -> None:
    """One token (the 4000th) with a window of 128 keys: the partial list's last tile starts
    at key 4032, past the last key; a split that starts there sees nothing (NaN under the
    promise). Knowing the render's SPLIT_KV (4: splits of 16 tiles), only split starts count."""
    import torch

    from kls.profiles.triton.flex_promises import promise_breaks

    def last_window(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (kv <= 3999) & (3999 - kv < 128)

    any_split = promise_breaks(torch, last_window, 1, 4000, DECODE, 64)[ROWS]
    assert any_split is not None and "keys 4032-4095" in any_split
    assert promise_breaks(torch, last_window, 1, 4000, DECODE, 64, None, 4)[ROWS] is None
    assert promise_breaks(torch, last_window, 1, 4000, DECODE, 64, None, 66)[ROWS] is not None


@needs_torch
def test_a_document_mask_is_decided() -> None:
    """A mask that indexes a table it captures (documents) does not read the batch or head:
    it is decided like any other."""
    import torch

    documents = torch.repeat_interleave(torch.arange(4), 256)  # 4 documents of 256 tokens

    def same_document(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (documents[q] == documents[kv]) & (q >= kv)

    assert _breaks(same_document) == {ROWS: None, BLOCKS: None}


@needs_torch
def test_the_first_gap_in_a_block_list_is_named() -> None:
    assert _breaks(prefix_and_window)[BLOCKS] == (
        "query block 5 (queries 640-767) visits key block 5 after key block 1"
    )
    assert _breaks(global_queries)[BLOCKS] is None  # each query block's lists are consecutive
    assert _breaks(global_queries, BACKWARD)[BLOCKS] == (
        "key block 1 (keys 128-255) visits query block 2 after query block 0"
    )


@needs_torch
@pytest.mark.parametrize(("sq", "skv"), [(1024, 1024), (300, 300), (1000, 777), (1, 4096)])
@pytest.mark.parametrize("mask", [causal, prefix_and_window, global_queries, late_start])
def test_blocks_are_classed_as_create_block_mask_lists_them(sq: int, skv: int, mask: Any) -> None:
    """kls evaluates the mask a strip of 128 query rows at a time; its partial and full
    blocks are torch's own, padding past Sq and Skv included."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    from kls.profiles.triton.flex_promises import FULL, PARTIAL, block_classes

    classes = block_classes(torch, mask, sq, skv)
    torchs = create_block_mask(mask, None, None, sq, skv, device="cpu", BLOCK_SIZE=128)
    for kind, counts, indices in (
        (PARTIAL, torchs.kv_num_blocks, torchs.kv_indices),
        (FULL, torchs.full_kv_num_blocks, torchs.full_kv_indices),
    ):
        for qb in range(classes.shape[0]):
            listed = indices[0, 0, qb, : int(counts[0, 0, qb])].tolist()
            assert listed == np.flatnonzero(classes[qb] == kind).tolist(), (kind, qb)


@needs_torch
def test_a_mask_that_reads_the_head_is_undecided() -> None:
    from kls.profiles.triton.flex_promises import Undecided

    with pytest.raises(Undecided, match="reads the batch or head index"):
        _breaks(first_head_sees_all)


@needs_torch
def test_a_long_sequence_is_decided_in_strips() -> None:
    """16k x 16k keys: one strip of 128 rows at a time (create_block_mask would hold the
    whole mask; measured 3.2 GB and 3.7 s at this size)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert _breaks(causal, sq=16384, skv=16384) == {ROWS: None, BLOCKS: None}
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB


MODS = """def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def strictly_causal(b, h, q_idx, kv_idx):
    return q_idx > kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 128)


def per_head(b, h, q_idx, kv_idx):
    return (h == 0) | (q_idx >= kv_idx)
"""
TEMPLATES = {
    FORWARD: "torch:_inductor/kernel/flex/templates/flex_attention.py.jinja",
    BACKWARD: "torch:_inductor/kernel/flex/templates/flex_backwards.py.jinja",
}


def _flex_project(tmp_path: Path, mask: str, flags: str, op: str = FORWARD) -> Path:
    (tmp_path / "mods.py").write_text(MODS)
    shape = '{ shape = [1, 2, 512, 64], dtype = "bf16" }'
    blocks = "BLOCK_M = 64, BLOCK_N = 64" if op == FORWARD else "BLOCK_M1 = 32, BLOCK_N1 = 64"
    (tmp_path / "kls.toml").write_text(
        "[instances.flex]  # a small attention\n"
        f'profile = "triton"\ntemplate = "{TEMPLATES[op]}"\nmask_mod = "mods.py:{mask}"\n'
        f"tensors.q = {shape}\ntensors.k = {shape}\ntensors.v = {shape}\n"
        "num_warps = 4\nnum_stages = 1\n"
        f"vars = {{ {blocks}{flags} }}\n"
    )
    return tmp_path / "kls.toml"


def _check(config: Path) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(config), "--format", "json"],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = json.loads(done.stdout)["findings"] if done.stdout.strip() else []
    return done.returncode, [f for f in found if f["code"] in ("KT814", "KT815")]


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_a_broken_promise_is_an_error_at_its_kls_toml_line(tmp_path: Path) -> None:
    promises = f", {ROWS} = true, {BLOCKS} = true"
    code, found = _check(_flex_project(tmp_path, "window", promises))
    assert code == 1 and len(found) == 1, found  # the window's block lists are consecutive
    [broken] = found
    assert broken["code"] == "KT814" and broken["path"].endswith("kls.toml")
    assert broken["range"]["start"]["line"] == 9  # vars = { ... }
    assert f"{ROWS} = true promises" in broken["message"]
    assert "query row 191 sees no key in the first BLOCK_N=64 keys" in broken["message"]
    assert _check(_flex_project(tmp_path, "causal", promises)) == (0, [])
    # The backward kernel never reads ROWS_GUARANTEED_SAFE: no finding for it there.
    assert _check(_flex_project(tmp_path, "strictly_causal", promises, BACKWARD)) == (0, [])


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_a_promise_kls_cannot_decide_is_a_warning(tmp_path: Path) -> None:
    code, found = _check(_flex_project(tmp_path, "per_head", f", {ROWS} = true"))
    assert code == 0 and [f["code"] for f in found] == ["KT815"], found
    assert "reads the batch or head index" in found[0]["message"]


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_the_tune_space_offers_inductors_configs_and_only_the_kept_promises(
    tmp_path: Path,
) -> None:
    spec = load_instances(_flex_project(tmp_path, "causal", "")).instances["flex"]
    space = profile("triton").config_space(spec)
    assert space is not None and space.notes == [] and space.complete
    assert len(space.configs) == 6  # torch 2.11's max-autotune list: head dim 64, bf16, sm90
    assert {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} == set(space.configs[0])
    assert space.flag_sets == flag_sets([ROWS, BLOCKS])
    spec = load_instances(_flex_project(tmp_path, "window", "")).instances["flex"]
    windowed = profile("triton").config_space(spec)
    assert windowed is not None and windowed.flag_sets == flag_sets([BLOCKS])
    [note] = windowed.notes
    assert note.startswith(f"{ROWS} is not offered: the mask breaks it (query row")


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
    assert ConfigTrial({"BLOCK_M": 64, "USE_TMA": True}, "flags").label(("USE_TMA",)) == (
        "USE_TMA=True"
    )


def test_a_complete_config_is_tried_whole_even_where_the_instance_sets_less() -> None:
    """Flex's configs are whole kernel options: an instance that sets only BLOCK_N still tries
    Inductor's BLOCK_M values; mm's carry derived values and give only the instance's keys."""

    class Spec:
        num_warps, num_stages, variables = 4, 3, {"BLOCK_N": 64}

    inductor = [{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}]
    whole = candidates(Spec(), TuneSpace(), ConfigSpace(inductor, complete=True), None)  # type: ignore[arg-type]
    assert whole[-1].config["BLOCK_M"] == 128
    partial = candidates(Spec(), TuneSpace(), ConfigSpace(inductor), None)  # type: ignore[arg-type]
    assert all("BLOCK_M" not in t.config for t in partial)
