"""The triton profile against Inductor's own lowering, on the CPU: every instance of the
differential matrix (benchmarks/triton_conformance.toml) rendered by kls is the module
Inductor's `tuned_mm`/`tuned_bmm` generates for the same tensors and pinned config, rendered
with Inductor's own Jinja environment, after normalising only the kernel's name. The GPU run of
the same script (`compile`) proves it against torch.compile (docs/CONFORMANCE.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kls.instances import load_instances
from kls.sandbox.workers import render_isolated
from tests.conftest import ROOT
from tests.upstream import needs_torch, needs_torch_source

pytestmark = [pytest.mark.slow, needs_torch_source, needs_torch]


def test_every_instance_renders_as_inductor_lowers_it(tmp_path: Path) -> None:
    out = tmp_path / "lower.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "server"), "KLS_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "triton_conformance.py"), "lower"]
        + ["--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 5
    for row in rows:
        assert row.get("identical"), row


def _conformance_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "triton_conformance", ROOT / "benchmarks" / "triton_conformance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDERS = json.loads((ROOT / "tests" / "data" / "triton211_renders.json").read_text())


@pytest.mark.parametrize("case", sorted(RENDERS["cases"]))
def test_render_is_the_module_torch_compile_autotuned_on_the_h200(case: str) -> None:
    """kls's render here, on the CPU, has the digest of the module torch.compile autotuned for
    the same instance on an H200 (benchmarks/h200_triton_conformance.sh wrote the digests:
    sha256 and a hash per line, no text)."""
    script = _conformance_script()
    spec = load_instances(ROOT / "benchmarks" / "triton_conformance.toml").instances[case]
    rendered = render_isolated(spec)
    assert rendered.text is not None, [f.message for f in rendered.findings]
    want = RENDERS["cases"][case]
    got = script.digest(script.normalize(rendered.text))
    if got["sha256"] != want["sha256"]:
        lines = rendered.text.split("\n")
        for i, (a, b) in enumerate(zip(want["lines"], got["lines"])):
            assert a == b, f"line {i + 1} differs from torch.compile's: {lines[i].strip()[:120]!r}"
        assert len(want["lines"]) == len(got["lines"])
