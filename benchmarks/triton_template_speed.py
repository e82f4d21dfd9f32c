"""How long kls takes to render and compile the shipped Triton instances on this machine (no
GPU): the torch worker's start, each instance's render through Inductor, and Triton's compile
for the instance's arch (ptxas and cuobjdump of the triton wheel).

Every repetition starts a fresh worker with empty caches (kls's, Inductor's and Triton's, in a
temporary folder), so each figure is a cold one: the first render of a repetition also pays for
what Inductor sets up on first use. Run from the repository root:

    KLS_TORCH_SOURCE=... python benchmarks/triton_template_speed.py --repeat 3 --out speed.json

Prints one line an instance (median, min, max of the repetitions) and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from kls.compile.triton import compile_triton  # noqa: E402
from kls.instances import load_instances  # noqa: E402
from kls.profiles.triton import client  # noqa: E402
from kls.sandbox.workers import render_isolated  # noqa: E402


def _fresh_worker(folder: str) -> None:
    """A new worker whose caches (and Triton's) live in `folder`, started now."""
    os.environ["KLS_CACHE_DIR"] = os.path.join(folder, "kls")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
    old = client._SHARED
    if old is not None and old._proc is not None:
        old._kill(old._proc)
    client._SHARED = None


def _one_repetition(config: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kls-speed-") as folder:
        _fresh_worker(folder)
        start = time.perf_counter()
        client.shared_worker()._started()
        out["(worker start)"] = {"start_s": time.perf_counter() - start}
        for name in names:
            spec = load_instances(config).instances[name]
            start = time.perf_counter()
            rendered = render_isolated(spec)
            render_s = time.perf_counter() - start
            if rendered.text is None:
                raise SystemExit(f"{name} did not render: {[f.message for f in rendered.findings]}")
            start = time.perf_counter()
            ok, findings, _, answer, _ = compile_triton(spec)
            compile_s = time.perf_counter() - start
            if not ok:
                raise SystemExit(f"{name} did not compile: {[f.message for f in findings]}")
            out[name] = {
                "render_s": render_s,
                "compile_s": compile_s,
                "registers": answer.get("registers"),
                "shared_bytes": answer.get("shared"),
                "spilled_bytes": (answer.get("stack") or 0) + (answer.get("local") or 0),
            }
    _fresh_worker(tempfile.gettempdir())
    return out


def _summary(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name in runs[0]:
        entry: dict[str, Any] = {}
        for key in runs[0][name]:
            values = [run[name][key] for run in runs]
            if key.endswith("_s"):
                entry[key] = {
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                }
            else:
                entry[key] = values[0]
        summary[name] = entry
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "templates" / "kls.toml")
    parser.add_argument("--instance", action="append", help="only these (default: all Triton)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    instances = load_instances(args.config).instances
    names = args.instance or [n for n, i in instances.items() if i.profile == "triton"]
    runs = [_one_repetition(args.config, names) for _ in range(args.repeat)]
    summary = _summary(runs)
    for name, entry in summary.items():
        times = ", ".join(
            f"{k[:-2]} {v['median']:.2f} s ({v['min']:.2f}-{v['max']:.2f})"
            for k, v in entry.items()
            if k.endswith("_s")
        )
        used = (
            f"; {entry['registers']} registers, {entry['shared_bytes']} B shared, "
            f"{entry['spilled_bytes']} B spilled"
            if "registers" in entry
            else ""
        )
        print(f"{name}: {times}{used}")
    report = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "repeat": args.repeat}
    args.out.write_text(json.dumps({**report, "instances": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
