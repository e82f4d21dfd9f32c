"""`--resume`: take the measurements of the last run's results.json instead of timing them again.

A tune of a real suite outlasts many a time limit (a CI job, a lent GPU's 10-minute call, a
Ctrl-C); builds already resume through the compile cache. A measurement is reused only when
the last run measured the same thing the same way: the same instance and rendered source, the
same shapes, the same timing settings and op list, on a GPU of the same name; and only what
succeeded (a failure or crash is measured again). A stage's cuBLAS bar for a shape is reused
only when every measurement of that shape in that stage is, so a shape's candidates and its bar
come from one run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kls.tune.results import Baseline, Measurement, ResultsFileError, TuneResult, read_results

MeasurementKey = tuple[str, str, str, int]  # unit, shape, vars (JSON), stage


def key_of(unit: str, shape: str, variables: dict[str, Any], stage: int) -> MeasurementKey:
    return (unit, shape, json.dumps(variables, sort_keys=True, default=str), stage)


@dataclass
class Prior:
    """What the last run measured, by key; `used` counts what this run took from it."""

    timestamp: float = 0.0
    measurements: dict[MeasurementKey, Measurement] = field(default_factory=dict)
    baselines: dict[tuple[str, int], Baseline] = field(default_factory=dict)  # (shape, stage)
    built: set[str] = field(default_factory=set)  # units the last run built
    used: int = 0

    def take(
        self, unit: str, shape: str, variables: dict[str, Any], stage: int
    ) -> Measurement | None:
        m = self.measurements.get(key_of(unit, shape, variables, stage))
        if m is not None:
            self.used += 1
        return m

    def bar(self, shape: str, stage: int, wanted: list[MeasurementKey]) -> Baseline | None:
        """The last run's cuBLAS bar of (shape, stage), if it was timed before and after the
        candidates (a run stopped in between left one) and every one of `wanted` (that
        stage's measurements of the shape) comes from the last run too."""
        base = self.baselines.get((shape, stage))
        if base is None or len(base.runs_ms) < 2:
            return None
        return base if all(k in self.measurements for k in wanted) else None


def load_prior(path: Path, result: TuneResult, device: dict[str, Any]) -> tuple[Prior | None, str]:
    """The last run's reusable measurements, or None and why not (a note for the results)."""
    try:
        last = read_results(path)
    except FileNotFoundError:
        return None, "--resume: no earlier results.json; everything is measured"
    except OSError as exc:
        return None, f"--resume: cannot read {path} ({exc}); everything is measured"
    except ResultsFileError as exc:
        return None, f"--resume: cannot read {exc}; everything is measured"
    return reusable(last, result, device)


def reusable(
    last: TuneResult, result: TuneResult, device: dict[str, Any]
) -> tuple[Prior | None, str]:
    """What of the last run (`last`) this run (`result`, on `device`) may take over."""
    why = _mismatch(last, result, device)
    if why:
        return None, f"--resume: the earlier run is not reused: {why}"
    prior = Prior(float(last.timestamp or 0.0))
    for m in last.measurements:
        if m.ok:
            prior.measurements[key_of(m.unit, m.shape, m.vars, m.stage)] = m
    prior.built = {b.unit for b in last.builds if b.ok}
    for b in last.baselines:
        if b.ok:
            prior.baselines[(b.shape, b.stage)] = b
    return prior, ""


def _mismatch(last: TuneResult, result: TuneResult, device: dict[str, Any]) -> str:
    checks = (
        (last.instance, result.instance, "another instance"),
        (last.source_hash, result.source_hash, "the instance renders differently now"),
        (last.shapes, result.shapes, "other shapes"),
        (last.method, result.method, "other timing settings or op list"),
    )
    for before, now, why in checks:
        if before != now:
            return why
    name = (last.device or {}).get("name")
    if name != device.get("name"):
        return f"it ran on {name or 'another GPU'}, this is {device.get('name') or 'unknown'}"
    return ""
