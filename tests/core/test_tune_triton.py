"""`kls tune` of a Triton instance: its config searched over Inductor's own configs for the
tensors (read from Inductor's lowering), the tune table and its own; a config Triton's compile
finds over the shared-memory limit dropped before any GPU; --apply writing the winner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kls.instances import load_instances
from kls.instances.tune_table import TuneSpace
from kls.profiles.base import ConfigSpace
from kls.tune.apply import apply_config
from kls.tune.configs import ConfigTrial, ConfigTuneResult, candidates, table, with_config
from tests.upstream import needs_torch, needs_torch_source

TMA = "triton_mm_persistent_tma"


def _spec(project: Path) -> object:
    return load_instances(project / "kls.toml").instances[TMA]


@needs_torch_source
def test_candidates_start_from_the_instance_then_the_table_then_inductor(project: Path) -> None:
    spec = _spec(project)
    space = TuneSpace(variables={"num_stages": (3, 4), "BLOCK_K": (64,)}, declared=True)
    inductor = [
        {"num_warps": 8, "num_stages": 3, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64},
        {"num_warps": 8, "num_stages": 4, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
    ]
    found = candidates(spec, space, ConfigSpace(inductor), None)  # type: ignore[arg-type]
    assert [t.origin for t in found] == ["current", "tune table", "inductor"]
    # The table's num_stages=3 and Inductor's second config are the instance's own and the
    # table's num_stages=4: each config is kept once, with its first origin.
    assert found[1].config["num_stages"] == 4 and found[2].config["BLOCK_N"] == 256
    assert candidates(spec, space, ConfigSpace(inductor), 2)[-1].origin == "tune table"  # type: ignore[arg-type]
    tuned = with_config(spec, found[2].config)  # type: ignore[arg-type]
    assert tuned.variables["BLOCK_N"] == 256 and tuned.num_warps == 8
    assert tuned.variables["NUM_SMS"] == 132  # what the config leaves alone stays


def test_apply_writes_launch_and_variables_keeping_comments(tmp_path: Path) -> None:
    config = tmp_path / "kls.toml"
    config.write_text(
        '[instances.k]  # mine\nprofile = "triton"\nnum_warps = 4\n'
        "vars = { BLOCK_M = 64, BLOCK_N = 64 }  # blocks\n"
    )
    line = apply_config(config, "k", {"num_warps": 8, "num_stages": 4, "BLOCK_N": 128})
    text = config.read_text()
    assert "# mine" in text and "# blocks" in text and "num_warps = 8" in text
    assert "num_stages = 4" in text and "BLOCK_N = 128" in text and "BLOCK_M = 64" in text
    assert "num_warps = 8" in line


def test_table_names_only_what_varies_and_the_reason_a_config_was_dropped() -> None:
    result = ConfigTuneResult(
        "k",
        [
            ConfigTrial({"num_warps": 4, "BLOCK_M": 64, "ACC": "f32"}, "current", stage2_ms=2.0),
            ConfigTrial({"num_warps": 8, "BLOCK_M": 64, "ACC": "f32"}, "inductor", stage2_ms=1.0),
            ConfigTrial({"num_warps": 8, "BLOCK_M": 256, "ACC": "f32"}, "inductor", "KT862: x"),
        ],
    )
    for t in result.trials[:2]:
        t.verified = True
    text = table(result)
    assert "ACC" not in text and "[KT862: x]" in text
    assert "winner: num_warps=8, BLOCK_M=64" in text and "2.000x the instance's own" in text


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_build_only_drops_a_config_over_the_shared_memory_limit(project: Path) -> None:
    with (project / "kls.toml").open("a") as f:
        f.write(f"\n[instances.{TMA}.tune]\nBLOCK_K = [256]\nnum_stages = [5]\n")
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "tune", "kls.toml", "-i", TMA, "--build-only"]
        + ["--limit", "3", "--json"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    origins = [t["origin"] for t in result["trials"]]
    assert origins == ["current", "tune table", "inductor"]
    oversized = result["trials"][1]
    assert oversized["config"]["BLOCK_K"] == 256 and oversized["problem"].startswith("KT862")
    assert result["trials"][0]["problem"] == "" and result["trials"][0]["shared_bytes"] > 0
    assert (project / ".kls" / "tune" / TMA / "configs.json").exists()


@pytest.mark.slow
@needs_torch_source
@needs_torch
def test_without_a_gpu_it_says_so_before_compiling_anything(project: Path) -> None:
    from kls.bench.probe import gpu_problem

    if gpu_problem() is None:
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "tune", "kls.toml", "-i", "triton_bmm_bf16"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert "no usable NVIDIA GPU" in done.stderr and "--build-only" in done.stderr
    assert "compiling" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_serving_benchmark_worker_says_when_there_is_no_gpu(project: Path) -> None:
    """kls tune's config search runs every candidate in one `kls.bench.worker --serve`; on a
    machine without a GPU it does not start, and says why in words."""
    from kls.bench.probe import gpu_problem
    from kls.tune.configs import bench_session
    from kls.tune.gpu import GpuUnavailable

    if gpu_problem() is None:
        pytest.skip("this machine has a GPU")
    session = bench_session(_spec(project))  # type: ignore[arg-type]
    with pytest.raises(GpuUnavailable, match=r"no usable NVIDIA GPU|cuda-python"):
        session.start()
    session.finish()
