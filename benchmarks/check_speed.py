"""Measure `kls check`: cold CLI wall time, and warm per-template check time in one process.

Usage: python benchmarks/check_speed.py [--runs-cold 5] [--runs-warm 50]
Prints a Markdown table; numbers go to docs/PERFORMANCE.md by hand, with machine and method, and
the dated run to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kls.checks.run import ModelCache, check_file
from kls.instances import load_instances

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
KLS = str(Path(sys.executable).parent / "kls")


def cold_cli(runs: int, empty_cache: bool) -> list[float]:
    times = []
    for _ in range(runs):
        env = dict(os.environ)
        if empty_cache:
            env["KLS_CACHE_DIR"] = tempfile.mkdtemp(prefix="kls-bench-")
        start = time.perf_counter()
        subprocess.run([KLS, "check", str(TEMPLATES)], env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def warm_check(path: Path, runs: int) -> list[float]:
    instances = load_instances(TEMPLATES / "kls.toml")
    text = path.read_text()
    check_file(path, text, instances, ModelCache({path: text}))  # warm caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        check_file(path, text, instances, ModelCache({path: text}))
        times.append(time.perf_counter() - start)
    return times


def row(name: str, samples: list[float], unit: float, label: str) -> str:
    med = statistics.median(samples) * unit
    lo, hi = min(samples) * unit, max(samples) * unit
    spread = "n/a (< 10 runs)"
    if len(samples) >= 10:
        q = statistics.quantiles(samples, n=10)
        spread = f"{q[0] * unit:.1f}–{q[-1] * unit:.1f}"
    return f"| {name} | {len(samples)} | {med:.1f} {label} | {lo:.1f}–{hi:.1f} | {spread} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs-cold", type=int, default=5)
    parser.add_argument("--runs-warm", type=int, default=50)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    print("| what | runs | median | min–max | p10–p90 |")
    print("|---|---|---|---|---|")
    print(
        row("cold `kls check templates/`, empty op cache", cold_cli(args.runs_cold, True), 1, "s")
    )
    print(
        row("cold `kls check templates/`, warm op cache", cold_cli(args.runs_cold, False), 1, "s")
    )
    templates = sorted(TEMPLATES.glob("*.jinja"), key=lambda p: p.stat().st_size, reverse=True)
    for path in templates:
        print(row(f"warm check_file `{path.name}`", warm_check(path, args.runs_warm), 1000, "ms"))


if __name__ == "__main__":
    main()
