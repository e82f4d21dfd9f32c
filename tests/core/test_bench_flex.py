"""`kls bench` of a flex attention instance, the parts that need no GPU: the launch Inductor's
lowering gives (every buffer it makes, the block mask's tensors marked to be filled, the
grid), the job built from it, the block mask made from the instance's mask_mod fitting the
kernel's arguments exactly, and the reference (torch's flex_attention in float32) agreeing
with softmax attention written out. On the GPU the worker does the same with CUDA tensors
(tests/gpu)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kls.bench.flex import block_mask, expected_output, fill_blocks
from kls.bench.launch import StageError
from kls.bench.run import BenchOptions, make_module_job
from kls.instances import load_instances
from kls.profiles import profile
from kls.profiles.triton.flex_render import static_view
from kls.sandbox.workers import render_isolated
from tests.upstream import needs_torch, needs_torch_source

MODS = """def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.01
"""
FORWARD = "torch:_inductor/kernel/flex/templates/flex_attention.py.jinja"
DECODE = "torch:_inductor/kernel/flex/templates/flex_decode.py.jinja"
BACKWARD = "torch:_inductor/kernel/flex/templates/flex_backwards.py.jinja"


def _project(tmp_path: Path, template: str, mods: str, q: list[int], kv: list[int]) -> Any:
    (tmp_path / "mods.py").write_text(MODS)
    (tmp_path / "kls.toml").write_text(
        f'[instances.flex]\nprofile = "triton"\ntemplate = "{template}"\n{mods}\n'
        f'tensors.q = {{ shape = {q}, dtype = "bf16" }}\n'
        f'tensors.k = {{ shape = {kv}, dtype = "bf16" }}\n'
        f'tensors.v = {{ shape = {kv}, dtype = "bf16" }}\n'
        "num_warps = 4\nnum_stages = 3\nvars = { BLOCK_N = 64 }\n"
    )
    return load_instances(tmp_path / "kls.toml").instances["flex"]


def _rendered(spec: Any) -> Any:
    rendered = render_isolated(spec, {})
    assert rendered.ok, [f.message for f in rendered.findings]
    return rendered


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_the_forward_launch_names_every_buffer_and_the_job_allocates_them(
    tmp_path: Path,
) -> None:
    mods = 'mask_mod = "mods.py:causal"\nscore_mod = "mods.py:bias"'
    spec = _project(tmp_path, FORWARD, mods, [2, 4, 384, 64], [2, 4, 384, 64])
    rendered = _rendered(spec)
    launch = profile("triton").bench_launch(spec, rendered)
    assert launch is not None
    assert launch["tensors"] == [
        "q", "k", "v", "LSE", "MAX",
        "KV_NUM_BLKS", "KV_IDX", "FULL_KV_NUM_BLKS", "FULL_KV_IDX", "out",
    ]  # fmt: skip
    made = launch["made"]
    assert made["KV_IDX"] == {"shape": [1, 1, 3, 3], "stride": [9, 9, 3, 1], "dtype": "int32",
                              "fill": "block:kv_indices"}  # fmt: skip
    assert made["LSE"]["fill"] == "" and made["LSE"]["dtype"] == "float32"
    assert made["out"]["shape"] == [2, 4, 384, 64] and made["out"]["dtype"] == "bfloat16"
    assert launch["extra_args"][-3:] == [384 // 128, 2, 4]  # grid: BLOCK_M (128) blocks, B, H
    assert launch["flex"]["mask_mod"].endswith("mods.py:causal")
    assert profile("triton").bench_reference(spec, rendered) == "flex"
    job = make_module_job(spec, rendered, launch, BenchOptions())
    assert job.reference == "flex" and job.params == launch["tensors"]
    assert job.output().name == "out"
    assert job.tensors["KV_NUM_BLKS"] is not None and job.tensors["KV_NUM_BLKS"].dtype == "int32"
    assert job.tensors["q"] is not None and not job.tensors["q"].is_output


@pytest.mark.slow
@needs_torch_source
@needs_torch
@pytest.mark.parametrize("mods", ['mask_mod = "mods.py:causal"', ""])
def test_the_block_mask_fills_the_kernels_arguments_exactly(tmp_path: Path, mods: str) -> None:
    """The mask the worker makes has the shapes Inductor's lowering gave the kernel (with a
    mask_mod, and flex's own one-block mask without): a fill, not a guess."""
    import torch

    spec = _project(tmp_path, FORWARD, mods, [1, 2, 384, 64], [1, 2, 384, 64])
    launch = profile("triton").bench_launch(spec, _rendered(spec))
    assert launch is not None
    views = {
        name: torch.zeros(m["shape"], dtype=getattr(torch, m["dtype"]))
        for name, m in launch["made"].items()
    }
    views |= {n: torch.zeros(1, 2, 384, 64) for n in ("q", "k", "v")}
    mask = block_mask(torch, launch["flex"], views)
    fill_blocks(mask, launch["made"], views)
    if mods:  # causal over 3 blocks of 128: block i sees i-1 full blocks and its own partial
        assert views["KV_NUM_BLKS"].flatten().tolist() == [1, 1, 1]
        assert views["FULL_KV_NUM_BLKS"].flatten().tolist() == [0, 1, 2]
        assert views["KV_IDX"][0, 0, :, 0].tolist() == [0, 1, 2]
    else:
        assert views["KV_NUM_BLKS"].flatten().tolist() == [1]
    wrong = {**views, "KV_IDX": torch.zeros(1, 1, 5, 5, dtype=torch.int32)}
    with pytest.raises(StageError, match="KV_IDX: the block mask's kv_indices is"):
        fill_blocks(mask, launch["made"], wrong)


