"""Save -> first compile diagnostics with the quick tier, as the editor runs it (figures:
docs/PERFORMANCE.md).

    python benchmarks/quick_latency.py templates/kls.toml sm90_bf16_8192 [--saves 30]
        [--plain-saves 10]

Builds the instance's two preambles as the editor does when a template is opened, each timed
(background priority): the plain one (the first usable), then the warm one (with the entry
code's warm-up, chained on the plain one). Times `plain-saves` quick checks against the plain
preamble alone (the saves made while the warm one builds, without its competition), then
`saves` with the warm preamble, each of a new text (a mistake planted, then fixed, alternately:
what a save is). Each check is what the language server runs on save before nvcc: render in
the worker process, then clang against the preamble. Prints both builds, p50, p90, p99 and
max, with the load average.
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
    ap.add_argument("--plain-saves", type=int, default=10)
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
    folder = store.cache.folder(quick.key)  # cold builds, timed (a new plain PCH: a new warm key)
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.name != ".lock":
            child.unlink()
    started = time.monotonic()
    plain = quick._build(None, background=True)
    plain_s = time.monotonic() - started
    print(f"stage 1, plain preamble build (background priority): {plain_s:.2f} s, ok={plain.ok}")
    template = Path(spec.template).resolve()
    text = template.read_text(encoding="utf-8")
    anchor = "  return 0;\n}"

    def saves(count: int, wait: bool) -> list[float]:
        times: list[float] = []
        for i in range(count):
            new = f"  return {i} +;\n}}" if i % 2 else f"  return {i};\n}}"
            edited = text.replace(anchor, new, 1)
            started = time.monotonic()
            result = quick_check(
                spec, options, {template: edited}, store=store, wait_for_preamble=wait
            )
            times.append(time.monotonic() - started)
            assert result.notice is None and bool(result.findings) == bool(i % 2), result.findings
        return sorted(times)

    def report(label: str, times: list[float]) -> None:
        def pick(q: float) -> float:
            return times[min(len(times) - 1, int(q * len(times)))]

        print(
            f"{label}, {len(times)} saves: p50 {statistics.median(times):.2f} s, "
            f"p90 {pick(0.9):.2f} s, p99 {pick(0.99):.2f} s, max {times[-1]:.2f} s"
        )

    if args.plain_saves:
        # wait_for_preamble: the CLI's path, which starts no warm build behind the saves
        report("save -> quick diagnostics, plain preamble", saves(args.plain_saves, True))
    started = time.monotonic()
    warm = quick._build_warm(None, background=True)
    warm_s = time.monotonic() - started
    print(
        f"stage 2, warm preamble build (background priority): {warm_s:.2f} s, "
        f"ok={warm is not None}; open -> warm preamble {plain_s + warm_s:.2f} s"
    )
    report("save -> quick diagnostics, warm preamble", saves(args.saves, False))
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
