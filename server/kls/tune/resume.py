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

from kls.tune.results import Baseline, Measurement, TuneResult

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
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "--resume: no earlier results.json; everything is measured"
    except (OSError, ValueError) as exc:
        return None, f"--resume: cannot read {path} ({exc}); everything is measured"
    why = _mismatch(data, result, device)
    if why:
        return None, f"--resume: the earlier run is not reused: {why}"
    prior = Prior(float(data.get("timestamp", 0.0)))
    fields = set(Measurement.__dataclass_fields__)
    for raw in data.get("measurements", []):
        if isinstance(raw, dict) and raw.get("ok") and set(raw) <= fields:
            m = Measurement(**raw)
            prior.measurements[key_of(m.unit, m.shape, m.vars, m.stage)] = m
    prior.built = {
        str(b.get("unit")) for b in data.get("builds", []) if isinstance(b, dict) and b.get("ok")
    }
    base_fields = set(Baseline.__dataclass_fields__)
    for raw in data.get("baselines", []):
        if isinstance(raw, dict) and raw.get("ok") and set(raw) <= base_fields:
            b = Baseline(**raw)
            prior.baselines[(b.shape, b.stage)] = b
    return prior, ""


def _mismatch(data: Any, result: TuneResult, device: dict[str, Any]) -> str:
    if not isinstance(data, dict):
        return "it is not a results file"
    checks = (
        ("instance", result.instance, "another instance"),
        ("source_hash", result.source_hash, "the instance renders differently now"),
        ("shapes", result.shapes, "other shapes"),
        ("method", result.method, "other timing settings or op list"),
    )
    for key, now, why in checks:
        if data.get(key) != now:
            return why
    before = (data.get("device") or {}).get("name")
    if before != device.get("name"):
        return f"it ran on {before or 'another GPU'}, this is {device.get('name') or 'unknown'}"
    return ""
