"""The triton profile against Inductor's own lowering, on the CPU: every instance of the
differential matrix (benchmarks/triton_conformance.toml) rendered by kls is the module
Inductor's `tuned_mm`/`tuned_bmm` generates for the same tensors and pinned config, rendered
with Inductor's own Jinja environment, after normalising only the kernel's name. The GPU run of
the same script (`compile`) proves it against torch.compile (docs/CONFORMANCE.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
