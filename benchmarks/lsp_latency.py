"""Drive `kls serve` over stdio and measure what an editor user feels.

- start -> first diagnostics for the largest shipped template (new server process each run);
- didChange -> publishDiagnostics latency over 500 edits (one edit at a time, waiting for its
  publish), p50/p99;
- preview refresh: didChange, then `kls/preview` until it returns the edited text.

Usage: .venv/bin/python benchmarks/lsp_latency.py [--edits 500] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import time
from pathlib import Path

from lsp_client import Client

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "cutlass3x_gemm.cu.jinja"


async def start_to_first_diagnostics() -> float:
    t0 = time.perf_counter()
    c = Client(TEMPLATE.as_uri(), "cuda-jinja")
    await c.start()
    c.open(TEMPLATE.read_text())
    t1 = await c.wait_version(1, timeout=60)
    await c.stop()
    return t1 - t0


async def edit_latencies(edits: int) -> tuple[list[float], list[float]]:
    c = Client(TEMPLATE.as_uri(), "cuda-jinja")
    await c.start()
    lines = TEMPLATE.read_text().split("\n")
    c.open("\n".join(lines))
    await c.wait_version(1, timeout=60)
    # Edit a comment line back and forth: every edit changes the text and is re-checked.
    line = next(i for i, s in enumerate(lines) if s.startswith("// The exported entry"))
    original = lines[line]
    latencies = []
    current = original
    for version in range(2, edits + 2):
        new = original + f" {version}" if version % 2 else original
        sent = time.perf_counter()
        c.change(version, [(line, current, new)])
        current = new
        latencies.append(await c.wait_version(version) - sent)
    previews = []
    for version in range(edits + 2, edits + 22):
        new = original + f" preview{version}"
        sent = time.perf_counter()
        c.change(version, [(line, current, new)])
        current = new
        while True:
            answer = await c.client.protocol.send_request_async(
                "kls/preview", {"uri": TEMPLATE.as_uri()}
            )
            if f"preview{version}" in answer.text:
                break
        previews.append(time.perf_counter() - sent)
    await c.stop()
    return latencies, previews


def summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (
        f"| {name} | {len(ms)} | {statistics.median(ms):.1f} ms | {p99:.1f} ms | "
        f"{ms[0]:.1f}–{ms[-1]:.1f} ms |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    # This client's own full garbage collections (20-40 ms) would count as server latency.
    gc.freeze()
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}, "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    starts = [await start_to_first_diagnostics() for _ in range(args.starts)]
    latencies, previews = await edit_latencies(args.edits)
    print("| what | n | median | p99 | min–max |")
    print("|---|---|---|---|---|")
    print(summary("start → first diagnostics (cutlass3x_gemm, 4 instances)", starts))
    print(summary("didChange → publishDiagnostics", latencies))
    print(summary("didChange → preview shows the edit", previews))
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    asyncio.run(main())
