"""Render time of the largest shipped template (cutlass3x_gemm.cu.jinja, instance
sm90_bf16_4096_bias, with its argument and epilogue sub-templates), in one process.

- warm: the same text again (compiled template code is cached), as `kls check` of an unchanged
  file or a benchmark build re-render;
- edited: the main template's text differs every time (a changing comment line), so Jinja
  compiles it again, as on every keystroke in the editor.

Each row gives wall time and the process's CPU time (`time.process_time`), which other
processes on a shared machine disturb much less.

Usage: .venv/bin/python benchmarks/render_speed.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from kls.instances import load_instances
from kls.render import render

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = "sm90_bf16_4096_bias"


def summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p10, p90 = ms[len(ms) // 10], ms[(9 * len(ms)) // 10]
    return (
        f"| {name} | {len(ms)} | {statistics.median(ms):.2f} ms | {ms[0]:.2f}–{ms[-1]:.2f} | "
        f"{p10:.2f}–{p90:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    instance = load_instances(ROOT / "templates" / "kls.toml").instances[INSTANCE]
    text = instance.template.read_text()
    for _ in range(5):
        render(instance)
    warm: list[float] = []
    warm_cpu: list[float] = []
    for _ in range(args.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        result = render(instance)
        warm.append(time.perf_counter() - t0)
        warm_cpu.append(time.process_time() - c0)
        assert result.text is not None
    edited: list[float] = []
    edited_cpu: list[float] = []
    for i in range(args.runs):
        overrides = {instance.template: text + f"// edit {i}\n"}
        t0, c0 = time.perf_counter(), time.process_time()
        result = render(instance, overrides)
        edited.append(time.perf_counter() - t0)
        edited_cpu.append(time.process_time() - c0)
        assert result.text is not None
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    print("| what | runs | median | min–max | p10–p90 |")
    print("|---|---|---|---|---|")
    print(summary(f"render {INSTANCE}, warm (code cached), wall", warm))
    print(summary(f"render {INSTANCE}, warm (code cached), CPU", warm_cpu))
    print(summary(f"render {INSTANCE}, edited text (compiles), wall", edited))
    print(summary(f"render {INSTANCE}, edited text (compiles), CPU", edited_cpu))


if __name__ == "__main__":
    main()
