"""Tune results: plain data, the JSON and CSV files, the terminal table, the winner.

results.json is `TuneResult.to_json()`, read back only through `TuneResult.from_json()` (or
`read_results`): its `format_version` says which layout it has. A file from before the
version (no `format_version`) has today's layout and reads as version 1; one of a later
version than this kls knows is refused with a message that says so.

Versions: 1, the first layout; 2 adds `runtime_space` (how many runtime-argument settings
the tune table listed, how many the profile refused or found alike, how many were timed
under the cap) and `dispatch` (the best configuration of each M bucket). A version-1 file
reads with both empty. 3 adds a dispatch bucket's `n`: the one N it serves (`dispatch = "mn"`),
null for every N; a version-2 bucket reads as serving every N.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from kls.cache_dir import write_atomic

FORMAT_VERSION = 3  # results.json's `format_version`; raise it when a field changes meaning


class ResultsFileError(ValueError):
    """A results.json that this kls cannot read as tune results; the message says why."""


@dataclass
class BuildRecord:
    unit: str
    op: str
    conf_name: str
    family: str
    tile: str
    build_vars: dict[str, Any]
    ok: bool | None = None  # None: not built (cancelled)
    cached: bool = False
    seconds: float = 0.0
    error: str = ""
    node: str = ""
    library: str | None = None
    current: bool = False  # the instance's own op
    level: str = "0"  # the cutlass_instantiation_level whose op list holds `op`


@dataclass
class Measurement:
    unit: str
    vars: dict[str, Any]
    shape: str  # "MxNxK"
    stage: int
    ok: bool
    median_ms: float | None = None
    spread: float | None = None
    samples: int = 0
    tflops: float | None = None
    max_error: float | None = None
    error: str = ""
    sm_clock_mhz: float | None = None  # median NVML reading while timed (None: no NVML)
    power_w: float | None = None


@dataclass
class Baseline:
    """cuBLAS for one shape, timed as one stage's candidates are (a stage-1 candidate is
    compared with the stage-1 bar: short timings run at higher clocks than long ones)."""

    shape: str
    ok: bool
    median_ms: float | None = None  # the lower of the runs before and after the candidates
    runs_ms: list[float] = field(default_factory=list)
    spread: float | None = None
    library: str = ""
    error: str = ""
    stage: int = 2
    sm_clock_mhz: float | None = None
    power_w: float | None = None


@dataclass
class ShapeBest:
    shape: str
    unit: str | None
    op: str | None
    vars: dict[str, Any]
    median_ms: float | None
    spread: float | None
    tflops: float | None
    cublas_ms: float | None
    vs_cublas: float | None  # cuBLAS time / candidate time: > 1 is faster than cuBLAS


@dataclass
class Choice:
    """One configuration (op + variables) judged over every shape."""

    unit: str
    op: str
    vars: dict[str, Any]
    geomean_vs_cublas: float | None  # geometric mean over shapes of cuBLAS time / its time
    per_shape: dict[str, float]  # shape -> cuBLAS time / its time


@dataclass
class BucketChoice:
    """The dispatch's configuration for GEMMs whose M lies in (m_above, m_upto] (m_upto None:
    no upper bound) and, when `n` is set, whose N is `n`, judged by the geometric mean over
    the tuned shapes it serves."""

    m_above: int  # 0 for the first bucket
    m_upto: int | None
    shapes: list[str]  # the tuned shapes the bucket was judged on
    choice: Choice
    n: int | None = None  # None: every N of the M range (format 3)


@dataclass
class TuneResult:
    instance: str
    template: str
    config: str
    executor: str
    timestamp: float
    shapes: list[str]
    candidates: int = 0  # build units x runtime combinations
    compatible_ops: int = 0
    distinct_ops: int = 0
    selected_ops: int = 0
    runtime_combos: list[dict[str, Any]] = field(default_factory=list)
    builds: list[BuildRecord] = field(default_factory=list)
    build_seconds: float = 0.0
    measurements: list[Measurement] = field(default_factory=list)
    baselines: list[Baseline] = field(default_factory=list)
    best: list[ShapeBest] = field(default_factory=list)
    winner: Choice | None = None
    current: Choice | None = None  # the instance's own op and variables, when measured
    device: dict[str, Any] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    build_only: bool = False
    cancelled: bool = False
    partial: bool = False  # a checkpoint, written while the run went on (or a run killed since)
    files: dict[str, str] = field(default_factory=dict)
    # `kls.bench.run.source_hash` of the instance's render when the tune started: the editor
    # marks the result stale once the template or the instance renders differently.
    source_hash: str = ""
    # Format 2: listed / refused / alike / distinct / timed settings of the runtime
    # arguments and the cap on them (kls.tune.candidates), and the per-M-bucket dispatch.
    runtime_space: dict[str, int] = field(default_factory=dict)
    dispatch: list[BucketChoice] = field(default_factory=list)

    @property
    def builds_ok(self) -> int:
        return sum(1 for b in self.builds if b.ok)

    @property
    def builds_failed(self) -> int:
        return sum(1 for b in self.builds if b.ok is False)

    def builds_per_minute(self) -> float | None:
        built = sum(1 for b in self.builds if b.ok is not None and not b.cached)
        if not built or self.build_seconds <= 0:
            return None
        return built / self.build_seconds * 60.0

    def cublas_ms(self, stage: int) -> dict[str, float]:
        """Shape -> cuBLAS time with that stage's timing settings."""
        return {
            b.shape: b.median_ms
            for b in self.baselines
            if b.ok and b.median_ms and b.stage == stage
        }

    def geomean_best(self) -> float | None:
        return geomean([b.vs_cublas for b in self.best if b.vs_cublas])

    def to_json(self) -> dict[str, Any]:
        data = {"format_version": FORMAT_VERSION, **asdict(self)}
        data["summary"] = {
            "builds_ok": self.builds_ok,
            "builds_failed": self.builds_failed,
            "builds_per_minute": self.builds_per_minute(),
            "geomean_best_vs_cublas": self.geomean_best(),
            "worst_best_vs_cublas": min(
                (b.vs_cublas for b in self.best if b.vs_cublas), default=None
            ),
        }
        return data

    @staticmethod
    def from_json(data: Any) -> TuneResult:
        """The result `to_json` wrote (the summary is derived, so it is not read back)."""
        if not isinstance(data, dict):
            raise ResultsFileError("it is not a tune results file (not a JSON object)")
        version = data.get("format_version", 1)  # none: written before the version existed
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ResultsFileError(f"its format_version is {version!r}, not a version number")
        if version > FORMAT_VERSION:
            raise ResultsFileError(
                f"it was written by a newer kls (results format {version}; this kls reads "
                f"format {FORMAT_VERSION} and older): upgrade kls, or tune again to replace it"
            )
        result = _record(TuneResult, data, "the results")
        result.builds = _records(BuildRecord, data.get("builds"), "builds")
        result.measurements = _records(Measurement, data.get("measurements"), "measurements")
        result.baselines = _records(Baseline, data.get("baselines"), "baselines")
        result.best = _records(ShapeBest, data.get("best"), "best")
        for key in ("winner", "current"):
            raw = data.get(key)
            setattr(result, key, None if raw is None else _record(Choice, raw, key))
        result.dispatch = [_bucket(raw, i) for i, raw in enumerate(data.get("dispatch") or [])]
        return result


