"""`kls bench` of Triton instances without a GPU: the job the worker gets (Inductor's launch
arguments, the tensors as declared, the reference the profile chooses), the module loaded as
the worker loads it, the flex hook, and a clear "no GPU" instead of a traceback. The GPU side
is tests/core/test_bench_triton_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kls.bench.history import History
from kls.bench.job import BenchJob, TensorJob, Timing
from kls.bench.launch import StageError
from kls.bench.module import grid_of, launch_arguments
from kls.bench.reference import HostTensor
from kls.bench.report import BenchReport, method_of
from kls.bench.run import NO_REFERENCE, BenchOptions, benchmark_instance, prepare_job
from kls.bench.worker import _load_user_reference, operand_tensors
from kls.instances import load_instances
from kls.profiles.triton.client import torch_python
from kls.scaffold import init
from tests.conftest import TEMPLATES, gpu_available
from tests.upstream import needs_torch, needs_torch_source

SHIPPED = TEMPLATES / "kls.toml"


def _job(name: str) -> BenchJob:
    spec = load_instances(SHIPPED).instances[name]
    job, rendered, problem = prepare_job(spec, BenchOptions())
    assert job is not None and rendered is not None, problem
    return job


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_shipped_instances_get_inductors_launch_and_a_matmul_reference() -> None:
    mm = _job("triton_mm_bf16_2048")
    assert mm.module is not None
    assert (mm.module["kernel"], mm.module["template"]) == ("triton_mm", "mm")
    assert mm.module["tensors"] == mm.params == ["A", "B", "out"]
    assert mm.module["extra_args"] == [256, 1, 1]  # (2048/128)^2 tiles, Inductor's grid
    assert (mm.module["num_warps"], mm.module["num_stages"]) == (8, 3)
    assert "def triton_mm(arg_A, arg_B, out_ptr0):" in mm.module["module"]
    assert (mm.reference, mm.operands) == ("gemm", ["A", "B"])
    b, out = mm.tensors["B"], mm.tensors["out"]
    assert b is not None and out is not None
    assert (b.stride, b.is_output, out.is_output) == ([1, 4096], False, True)  # B column-major
    bmm = _job("triton_bmm_bf16")
    assert bmm.module is not None and bmm.module["extra_args"] == [64, 8, 1]  # tiles x batch
    tma = _job("triton_mm_persistent_tma")
    assert tma.module is not None
    assert tma.module["extra_args"] == ["workspace", 132, 1, 1]  # one program an SM
    assert tma.module["workspace_bytes"] > 0  # the TMA descriptors' workspace


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_project_template_is_verified_by_its_own_reference(tmp_path: Path) -> None:
    """kls init's template borrows mm's launch but scales: no matmul reference for it."""
    init(tmp_path, "triton")
    spec = load_instances(tmp_path / "kls.toml").instances["scale_bf16"]
    job, _rendered, problem = prepare_job(spec, BenchOptions())
    assert job is None and problem == NO_REFERENCE
    config = tmp_path / "kls.toml"
    config.write_text(
        config.read_text().replace("num_warps = 4\n", 'num_warps = 4\nreference = "none"\n')
    )
    spec = load_instances(config).instances["scale_bf16"]
    job, _rendered, problem = prepare_job(spec, BenchOptions())
    assert job is not None and job.module is not None, problem
    assert job.reference == "none" and job.module["tensors"] == ["X", "out"]


def test_launch_arguments_follow_inductor() -> None:
    """The tensors in argument order, then Inductor's arguments before the grid, the
    workspace where its placeholder stands; the grid is the last three."""
    plan = {"tensors": ["A", "B", "out"], "extra_args": [7, "workspace", 132, 1, 1]}
    views = {"A": "a-view", "B": "b-view", "out": "out-view"}
    assert launch_arguments(plan, views, "ws") == ["a-view", "b-view", "out-view", 7, "ws"]
    assert grid_of(plan) == (132, 1, 1)
    with pytest.raises(StageError, match="no launch grid"):
        grid_of({"tensors": ["A"], "extra_args": [4]})
    with pytest.raises(StageError, match="no tensor B"):
        launch_arguments(plan, {"A": 1, "out": 2}, None)


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_the_worker_imports_the_module_with_its_own_line_numbers(tmp_path: Path) -> None:
    """The worker's import of the rendered module (in the torch Python, as the worker runs):
    the @triton.jit kernel, from a file whose lines are the module's (Triton's line info, and
    so the sanitizer's report, name them)."""
    job = _job("triton_bmm_bf16")
    assert job.module is not None
    plan = {**job.module, "file": str(tmp_path / "triton_bmm.py")}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    script = (
        "import json, sys\n"
        "out = sys.stdout  # the render worker's helpers send prints to stderr\n"
        "from kls.bench.module import load_kernel\n"
        "kernel, path = load_kernel(json.load(open(sys.argv[1])))\n"
        "out.write(json.dumps([type(kernel).__name__, kernel.__name__, str(path)]))\n"
    )
    done = subprocess.run(
        [torch_python(), "-c", script, str(tmp_path / "plan.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kind, name, path = json.loads(done.stdout.strip().splitlines()[-1])
    assert (kind, name, path) == ("JITFunction", "triton_bmm", plan["file"])
    written = Path(path).read_text().split("\n")
    module = str(job.module["module"]).split("\n")
    assert len(written) == len(module)
    assert [i for i, (a, b) in enumerate(zip(written, module)) if a != b] == [
        i for i, line in enumerate(written) if not line and module[i]
    ]  # only the decorator's lines differ: blanked


def test_gemm_operands_are_the_jobs_names() -> None:
    def host(name: str) -> HostTensor:
        import numpy as np

        return HostTensor(TensorJob(name, [2, 2], [2, 1], "float32"), np.zeros(4, np.float32))

    tensors = {n: host(n) for n in ("A", "B", "out")}
    job = BenchJob("", "k", ["A", "B", "out"], {}, "gemm", operands=["A", "B"])
    x, w, bias = operand_tensors(job, tensors)
    assert (x, w, bias) == (tensors["A"], tensors["B"], None)
    cuda_style = BenchJob("", "k", [], {}, "gemm")
    assert operand_tensors(cuda_style, {"X": tensors["A"]}) == (tensors["A"], None, None)


def test_flex_decode_and_backward_say_they_have_no_reference_yet() -> None:
    for op in ("flex_decoding", "flex_attention_backward"):
        with pytest.raises(StageError, match=f"{op} has no built-in reference in kls yet"):
            _load_user_reference(op)
    assert _load_user_reference("flex") is None  # computed on the GPU by the worker


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_without_a_gpu_the_benchmark_says_so(tmp_path: Path) -> None:
    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    spec = load_instances(SHIPPED).instances["triton_bmm_bf16"]
    report = benchmark_instance(spec, BenchOptions(), history=History(tmp_path))
    assert not report.ok
    assert "no usable NVIDIA GPU/driver" in report.message
    assert "Traceback" not in report.message
    assert History(tmp_path).load("triton_bmm_bf16") == []  # no GPU reached: no history


@pytest.mark.slow  # a kls process: 0.7-2.5 s here
def test_kls_bench_sanitize_without_a_gpu_is_a_message() -> None:
    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "bench", str(SHIPPED), "-i", "triton_mm_bf16_2048"]
        + ["--sanitize"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "triton_mm_bf16_2048" in done.stdout and "no usable NVIDIA GPU/driver" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_result_says_the_timing_it_used() -> None:
    """`--max-seconds` changes the method's bound, and the report says the bound it ran with."""
    assert method_of(Timing()) == BenchReport("x", True).method
    assert "or at 2000 samples or 2 s" in method_of(Timing(max_seconds=2))
    graph = method_of(Timing(method="graph"))
    assert graph.startswith("kernel against kernel: a CUDA graph of 20 launches replayed")
    assert "flush" in graph and "subtracted" in graph and "batches of 10" not in graph
    assert "L2 warm" in method_of(Timing(method="graph", flush_l2=False))


@pytest.mark.slow  # a kls process
def test_graph_method_is_offered_by_bench_and_tune_and_checked() -> None:
    for command in ("bench", "tune"):
        done = subprocess.run(
            [sys.executable, "-m", "kls.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "--method {events,graph}" in done.stdout, done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "bench", str(SHIPPED), "--method", "warm"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "invalid choice: 'warm'" in done.stderr