@needs_torch
def test_the_reference_is_softmax_attention_with_the_mods(tmp_path: Path) -> None:
    """torch's flex_attention over the kernel's q, k, v (bf16 in, float32 math) against the
    attention written out: causal mask, a score bias, grouped-query heads."""
    import torch

    (tmp_path / "mods.py").write_text(MODS)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 200, 32, generator=generator).bfloat16()
    k, v = (torch.randn(1, 2, 200, 32, generator=generator).bfloat16() for _ in range(2))
    flex = {
        "q": "q",
        "k": "k",
        "v": "v",
        "mask_mod": f"{tmp_path / 'mods.py'}:causal",
        "score_mod": f"{tmp_path / 'mods.py'}:bias",
        "block": 128,
    }
    views = {"q": q, "k": k, "v": v}
    got = expected_output(torch, flex, views, block_mask(torch, flex, views))
    qf, kf, vf = (
        t.double().repeat_interleave(2, dim=1) if t is not q else t.double() for t in (q, k, v)
    )
    rows, cols = torch.arange(200)[:, None], torch.arange(200)[None, :]
    scores = qf @ kf.transpose(-1, -2) / math.sqrt(32) + (rows - cols) * 0.01
    scores = scores.masked_fill(rows < cols, float("-inf"))
    want = (torch.softmax(scores, dim=-1) @ vf).numpy()
    assert got.shape == (1, 4, 200, 32)
    assert np.max(np.abs(got - want)) < 1e-4


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_decode_names_its_missing_reference(tmp_path: Path) -> None:
    spec = _project(tmp_path, DECODE, "", [1, 2, 1, 64], [1, 2, 512, 64])
    assert profile("triton").bench_reference(spec, _rendered(spec)) == "flex_decoding"


@pytest.mark.slow
@needs_torch_source
@needs_torch
@pytest.mark.parametrize("template", [FORWARD, DECODE, BACKWARD])
@pytest.mark.parametrize("mods", ['mask_mod = "mods.py:causal"', ""])
def test_the_static_checks_see_the_buffers_the_lowering_makes(
    tmp_path: Path, template: str, mods: str
) -> None:
    """The static view (what an untrusted workspace's checks see, without torch) and the
    worker's launch (Inductor's own buffers) agree on every buffer's shape and dtype."""
    q = [2, 4, 1, 64] if template == DECODE else [2, 4, 384, 64]
    spec = _project(tmp_path, template, mods, q, [2, 4, 384, 64])
    if template == BACKWARD:
        spec = dataclasses.replace(spec, variables={})
    launch = profile("triton").bench_launch(spec, _rendered(spec))
    assert launch is not None and not launch.get("problem")
    seen = static_view(spec).tensors
    assert list(seen)[3:] == list(launch["made"])  # after Q, K, V: the same, in order
    for name, made in launch["made"].items():
        found = seen[name]
        assert found is not None
        assert (list(found.shape), found.dtype.name) == (made["shape"], made["dtype"]), name


def test_int32_is_a_harness_dtype_only_for_tensors_the_worker_fills() -> None:
    """A block-mask argument is int32 and filled by the worker; any other int32 tensor would
    be seeded with zeros (uniform [-1, 1] cast) and has no tolerance: refused at setup."""
    from kls.bench.job import BenchJob, TensorJob
    from kls.bench.worker import run

    index = TensorJob("KV_IDX", [1, 1, 2, 2], [4, 4, 2, 1], "int32")
    out = TensorJob("out", [4], [1], "float32", is_output=True)
    job = BenchJob("", "k", ["KV_IDX", "out"], {"KV_IDX": index, "out": out}, "none")
    with pytest.raises(StageError, match="dtype int32 is not supported by the harness"):
        run(job)
    job.module = {"made": {"KV_IDX": {"fill": "block:kv_indices"}}}
    try:
        run(job)
    except StageError as exc:  # past the dtype check: no GPU (or no module) here
        assert "dtype int32" not in str(exc)


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_a_mask_that_reads_the_head_has_no_flex_reference(tmp_path: Path) -> None:
    (tmp_path / "heads.py").write_text(
        "def first_head_sees_all(b, h, q_idx, kv_idx):\n    return (h == 0) | (q_idx >= kv_idx)\n"
    )
    mods = 'mask_mod = "heads.py:first_head_sees_all"'
    spec = _project(tmp_path, FORWARD, mods, [1, 2, 256, 64], [1, 2, 256, 64])
    reference = profile("triton").bench_reference(spec, _rendered(spec))
    assert reference == "flex_per_head"
    from kls.bench.worker import _load_user_reference

    with pytest.raises(StageError, match="reads the batch or head index"):
        _load_user_reference(reference)
