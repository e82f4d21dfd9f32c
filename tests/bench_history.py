"""A benchmark history as a GPU run leaves it (`.kls/bench/<instance>.json`), for the editor's
bench tests over stdio and in process."""

from __future__ import annotations

import json
from pathlib import Path

from kls.bench.report import BenchReport
from kls.bench.run import source_hash
from kls.instances import load_instances
from kls.render import render


def remember_run(workspace: Path, instance: str, ok: bool = True) -> BenchReport:
    """A previous run's history file, as a GPU run would have left it."""
    spec = load_instances(workspace / "kls.toml").instances[instance]
    text = render(spec).text
    assert text is not None
    report = BenchReport(
        instance,
        ok,
        message="" if ok else "wrong result",
        median_ms=1.62 if ok else None,
        spread=0.004,
        samples=200,
        tflops=679.0,
        pct_of_baseline=99.0,
        pct_of_peak=69.0,
        source_hash=source_hash(text),
    )
    folder = workspace / ".kls" / "bench"
    folder.mkdir(parents=True)
    (folder / f"{instance}.json").write_text(json.dumps([report.to_json()]))
    return report
