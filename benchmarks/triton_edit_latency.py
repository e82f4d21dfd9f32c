"""Edit -> diagnostics in the editor for the static layer of a Triton template: Inductor's
`flex_backwards.py.jinja`, opened in place from the torch source, with a plausible instance.

It starts `kls serve` over stdio (pygls's client), opens the template at the path the torch
locator resolves (`KLS_TORCH_SOURCE`, else the installed torch), and times N edits, one at a
time: didChange -> the first publishDiagnostics of that version, the static layer (parse, Jinja
checks, the per-instance Triton rules KT80x/KT81x). By default the workspace is untrusted
(`workspaceTrusted: false`): torch's render is off and the static layer is all there is. With
`--trusted` Inductor renders each text in the torch worker too; the static layer is published
first, without waiting for that render (kls.lsp.documents), and that first publish is what is
timed. Each edit
changes a Python comment inside the kernel and keeps the template valid, so every edit is
checked in full; every 10th edit plants a KT802 (an unknown buffer) and the next takes it out,
so the findings change too.

Usage: .venv/bin/python benchmarks/triton_edit_latency.py [--edits 500] [--trusted] [--out r.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsp_client import Client

RELATIVE = "_inductor/kernel/flex/templates/flex_backwards.py.jinja"
# A plausible flex backward instance: batch 2, 4 heads, 256 queries and keys, head dim 64;
# the tensors in def_kernel's order, then the output (dK).
ATTN = [2, 4, 256, 64]
TENSORS: dict[str, list[int]] = {
    "Q": ATTN,
    "K": ATTN,
    "V": ATTN,
    "LSE": [2, 4, 256],
    "DELTA": [2, 4, 256],
    "DO": ATTN,
    "DQ": ATTN,
    "DV": ATTN,
    "KV_NUM_BLKS": [2, 4, 2],
    "KV_IDX": [2, 4, 2, 2],
    "Q_NUM_BLKS": [2, 4, 2],
    "Q_IDX": [2, 4, 2, 2],
    "FULL_KV_NUM_BLKS": [2, 4, 2],
    "FULL_KV_IDX": [2, 4, 2, 2],
    "FULL_Q_NUM_BLKS": [2, 4, 2],
    "FULL_Q_IDX": [2, 4, 2, 2],
    "out": ATTN,
}
VARS = (
    "USE_TMA = false\nBLOCK_M = 64\nBLOCK_N = 64\nSM_SCALE = 0.125\n"
    "FLOAT32_PRECISION = \"'ieee'\"\n"
)


def torch_template() -> Path:
    """flex_backwards in the torch source the locator finds (what `torch:` names)."""
    from kls.upstream.locate import locate

    found = locate()
    if found.source is None:
        sys.exit(f"kls: {found.not_found_message()}")
    return (found.source.package / RELATIVE).resolve()


def write_project(folder: Path) -> Path:
    lines = ["[instances.flex_bwd]", 'profile = "triton"', f'template = "torch:{RELATIVE}"']
    lines += [f'tensors.{n} = {{ shape = {s}, dtype = "bf16" }}' for n, s in TENSORS.items()]
    config = folder / "kls.toml"
    config.write_text("\n".join(lines) + "\n[instances.flex_bwd.vars]\n" + VARS)
    return config


def edit_for(version: int, comment: str, call: str) -> tuple[str, str]:
    """(the comment line's text, the size() line's text) at `version`."""
    planted = call.replace('size("Q"', 'size("QQ"', 1) if version % 10 == 0 else call
    return f"{comment} kls{version}", planted


async def measure(edits: int, trusted: bool) -> dict[str, Any]:
    template = torch_template()
    text = template.read_text(encoding="utf-8")
    lines = text.split("\n")
    comment_line = next(i for i, s in enumerate(lines) if s.strip().startswith("# ") and i > 10)
    call_line = next(i for i, s in enumerate(lines) if '{{size("Q",' in s)
    with tempfile.TemporaryDirectory(prefix="kls-triton-bench-") as folder:
        config = write_project(Path(folder))
        c = Client(template.as_uri(), "python-jinja")
        await c.start({"workspaceTrusted": trusted, "instancesFile": str(config)})
        t0 = time.perf_counter()
        c.open(text)
        first = await c.wait_version(1) - t0
        opened = c.published[1][1]
        comment, call = lines[comment_line], lines[call_line]
        current = (comment, call)
        latencies: list[float] = []
        planted_seen = 0
        missed: list[int] = []
        for version in range(2, edits + 2):
            new = edit_for(version, comment, call)
            sent = time.perf_counter()
            changes = [(comment_line, current[0], new[0])]
            if new[1] != current[1]:
                changes.append((call_line, current[1], new[1]))
            c.change(version, changes)
            current = new
            latencies.append(await c.wait_version(version) - sent)
            if version % 10 == 0:
                found = c.published[version][1]
                seen = any(d.code == "KT802" for d in found)
                planted_seen += seen
                if not seen:
                    missed.append(version)
        await c.stop()
    ms = sorted(s * 1000 for s in latencies)
    return {
        "template": str(template),
        "edits": edits,
        "trusted": trusted,
        "first_diagnostics_ms": round(first * 1000, 1),
        "diagnostics_at_open": [f"{d.code} {d.message[:80]}" for d in opened],
        "planted_kt802_reported": f"{planted_seen} of {edits // 10}",
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[min(len(ms) - 1, round(0.90 * (len(ms) - 1)))], 2),
        "p99_ms": round(ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))], 2),
        "min_ms": round(ms[0], 2),
        "max_ms": round(ms[-1], 2),
        "stdev_ms": round(statistics.pstdev(ms), 2),
        "latencies_ms": [round(s * 1000, 1) for s in latencies],
        "planted_missed": missed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--trusted", action="store_true", help="render with torch too")
    args = parser.parse_args()
    gc.freeze()  # this client's own collections would count as the server's latency
    machine = (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average before {os.getloadavg()[0]:.2f}"
    )
    result = {"machine": machine, **await measure(args.edits, args.trusted)}
    result["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
