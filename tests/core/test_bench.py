"""Benchmark logic on the CPU: marshalling, statistics, verification maths, reports, history,
and the worker's isolation (with stand-in workers that crash or hang)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kls.bench import marshal
from kls.bench.history import History
from kls.bench.job import BenchJob, TensorJob, Timing
from kls.bench.numerics import compare, to_float64, to_storage
from kls.bench.reference import HostTensor, verify_gemm, verify_softmax
from kls.bench.report import BenchReport, build_report
from kls.bench.run import BenchOptions, make_job
from kls.bench.runner import run_worker
from kls.bench.stats import should_stop, summarize
from kls.instances import load_instances
from kls.render import render
from tests.conftest import TEMPLATES

SHIPPED = load_instances(TEMPLATES / "kls.toml")


def job_for(name: str) -> BenchJob:
    spec = SHIPPED.instances[name]
    return make_job(spec, render(spec), Path("/nowhere/lib.so"), BenchOptions())


# -- marshalling -------------------------------------------------------------------------------


def test_job_follows_input_reorder() -> None:
    job = job_for("sm90_bf16_4096_bias")
    assert job.params == ["Bias", "X", "W", "Y"]
    assert job.symbol == "kls_sm90_bf16_4096_bias"
    assert job.output().name == "Y" and job.tensors["Bias"] is not None
    assert job.tensors["Bias"].stride == [0, 1]
    assert job.reference == "gemm" and job.beta == 1.0


def test_none_bias_has_no_parameter() -> None:
    job = job_for("sm90_bf16_4096")
    assert job.params == ["X", "W", "Y"] and job.tensors["Bias"] is None


def test_entry_arguments_are_in_inductor_order() -> None:
    params = ["Bias", "X", "W", "Y"]
    pointers = {"X": 100, "W": 200, "Bias": 300, "Y": 400}
    query = marshal.workspace_query(params, 0xABC, 7)
    assert query.args() == [None, None, None, None, 0xABC, None, 7]
    run = marshal.launch(params, pointers, 0x999, 7)
    assert run.args() == [300, 100, 200, 400, None, 0x999, 7]
    with pytest.raises(KeyError, match="Bias"):
        marshal.launch(params, {"X": 1, "W": 2, "Y": 3}, None, 0)


def test_job_round_trips_through_json() -> None:
    job = job_for("softmax_bf16_8192x4096")
    again = BenchJob.from_json(json.loads(json.dumps(job.to_json())))
    assert again == job


# -- statistics and stopping -------------------------------------------------------------------


def test_summary() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0 and s.minimum == 1.0 and s.n == 5
    assert s.p25 == 2.0 and s.p75 == 4.0
    assert s.spread == pytest.approx(2.0 / 3.0)


def test_stopping_rule() -> None:
    timing = Timing(
        min_samples=20, min_seconds=1.0, max_samples=100, target_spread=0.01, max_seconds=5
    )
    steady = [1.0] * 19
    assert not should_stop(steady, 1.5, timing)  # too few samples
    assert not should_stop([*steady, 1.0], 0.5, timing)  # tight, but clocks not settled yet
    assert should_stop([*steady, 1.0], 1.5, timing)  # tight and long enough: stop
    noisy = [1.0, 2.0] * 20
    assert not should_stop(noisy, 1.5, timing)  # spread 100 %: go on
    assert should_stop(noisy, 5.0, timing)  # time cap
    assert should_stop([1.0, 2.0] * 50, 0.1, timing)  # sample cap


# -- numerics and references -------------------------------------------------------------------


def test_bf16_rounding() -> None:
    values = np.array([1.0, -2.0, 1.00390625, 1.005859375, 3.14159], dtype=np.float32)
    bits = to_storage(values, "bfloat16")
    assert bits[0] == 0x3F80 and bits[1] == 0xC000
    assert bits[2] == 0x3F80  # exactly halfway: ties to even (down)
    assert bits[3] == 0x3F81  # above halfway: up
    assert to_float64(bits, "bfloat16")[4] == pytest.approx(3.140625)


def test_nan_never_passes() -> None:
    v = compare(np.array([1.0, np.nan]), np.array([1.0, 1.0]), [[0], [1]], 1.0)
    assert not v.ok and v.nan_count == 1


def gemm_tensors(m: int, n: int, k: int, y_col_major: bool, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    x_bits = to_storage(rng.uniform(-1, 1, m * k).astype(np.float32), "bfloat16")
    w_bits = to_storage(rng.uniform(-1, 1, k * n).astype(np.float32), "bfloat16")
    x = HostTensor(TensorJob("X", [m, k], [k, 1], "bfloat16"), x_bits)
    w = HostTensor(TensorJob("W", [k, n], [1, k], "bfloat16"), w_bits)  # column-major
    xm = to_float64(x_bits, "bfloat16").reshape(m, k)
    wm = to_float64(w_bits, "bfloat16").reshape(n, k).T
    ym = xm @ wm
    stride = [1, m] if y_col_major else [n, 1]
    flat = np.empty(m * n, dtype=np.float64)
    for i in range(m):
        for j in range(n):
            flat[i * stride[0] + j * stride[1]] = ym[i, j]
    y = HostTensor(
        TensorJob("Y", [m, n], stride, "bfloat16", is_output=True),
        to_storage(flat.astype(np.float32), "bfloat16"),
    )
    return x, w, y


@pytest.mark.parametrize("y_col_major", [False, True])
def test_gemm_reference_follows_layouts(y_col_major: bool) -> None:
    rng = np.random.default_rng(1)
    x, w, y = gemm_tensors(24, 16, 64, y_col_major, rng)
    assert verify_gemm(x, w, None, y, 1.0, 0.0, 1000, rng).ok
    # Reading Y with the wrong layout: the error once seen on a correct tnn kernel (~1.4).
    wrong = HostTensor(
        TensorJob("Y", [24, 16], [16, 1] if y_col_major else [1, 24], "bfloat16"), y.storage
    )
    bad = verify_gemm(x, w, None, wrong, 1.0, 0.0, 1000, rng)
    assert not bad.ok and bad.max_error > 0.1


def test_gemm_reference_finds_one_wrong_element() -> None:
    rng = np.random.default_rng(2)
    x, w, y = gemm_tensors(8, 8, 32, False, rng)
    y.storage[3 * 8 + 5] ^= 0x0400  # flip an exponent bit of Y[3, 5]
    v = verify_gemm(x, w, None, y, 1.0, 0.0, 64, rng)
    assert not v.ok and v.worst == [3, 5] and v.checked == 64


def test_gemm_reference_with_broadcast_bias() -> None:
    rng = np.random.default_rng(3)
    x, w, y0 = gemm_tensors(8, 8, 32, False, rng)
    bias_bits = to_storage(rng.uniform(-1, 1, 8).astype(np.float32), "bfloat16")
    bias = HostTensor(TensorJob("Bias", [8, 8], [0, 1], "bfloat16"), bias_bits)
    y_vals = to_float64(y0.storage, "bfloat16").reshape(8, 8) + to_float64(bias_bits, "bfloat16")
    y = HostTensor(y0.spec, to_storage(y_vals.ravel().astype(np.float32), "bfloat16"))
    assert verify_gemm(x, w, bias, y, 1.0, 1.0, 64, rng).ok
    assert not verify_gemm(x, w, bias, y, 1.0, 0.0, 64, rng).ok


def test_softmax_reference() -> None:
    rng = np.random.default_rng(4)
    values = rng.uniform(-1, 1, (6, 10)).astype(np.float32)
    x = HostTensor(TensorJob("X", [6, 10], [10, 1], "float32"), values.ravel())
    e = np.exp(values - values.max(axis=1, keepdims=True))
    out = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    y = HostTensor(TensorJob("Y", [6, 10], [10, 1], "float32", is_output=True), out.ravel())
    assert verify_softmax(x, y, 6, rng).ok
    out[2, 3] *= 1.01
    assert not verify_softmax(x, y, 6, rng).ok


# -- reports and history -----------------------------------------------------------------------


def test_report_headline_from_worker_result() -> None:
    job = job_for("sm90_bf16_8192")
    result = {
        "ok": True,
        "device": {"name": "NVIDIA H200", "driver": 13000},
        "timing": {
            "n": 200,
            "median": 1.62,
            "p25": 1.617,
            "p75": 1.6235,
            "minimum": 1.61,
            "mean": 1.62,
            "spread": 0.004,
        },
        "baseline": {"available": True, "timing": {"median": 1.6038}},
        "verification": {"ok": True},
    }
    report = build_report("sm90_bf16_8192", job, result)
    assert report.tflops == pytest.approx(2 * 8192**3 / 1.62e-3 / 1e12)
    assert report.headline() == "⏱ 1.62 ms ±0.4% · 679 TFLOP/s · 99% of cuBLAS · 69% of peak"


def test_history_persists_and_shows_change(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.append(BenchReport("a", True, median_ms=2.0, spread=0.01))
    history.append(BenchReport("a", False, message="wrong result"))
    again = History(tmp_path)  # as after a restart
    assert [r.ok for r in again.load("a")] == [True, False]
    last = again.last("a")
    assert last is not None and last.median_ms == 2.0
    newer = BenchReport("a", True, median_ms=1.5, spread=0.01, previous_ms=2.0)
    assert newer.headline().endswith("-25.0% vs last")


# -- the worker's isolation --------------------------------------------------------------------

JOB = job_for("softmax_f32_4096x1024")


def stand_in(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_worker_crash_is_reported() -> None:
    outcome = run_worker(
        JOB, 30, stand_in("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    )
    assert (
        not outcome.ok
        and "SIGSEGV" in outcome.message
        and "server is unaffected" in outcome.message
    )


def test_worker_timeout_kills_it() -> None:
    outcome = run_worker(JOB, 0.5, stand_in("import time; time.sleep(60)"))
    assert not outcome.ok and "ran past 0.5 s" in outcome.message


def test_worker_failure_stage_is_reported() -> None:
    code = 'print(\'{"ok": false, "stage": "load", "error": "no symbol kls_x"}\')'
    outcome = run_worker(JOB, 30, stand_in(code))
    assert not outcome.ok and outcome.message == "load: no symbol kls_x"


def test_real_worker_without_gpu_says_what_to_do() -> None:
    from tests.conftest import gpu_available

    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    outcome = run_worker(JOB, 60)
    assert not outcome.ok and outcome.message.startswith("driver: no usable NVIDIA GPU/driver")


def test_kls_bench_without_gpu_is_a_message(tmp_path: Path) -> None:
    from tests.conftest import gpu_available

    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    import shutil

    work = tmp_path / "t"
    shutil.copytree(TEMPLATES, work)
    kls = str(Path(sys.executable).parent / "kls")
    proc = subprocess.run(
        [kls, "bench", str(work / "softmax.cu.jinja"), "-i", "softmax_f32_4096x1024"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "no usable NVIDIA GPU/driver" in proc.stdout
    assert "`kls compile` checks and builds without one" in proc.stderr  # what to do instead
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unwritten_outputs_are_counted_on_logical_elements() -> None:
    from kls.bench.worker import count_unwritten

    nan = np.float32("nan")
    dense = np.array([1, 2, nan, 4], dtype=np.float32)
    assert count_unwritten(HostTensor(TensorJob("Y", [2, 2], [2, 1], "float32"), dense)) == 1
    # Column stride 2: the odd slots are gaps, never written and never counted.
    gappy = np.array([1, nan, 2, nan, 3, nan, nan, nan], dtype=np.float32)
    assert count_unwritten(HostTensor(TensorJob("Y", [2, 2], [4, 2], "float32"), gappy)) == 1
