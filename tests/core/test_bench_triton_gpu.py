"""On a real GPU: every shipped Triton instance kls can verify, verified and timed by
`kls bench`, and one run under compute-sanitizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from kls.bench.history import History
from kls.bench.job import Timing
from kls.bench.run import BenchOptions, benchmark_instance
from kls.bench.sanitize import sanitize_instance
from kls.instances import load_instances
from kls.instances.flex_files import flex_op
from kls.instances.schema import UNSET_REFERENCE
from kls.profiles import profile
from tests.conftest import TEMPLATES
from tests.upstream import needs_torch, needs_torch_source

pytestmark = [pytest.mark.gpu, needs_torch, needs_torch_source]
SHIPPED = load_instances(TEMPLATES / "kls.toml")
# The instances kls bench verifies: Inductor's mm, bmm and persistent-TMA mm (a float64 matmul)
# and any that names its reference. The others (scaled and grouped mm, conv, mm_plus_mm, b2b)
# have no built-in reference yet; flex's forward is verified against torch's flex_attention
# (below); its decode and backward have no reference yet.
VERIFIED_TEMPLATES = (
    "triton_mm.py.jinja",
    "triton_bmm.py.jinja",
    "triton_persistent_tma_mm.py.jinja",
)
TRITON = sorted(
    n
    for n, i in SHIPPED.instances.items()
    if profile(i.profile).language == "python"
    and flex_op(i) is None
    and (i.reference != UNSET_REFERENCE or str(i.template).endswith(VERIFIED_TEMPLATES))
)
QUICK = BenchOptions(timing=Timing(warmup_s=0.3, min_seconds=0.2, max_seconds=1.0))


@pytest.mark.parametrize("name", TRITON)
def test_shipped_triton_instance_verifies_and_times(name: str, tmp_path: Path) -> None:
    report = benchmark_instance(SHIPPED.instances[name], QUICK, history=History(tmp_path))
    assert report.ok, report.message
    assert report.verified and report.verification["ok"]
    assert report.verification["unwritten"] == 0 and report.verification["checked"] > 0
    assert report.median_ms is not None and report.median_ms > 0 and report.spread is not None
    assert report.samples >= 20 and report.device.get("name")
    assert "CUDA events" in report.method
    assert report.baseline_ms is not None  # cuBLAS, same data, same method


def test_a_shipped_instance_is_clean_under_the_sanitizer() -> None:
    report = sanitize_instance(SHIPPED.instances["triton_bmm_bf16"], QUICK)
    if report.findings and report.findings[0].code == "KT722":
        pytest.skip(report.findings[0].message)  # the tool refuses this machine's GPU
    assert report.ok, [f.format_line() for f in report.findings]
    assert set(report.tools) == {"memcheck", "racecheck"}


def test_shipped_flex_forward_verifies_against_torchs_flex_attention(tmp_path: Path) -> None:
    """The block mask made on the GPU from the instance's mask_mod, the output against torch's
    flex_attention with the same mods in float32, every element."""
    spec = SHIPPED.instances["triton_flex_attention_causal_bf16"]
    report = benchmark_instance(spec, QUICK, history=History(tmp_path))
    assert report.ok, report.message
    assert report.verified and report.verification["ok"]
    assert report.verification["checked"] == 4 * 16 * 4096 * 128
    assert report.verification["unwritten"] == 0
    assert report.median_ms is not None and report.median_ms > 0


def test_graph_method_captures_a_triton_launch(tmp_path: Path) -> None:
    timing = Timing(warmup_s=0.3, min_seconds=0.2, max_seconds=1.0, method="graph")
    options = BenchOptions(timing=timing)
    spec = SHIPPED.instances["triton_bmm_bf16"]
    report = benchmark_instance(spec, options, history=History(tmp_path))
    assert report.ok, report.message
    assert report.median_ms is not None and report.baseline_ms is not None
    assert "CUDA graph" in report.method


def test_one_serving_worker_runs_several_jobs(tmp_path: Path) -> None:
    """kls tune's config search: every candidate in one `kls.bench.worker --serve`."""
    from kls.tune.configs import bench_session, runner_of

    spec = SHIPPED.instances["triton_bmm_bf16"]
    session = bench_session(spec)
    try:
        options = BenchOptions(timing=QUICK.timing, baseline=False, runner=runner_of(session))
        first = benchmark_instance(spec, options, history=History(tmp_path))
        process = session.proc.pid if session.proc is not None else None
        second = benchmark_instance(spec, options, history=History(tmp_path))
        assert first.ok and second.ok, (first.message, second.message)
        assert session.proc is not None and session.proc.pid == process and session.restarts == 0
    finally:
        session.finish()
