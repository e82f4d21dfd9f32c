"""On a real GPU: every shipped Triton instance verified and timed by `kls bench`, one run
under compute-sanitizer, and a store without its mask found at its template line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kls.bench.history import History
from kls.bench.job import Timing
from kls.bench.run import BenchOptions, benchmark_instance
from kls.bench.sanitize import sanitize_instance
from kls.instances import load_instances
from kls.instances.flex_files import flex_op
from kls.profiles import profile
from tests.conftest import TEMPLATES
from tests.upstream import needs_torch, needs_torch_source, torch_source

pytestmark = [pytest.mark.gpu, needs_torch, needs_torch_source]
SHIPPED = load_instances(TEMPLATES / "kls.toml")
# Flex instances are not kls bench's yet (no built-in flex reference): benchmarks/triton_flex_gpu.py
# compares and times them against torch.compile's.
TRITON = sorted(
    n
    for n, i in SHIPPED.instances.items()
    if profile(i.profile).language == "python" and flex_op(i) is None
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


def test_a_store_without_its_mask_is_found_at_its_line(tmp_path: Path) -> None:
    """A copy of Inductor's mm with the output mask dropped (made here from the torch
    source), on a shape whose rows end inside a block: memcheck reports the writes past the
    output, at the template's store_output line."""
    source = torch_source()
    assert source is not None
    text = (source.package / "_inductor/kernel/templates/triton_mm.py.jinja").read_text()
    mutated = text.replace('"acc", "mask", val_shape', '"acc", None, val_shape')
    assert mutated != text
    (tmp_path / "mm_nomask.py.jinja").write_text(mutated)
    (tmp_path / "kls.toml").write_text(
        '[instances.mm]\nprofile = "triton"\ntemplate = "mm_nomask.py.jinja"\n'
        'inductor_template = "mm"\nreference = "none"\n'
        'tensors.A = { shape = [100, 128], dtype = "bf16" }\n'
        'tensors.B = { shape = [128, 64], dtype = "bf16" }\n'
        'tensors.out = { shape = [100, 64], dtype = "bf16" }\n'
        "vars = { BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 32, GROUP_M = 8, EVEN_K = true, "
        'ALLOW_TF32 = false, USE_FAST_ACCUM = false, ACC_TYPE = "tl.float32" }\n'
    )
    spec = load_instances(tmp_path / "kls.toml").instances["mm"]
    report = sanitize_instance(spec, QUICK)
    if report.findings and report.findings[0].code == "KT722":
        pytest.skip(report.findings[0].message)
    writes = [f for f in report.findings if f.code == "KT720" and "write" in f.message]
    assert writes, [f.format_line() for f in report.findings]
    lines = mutated.split("\n")
    assert all("store_output" in lines[f.range.start.line] for f in writes)
