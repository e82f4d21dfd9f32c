"""Benchmark history per instance under `.kls/bench/` in the workspace: lenses survive a
restart and show the change against the last run."""

from __future__ import annotations

import json
from pathlib import Path

from kls.bench.report import BenchReport
from kls.cache_dir import write_atomic

KEEP = 50


class History:
    def __init__(self, workspace: Path) -> None:
        self.folder = workspace / ".kls" / "bench"

    def path(self, instance: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance)
        return self.folder / f"{safe}.json"

    def load(self, instance: str) -> list[BenchReport]:
        try:
            data = json.loads(self.path(instance).read_text())
            return [BenchReport.from_json(d) for d in data]
        except (OSError, ValueError, TypeError):
            return []

    def last(self, instance: str, ok_only: bool = True) -> BenchReport | None:
        runs = [r for r in self.load(instance) if r.ok or not ok_only]
        return runs[-1] if runs else None

    def append(self, report: BenchReport) -> None:
        runs = self.load(report.instance)[-(KEEP - 1) :] + [report]
        payload = json.dumps([r.to_json() for r in runs], indent=1)
        write_atomic(self.path(report.instance), payload.encode())
