"""Rebuild the plot and the table of a `kls tune` run whose cuBLAS baseline came from a
separate run, comparing the stage-1 best of each shape against cuBLAS: from
benchmarks/tune_cublas.py (timed with the stage-1 settings, the lower of its two runs) or from
benchmarks/inductor_autotune.py (its cuBLAS column), and print Inductor's own choice beside it
when the second file is the latter.

    python benchmarks/tune_plot.py results.json cublas.json|inductor.json --svg out.svg
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from kls.tune.plot import svg
from kls.tune.results import Baseline, BuildRecord, Measurement, ShapeBest, TuneResult, flops


def load(results: Path, cublas: Path) -> TuneResult:
    data: dict[str, Any] = json.loads(results.read_text())
    rows = cublas_rows(json.loads(cublas.read_text()))
    r = TuneResult(
        data["instance"], data["template"], data["config"], data["executor"],
        data["timestamp"], data["shapes"], device=data["device"],
    )  # fmt: skip
    r.builds = [BuildRecord(**b) for b in data["builds"]]
    r.measurements = [Measurement(**m) for m in data["measurements"] if m["stage"] == 1]
    for shape in r.shapes:
        runs = [
            x["timing"]["median"]
            for x in rows
            if x["shape"] == shape and x["timing_of"] == "stage1" and x.get("ok")
        ]
        bar = Baseline(shape, bool(runs), min(runs) if runs else None, runs, stage=1)
        r.baselines.append(bar)
        ok = [m for m in r.measurements if m.shape == shape and m.ok and m.median_ms]
        best = min(ok, key=lambda m: m.median_ms or 0.0)
        base = min(runs) if runs else None
        r.best.append(
            ShapeBest(
                shape, best.unit, None, best.vars, best.median_ms, best.spread, best.tflops,
                base, base / best.median_ms if base and best.median_ms else None,
            )
        )  # fmt: skip
    return r


def cublas_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """tune_cublas.py's rows, or inductor_autotune.py's cuBLAS medians in that form."""
    if "rows" in data:
        rows: list[dict[str, Any]] = data["rows"]
        return rows
    return [
        {
            "shape": shape,
            "timing_of": "stage1",
            "ok": True,
            "timing": {"median": row["cublas"]["median_ms"]},
        }
        for shape, row in data["shapes"].items()
        if "cublas" in row
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("cublas", type=Path)
    p.add_argument("--svg", type=Path, required=True)
    args = p.parse_args()
    r = load(args.results, args.cublas)
    other = json.loads(args.cublas.read_text())
    inductor = other.get("shapes", {}) if "rows" not in other else {}
    args.svg.write_text(svg(r))
    ops = {b.unit: b for b in r.builds}
    current = {m.shape: m for m in r.measurements if ops[m.unit].current and m.ok}
    ratios = []
    for b in r.best:
        assert b.median_ms and b.cublas_ms and b.unit and b.vs_cublas
        op = ops[b.unit]
        cur = current[b.shape].median_ms or 1.0
        ratios.append(b.vs_cublas)
        print(
            f"| {b.shape} | {op.tile}, {op.family} | {b.median_ms * 1e3:.1f} µs "
            f"({(b.spread or 0) * 100:.1f} %) | {flops(b.shape) / b.median_ms / 1e9:.0f} | "
            f"{b.cublas_ms * 1e3:.1f} µs | {flops(b.shape) / b.cublas_ms / 1e9:.0f} | "
            f"**{b.vs_cublas:.3f}** | {b.cublas_ms / cur:.3f} |" + _inductor(inductor, b)
        )
    print("geomean", math.exp(sum(map(math.log, ratios)) / len(ratios)))


def _inductor(inductor: dict[str, Any], b: ShapeBest) -> str:
    row = inductor.get(b.shape)
    if not row or "inductor" not in row or not b.median_ms:
        return ""
    t = row["inductor"]["median_ms"]
    return f" {row['choice']} | {t * 1e3:.1f} µs | {t / b.median_ms:.3f} |"


if __name__ == "__main__":
    main()