def _bucket(raw: Any, index: int) -> BucketChoice:
    where = f"dispatch[{index}]"
    bucket = _record(BucketChoice, raw, where)
    bucket.choice = _record(Choice, bucket.choice, f"{where}.choice")
    return bucket


def read_results(path: Path) -> TuneResult:
    """results.json as a TuneResult: OSError when it cannot be read, ResultsFileError when it
    is not tune results this kls knows."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ResultsFileError(f"{path} is not JSON ({exc})") from None
    try:
        return TuneResult.from_json(data)
    except ResultsFileError as exc:
        raise ResultsFileError(f"{path}: {exc}") from None


Record = TypeVar("Record")


def _record(cls: type[Record], raw: Any, what: str) -> Record:
    """One dataclass from its JSON table: keys it does not have are dropped, a missing key
    without a default is an error."""
    if not isinstance(raw, dict):
        raise ResultsFileError(f"{what} is not a JSON object")
    known = fields(cls)  # type: ignore[arg-type]
    missing = [
        f.name
        for f in known
        if f.name not in raw and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ResultsFileError(f"{what} lacks {', '.join(missing)}")
    return cls(**{f.name: raw[f.name] for f in known if f.name in raw})


def _records(cls: type[Record], raw: Any, what: str) -> list[Record]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ResultsFileError(f"{what} is not a JSON list")
    return [_record(cls, item, f"{what}[{i}]") for i, item in enumerate(raw)]


def geomean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def shape_key(shape: tuple[int, int, int]) -> str:
    return "x".join(str(v) for v in shape)


def flops(shape: str) -> float:
    m, n, k = (int(v) for v in shape.split("x"))
    return 2.0 * m * n * k


def vars_text(values: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or "-"


def to_csv(result: TuneResult) -> str:
    """One row per build, per measurement (kind: stage1, stage2) and per cuBLAS bar (kind:
    cublas_stage1, cublas: stage 2); a measurement's vs_cublas is against its stage's bar."""
    ops = {b.unit: b for b in result.builds}
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(
        ["kind", "shape", "unit", "op", "family", "vars", "ok", "median_ms", "spread",
         "samples", "tflops", "vs_cublas", "seconds", "sm_mhz", "power_w", "error"]
    )  # fmt: skip
    for b in result.builds:
        w.writerow(
            ["build", "", b.unit, b.op, b.family, vars_text(b.build_vars), b.ok, "", "", "",
             "", "", f"{b.seconds:.2f}", "", "", b.error[:300]]
        )  # fmt: skip
    bars = {stage: result.cublas_ms(stage) for stage in (1, 2)}
    for m in result.measurements:
        base = bars.get(m.stage, {}).get(m.shape)
        ratio = base / m.median_ms if base and m.median_ms else None
        rec = ops.get(m.unit)
        w.writerow(
            [f"stage{m.stage}", m.shape, m.unit, rec.op if rec else "",
             rec.family if rec else "",
             vars_text(m.vars), m.ok, _f(m.median_ms), _f(m.spread), m.samples, _f(m.tflops),
             _f(ratio), "", _f(m.sm_clock_mhz), _f(m.power_w), m.error[:300]]
        )  # fmt: skip
    for base_row in result.baselines:
        w.writerow(
            ["cublas" if base_row.stage == 2 else f"cublas_stage{base_row.stage}",
             base_row.shape, "", base_row.library, "", "", base_row.ok,
             _f(base_row.median_ms), _f(base_row.spread), "", "", "", "",
             _f(base_row.sm_clock_mhz), _f(base_row.power_w), base_row.error]
        )  # fmt: skip
    return out.getvalue()


def _f(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


PREVIOUS = "results.previous.json"


def keep_previous_winner(result: TuneResult, folder: Path) -> None:
    """A run without a winner (--build-only, cancelled, every candidate failed, a mid-run
    checkpoint) does not wipe out the last run that found one: that results.json is kept as
    results.previous.json, and a note says so."""
    path = folder / "results.json"
    if result.winner is not None:
        return
    try:
        old = read_results(path)
    except (OSError, ResultsFileError):
        return
    if old.winner is not None and not old.partial:
        with contextlib.suppress(OSError):
            os.replace(path, folder / PREVIOUS)
            result.notes.append(
                f"the last results with a winner are kept in {folder / PREVIOUS} (this run "
                "found none)"
            )


def write_files(result: TuneResult, folder: Path, plot_svg: str | None) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    keep_previous_winner(result, folder)
    files = {"json": str(folder / "results.json"), "csv": str(folder / "results.csv")}
    if plot_svg is not None:
        files["plot"] = str(folder / "plot.svg")
        write_atomic(folder / "plot.svg", plot_svg.encode())
    result.files = files
    write_atomic(folder / "results.json", json.dumps(result.to_json(), indent=1).encode())
    write_atomic(folder / "results.csv", to_csv(result).encode())
    return files


def table(result: TuneResult) -> str:
    """The terminal summary."""
    lines: list[str] = []
    if result.build_only or not result.best:
        lines.append(f"{'unit':10} {'built':7} {'time':>7}  op")
        for b in result.builds:
            status = "cached" if b.cached and b.ok else ("ok" if b.ok else "FAILED")
            if b.ok is None:
                status = "skipped"
            lines.append(f"{b.unit:10} {status:7} {b.seconds:6.1f}s  {b.conf_name or b.op}")
            if b.ok is False and b.error:
                lines.append(f"{'':10} {b.error[:200]}")
    if result.best:
        ops = {b.unit: b for b in result.builds}
        lines.append(
            f"{'shape':18} {'best ms':>9} {'±':>5} {'TFLOP/s':>8} {'cuBLAS ms':>9} "
            f"{'vs cuBLAS':>9}  op (variables)"
        )
        for s in result.best:
            rec = ops.get(s.unit or "")
            name = f"{rec.tile} {rec.family}" if rec else "-"
            lines.append(
                f"{s.shape:18} {_num(s.median_ms, 4):>9} {_pct(s.spread):>5} "
                f"{_num(s.tflops, 0):>8} {_num(s.cublas_ms, 4):>9} {_ratio(s.vs_cublas):>9}  "
                f"{name} ({vars_text(s.vars)})"
            )
        lines.append(f"geomean of the per-shape best vs cuBLAS: {_ratio(result.geomean_best())}")
    if result.winner:
        w = result.winner
        lines.append(
            f"winner (one configuration for every shape): {w.op} ({vars_text(w.vars)}), "
            f"geomean {_ratio(w.geomean_vs_cublas)} of cuBLAS"
        )
        if result.current and result.current.geomean_vs_cublas and w.geomean_vs_cublas:
            margin = w.geomean_vs_cublas / result.current.geomean_vs_cublas - 1
            lines.append(
                f"current ({vars_text(result.current.vars)}): geomean "
                f"{_ratio(result.current.geomean_vs_cublas)}; the winner is {margin:+.1%}"
            )
    for bucket in result.dispatch:
        c = bucket.choice
        upto = "" if bucket.m_upto is None else f"{bucket.m_upto}"
        n = "" if bucket.n is None else f", N = {bucket.n}"
        lines.append(
            f"dispatch M in ({bucket.m_above}, {upto or 'inf'}]{n}: {c.op} "
            f"({vars_text(c.vars)}), geomean {_ratio(c.geomean_vs_cublas)} of cuBLAS over "
            f"{len(bucket.shapes)} shape(s)"
        )
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"
