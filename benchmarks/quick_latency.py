"""Save -> first compile diagnostics with the quick tier, as the editor runs it (issue 15).

    python benchmarks/quick_latency.py templates/kls.toml sm90_bf16_8192 [--saves 30]

Builds the instance's preamble once (timed: the background build the editor starts when a
template is opened), then times `saves` quick checks with a warm preamble, each of a new
text (a mistake planted, then fixed, alternately: what a save is). Each check is what the
language server runs on save before nvcc: render in the worker process, then clang against
the preamble. Prints the preamble build, p50, p90, p99 and max, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from kls.compile import CompileOptions
from kls.compile.preamble import PreambleStore
from kls.compile.quick import _Quick, quick_check
from kls.compile.run import CompileResult
from kls.instances import load_instances


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", type=Path)
    ap.add_argument("instance")
    ap.add_argument("--saves", type=int, default=30)
    args = ap.parse_args()
    spec = load_instances(args.config).instances[args.instance]
    options = CompileOptions()
    store = PreambleStore()
    probe = CompileResult(spec.name, "quick", ok=True)
    quick = _Quick.prepare(spec, options, None, probe, store)
    if quick is None or quick.key is None:
        print(f"cannot run the quick tier: {probe.notice}")
        return 1
    print(f"load before: {os.getloadavg()}")
    folder = store.cache.folder(quick.key)
    for child in folder.iterdir() if folder.is_dir() else ():  # a cold build, timed
        if child.name != ".lock":
            child.unlink()
    started = time.monotonic()
    preamble = quick._build(None, background=True)
    seconds = time.monotonic() - started
    print(f"preamble build (background priority): {seconds:.2f} s, ok={preamble.ok}")
    template = Path(spec.template).resolve()
    text = template.read_text(encoding="utf-8")
    anchor = "  return 0;\n}"
    times: list[float] = []
    for i in range(args.saves):
        edited = text.replace(anchor, f"  return {i} +;\n}}" if i % 2 else f"  return {i};\n}}", 1)
        started = time.monotonic()
        result = quick_check(
            spec, options, {template: edited}, store=store, wait_for_preamble=False
        )
        times.append(time.monotonic() - started)
        assert result.notice is None and bool(result.findings) == bool(i % 2), result.findings
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    print(
        f"save -> quick diagnostics, {len(times)} saves: p50 {statistics.median(times):.2f} s, "
        f"p90 {pick(0.9):.2f} s, p99 {pick(0.99):.2f} s, max {times[-1]:.2f} s"
    )
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
