"""Benchmark history per instance under `.kls/bench/` in the workspace: lenses survive a
restart and show the change against the last run."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from kls.bench.report import BenchReport
from kls.cache_dir import write_atomic

KEEP = 50


@functools.lru_cache(maxsize=64)
def _read(path: Path, mtime_ns: int, size: int) -> tuple[BenchReport, ...]:
    """One file version, parsed once: the server reads the history on every publish."""
    try:
        return tuple(BenchReport.from_json(d) for d in json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return ()


class History:
    def __init__(self, workspace: Path) -> None:
        self.folder = workspace / ".kls" / "bench"

    def path(self, instance: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance)
        return self.folder / f"{safe}.json"

    def load(self, instance: str) -> list[BenchReport]:
        path = self.path(instance)
        try:
            stat = path.stat()
        except OSError:
            return []
        return list(_read(path, stat.st_mtime_ns, stat.st_size))

    def last(self, instance: str, ok_only: bool = True) -> BenchReport | None:
        runs = [r for r in self.load(instance) if r.ok or not ok_only]
        return runs[-1] if runs else None

    def append(self, report: BenchReport) -> None:
        runs = self.load(report.instance)[-(KEEP - 1) :] + [report]
        payload = json.dumps([r.to_json() for r in runs], indent=1)
        write_atomic(self.path(report.instance), payload.encode())
