"""On a real GPU: build -> verify -> time every shipped instance; a wrong kernel fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kls.bench.history import History
from kls.bench.job import Timing
from kls.bench.run import BenchOptions, benchmark_instance
from kls.compile.batch import compile_all
from kls.instances import load_instances
from kls.profiles import profile
from tests.conftest import TEMPLATES, gpu_available

pytestmark = pytest.mark.gpu
SHIPPED = load_instances(TEMPLATES / "kls.toml")
# kls bench builds CUDA libraries; the Triton instances' GPU path is docs/TRITON.md's script.
CUDA = sorted(n for n, i in SHIPPED.instances.items() if profile(i.profile).language == "cuda")
QUICK = BenchOptions(timing=Timing(warmup_s=0.3, min_seconds=0.2, max_seconds=1.0), baseline=False)


@pytest.fixture(scope="module", autouse=True)
def built_in_parallel() -> None:
    """Every shipped library built at once, as many nvcc processes as cores and memory allow
    (one after the other, each test waited for its own build: the run took over 420 s on an
    H200); the benchmarks then find them in the compile cache."""
    if not gpu_available()[0]:
        return
    compile_all([SHIPPED.instances[n] for n in CUDA], BenchOptions().compile)


@pytest.mark.parametrize("name", CUDA)
def test_shipped_instance_verifies_and_times(name: str, tmp_path: Path) -> None:
    report = benchmark_instance(SHIPPED.instances[name], QUICK, history=History(tmp_path))
    assert report.ok, report.message
    assert report.verification["ok"] and report.verification["unwritten"] == 0
    assert report.median_ms is not None and report.median_ms > 0
    assert report.samples >= 20


def test_swapped_operands_fail_verification(tmp_path: Path) -> None:
    work = tmp_path / "t"
    shutil.copytree(TEMPLATES, work)
    args = work / "cutlass3x_args.cuh.jinja"
    text = args.read_text()
    text = (
        text.replace("kernel.ptr(X)", "kernel.ptr(TMP)")
        .replace("kernel.ptr(W)", "kernel.ptr(X)")
        .replace("kernel.ptr(TMP)", "kernel.ptr(W)")
    )
    args.write_text(text)
    spec = load_instances(work / "kls.toml").instances["sm90_bf16_4096"]
    report = benchmark_instance(spec, QUICK, history=History(tmp_path))
    assert not report.ok
    assert report.message.startswith("verify: wrong result")
    assert report.median_ms is None


def test_a_faulting_kernel_is_a_message_not_a_crash(tmp_path: Path) -> None:
    """Rows read far out of bounds: an illegal address on the GPU. The worker reports it (or
    dies); kls says so and goes on."""
    work = tmp_path / "t"
    shutil.copytree(TEMPLATES, work)
    softmax = work / "softmax.cu.jinja"
    softmax.write_text(
        softmax.read_text().replace(
            "const {{kernel.dtype(X)}}* row_in = x + blockIdx.x * ldx;",
            "const {{kernel.dtype(X)}}* row_in = x + blockIdx.x * ldx * 4096 * 1024;",
        )
    )
    spec = load_instances(work / "kls.toml").instances["softmax_f32_4096x1024"]
    report = benchmark_instance(spec, QUICK, history=History(tmp_path))
    assert not report.ok
    assert report.message  # what happened, in words
    assert "Traceback" not in report.message


@pytest.mark.parametrize("name", ["sm90_bf16_4096", "torch211_sm90_bf16_4096"])
def test_graph_method_times_kernel_and_cublas_alike(name: str, tmp_path: Path) -> None:
    """--method graph: the library's launch captured on the worker's stream and replayed; the
    cuBLAS baseline captured the same way; both figures name the method."""
    timing = Timing(warmup_s=0.3, min_seconds=0.2, max_seconds=1.0, method="graph")
    options = BenchOptions(timing=timing, baseline=True)
    report = benchmark_instance(SHIPPED.instances[name], options, history=History(tmp_path))
    assert report.ok, report.message
    assert report.verification["ok"]
    assert report.median_ms is not None and report.median_ms > 0
    assert report.baseline_ms is not None and report.baseline_ms > 0
    assert report.method.startswith("kernel against kernel: a CUDA graph of")
