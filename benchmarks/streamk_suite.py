"""kls's own stream-K GEMM over its 12-shape suite on a GPU, kernel against kernel with cuBLAS
in one run: every side timed with kls.bench.graph_timing (CUDA-graph replays; L2 flushed
with the flush's own time subtracted, and L2 warm), each configuration verified first.

The instance is templates/kls.toml's sm90_streamk_bf16 (templates/cutlass3x_streamk_gemm.cu.jinja,
profile torch-2.11-streamk): M, N, K and the stream-K scheduler's swizzle, splits,
decomposition, reduction and raster are runtime arguments, so one library per op serves the
whole search. The ops and settings are its tune table's (kls.tune.candidates: the profile's
canonical settings, refused and alike ones dropped). Three phases:

- A (screen): every op at the instance's own setting on every shape, and cuBLAS: L2 flushed,
  20 launches a graph, 5 replays;
- B (screen, same timing): for each M bucket, that bucket's shapes' fastest ops of phase A,
  filled up by their geometric mean over the bucket to --ops-per-bucket, each with every
  setting on every shape of the bucket; the settings are the outer loop, so a run stopped
  by --budget-s has covered the buckets alike;
- C (full timing: L2 flushed 50 launches, L2 warm 100, 15 replays each): per shape cuBLAS, the
  fastest configuration of phases A and B (the per-shape best), the bucket's configuration
  (the best geometric mean of cuBLAS time / its time over the bucket's shapes: the dispatch
  `kls tune --apply` writes), the N's own configuration where one beats the bucket's on an
  N's shapes by more than kls.tune.dispatch.N_MARGIN (`dispatch = "mn"`; elsewhere that side
  is the bucket's) and the instance's own. Every ratio in the summary is phase C's.

Measurements: phase A 12 ops x 12 shapes (+ 12 cuBLAS), phase B at most 3 buckets x
--ops-per-bucket (3) x 36 settings x 4 shapes = 1296, phase C at most 12 x 5 sides, each
flushed and warm.

    PYTHONPATH=server python3 benchmarks/streamk_suite.py --out streamk.json \\
        [--libs templates/.kls/tune/sm90_streamk_bf16/libs] [--budget-s 300]

--libs: libraries built elsewhere (`kls tune ... --build-only` keeps them as <unit>.so);
an op missing there is built here with kls compile (nvcc).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kls.bench.graph_timing import GraphTiming, l2_flushed, l2_warm
from kls.tune.dispatch import N_MARGIN

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = "sm90_streamk_bf16"
SCREEN = {"launches": 20, "repeats": 5}
SAMPLES = 4096  # output elements compared with float64 (besides the NaN-poison count)
HBM_TBS = 4.27  # the achievable H200 bandwidth, for the roofline fraction


@dataclass
class Case:
    """One shape's tensors, its float64 reference at sampled elements, and its call args."""

    shape: tuple[int, int, int]
    a: Any
    b: Any
    out: Any
    idx: Any
    want: Any
    scale: float
    extra: list[tuple[str, int]]  # (C type, value) after the pointers, the instance's own
    runtime: tuple[str, ...]  # the runtime variables at the end of `extra`

    @property
    def key(self) -> str:
        return "x".join(map(str, self.shape))


@dataclass
class Record:
    op: str
    unit: str
    vars: dict[str, int]
    shape: str
    phase: str
    ok: bool
    error: str = ""
    flushed_us: list[float] = field(default_factory=list)  # median, min, max
    warm_us: list[float] = field(default_factory=list)


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def load_plan() -> tuple[Any, Any]:
    from kls.instances import load_instances
    from kls.tune.candidates import make_candidates
    from kls.tune.space import load_space

    spec = load_instances(ROOT / "templates" / "kls.toml").instances[INSTANCE]
    return spec, make_candidates(spec, load_space(spec))


def libraries(spec: Any, units: list[Any], libs: Path | None, jobs: int) -> dict[str, Path]:
    """unit id -> library: carried ones from --libs, the rest built here (in parallel)."""
    from kls.compile import CompileOptions, compile_instance

    found = {u.id: libs / f"{u.id}.so" for u in units if libs and (libs / f"{u.id}.so").is_file()}
    missing = [u for u in units if u.id not in found]

    def build(unit: Any) -> tuple[str, Path | None]:
        built = compile_instance(unit.spec(spec), CompileOptions(mode="build"))
        return unit.id, built.artifact if built.ok else None

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for uid, path in pool.map(build, missing):
            if path is not None:
                found[uid] = Path(path)
            else:
                print(f"build failed: {uid}", flush=True)
    return found


def make_case(spec: Any, shape: tuple[int, int, int], gen: Any) -> Case:
    import torch

    from kls.profiles import profile
    from kls.render import render
    from kls.tune.candidates import at_shape

    m, n, k = shape
    a = torch.empty(m, k, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1, generator=gen)
    b = torch.empty(n, k, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1, generator=gen).t()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    idx = torch.randint(0, m * n, (SAMPLES,), device="cuda", generator=gen)
    rows, cols = idx // n, idx % n
    want = (a[rows].double() * b[:, cols].t().double()).sum(dim=1)
    rendered = render(at_shape(spec, shape))
    facts = profile(spec.profile)
    extra = facts.call_arguments(rendered.kernel)
    params = [p.buffer for p in rendered.params]
    assert params == ["X", "W", "Y"], params
    scale = float(want.abs().max().item())
    return Case(shape, a, b, out, idx, want, scale, extra, facts.runtime_variables(spec))


class Entry:
    """The exported entry of one library: Inductor's call (pointers, sizes, offsets, runtime
    arguments, workspace size pointer, workspace, stream)."""

    def __init__(self, path: Path, symbol: str, case: Case) -> None:
        from kls.bench.marshal import EXTRA_CTYPES

        self.fn = getattr(ctypes.CDLL(str(path)), symbol)
        self.fn.restype = ctypes.c_int
        types = [getattr(ctypes, EXTRA_CTYPES[t]) for t, _ in case.extra]
        self.fn.argtypes = [ctypes.c_void_p] * 3 + types + [ctypes.c_void_p] * 3

    def launcher(self, case: Case, setting: dict[str, int]) -> Callable[[], None]:
        import torch

        values = [v for _, v in case.extra]
        n = len(case.runtime)
        for i, name in enumerate(case.runtime):
            if name in setting:
                values[len(values) - n + i] = int(setting[name])
        ptrs = [case.a.data_ptr(), case.b.data_ptr(), case.out.data_ptr()]
        size = ctypes.c_size_t(0)
        rc = self.fn(None, None, None, *values, ctypes.addressof(size), None, None)
        if rc != 0:
            raise RuntimeError(f"workspace query returned {rc}")
        workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")

        def launch() -> None:
            stream = torch.cuda.current_stream().cuda_stream
            if self.fn(*ptrs, *values, None, workspace.data_ptr(), stream) != 0:
                raise RuntimeError("the kls entry returned an error")

        return launch


def verify(case: Case, launch: Callable[[], None]) -> str:
    """'' when every output element was written and the sampled ones match float64."""
    import torch

    case.out.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    unwritten = int(torch.isnan(case.out).sum().item())
    if unwritten:
        return f"{unwritten} output elements unwritten"
    got = case.out.view(-1)[case.idx].double()
    err = float(((got - case.want).abs().max() / max(case.scale, 1e-30)).item())
    return "" if err <= 2e-2 else f"max relative error {err:.3g}"


def screen(launch: Callable[[], None]) -> GraphTiming:
    return l2_flushed(launch, SCREEN["launches"], SCREEN["repeats"])


class Suite:
    def __init__(self, spec: Any, cs: Any, libs: dict[str, Path], cases: list[Case]) -> None:
        self.spec, self.cs, self.libs, self.cases = spec, cs, libs, cases
        self.units = {u.id: u for u in cs.units if u.id in libs}
        self.records: list[Record] = []
        self.cublas: dict[str, dict[str, list[float]]] = {}
        self.entries: dict[tuple[str, str], Entry] = {}
        self.own = {n: int(spec.variables[n]) for n in cases[0].runtime if n in spec.variables}

    def entry(self, uid: str, case: Case) -> Entry:
        key = (uid, case.key)
        if key not in self.entries:
            self.entries[key] = Entry(self.libs[uid], self.spec.kernel_name, case)
        return self.entries[key]

    def measure(self, uid: str, case: Case, setting: dict[str, int], phase: str) -> Record:
        rec = Record(self.units[uid].choice.op, uid, dict(setting), case.key, phase, False)
        try:
            launch = self.entry(uid, case).launcher(case, setting)
            rec.error = verify(case, launch)
            if not rec.error:
                if phase == "C":
                    rec.flushed_us = l2_flushed(launch).as_list()
                    rec.warm_us = l2_warm(launch).as_list()
                else:
                    rec.flushed_us = screen(launch).as_list()
                rec.ok = True
        except RuntimeError as exc:
            rec.error = str(exc)
        self.records.append(rec)
        return rec

    def time_cublas(self, case: Case, full: bool) -> None:
        import torch

        out = torch.empty_like(case.out)

        def mm() -> None:
            torch.mm(case.a, case.b, out=out)

        got = self.cublas.setdefault(case.key, {})
        if full:
            got["flushed_us"], got["warm_us"] = l2_flushed(mm).as_list(), l2_warm(mm).as_list()
        else:
            got["screen_us"] = screen(mm).as_list()

    def screened(self, key: str) -> list[Record]:
        return [r for r in self.records if r.shape == key and r.ok and r.phase in "AB"]


def bucket_shapes(cases: list[Case]) -> dict[int, list[Case]]:
    out: dict[int, list[Case]] = {}
    for c in cases:
        out.setdefault(c.shape[0], []).append(c)
    return dict(sorted(out.items()))


def phase_b_ops(suite: Suite, cases: list[Case], count: int) -> list[str]:
    """The bucket's shapes' fastest phase-A ops, then the best by geometric mean over it."""
    chosen: list[str] = []
    for case in cases:
        rows = sorted(suite.screened(case.key), key=lambda r: r.flushed_us[0])
        if rows and rows[0].unit not in chosen and len(chosen) < count:
            chosen.append(rows[0].unit)
    means = {}
    for uid in suite.units:
        ratios = [
            suite.cublas[c.key]["screen_us"][0] / r.flushed_us[0]
            for c in cases
            for r in suite.screened(c.key)
            if r.unit == uid and r.phase == "A"
        ]
        if len(ratios) == len(cases):
            means[uid] = geomean(ratios) or 0.0
    for uid in sorted(means, key=lambda u: -means[u]):
        if len(chosen) >= count:
            break
        if uid not in chosen:
            chosen.append(uid)
    return chosen


def settle(records: list[Record]) -> dict[tuple[str, str], dict[str, float]]:
    """(unit, setting as JSON) -> shape -> screened time (us)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in records:
        if r.ok and r.phase in "AB":
            out.setdefault((r.unit, json.dumps(r.vars, sort_keys=True)), {})[r.shape] = (
                r.flushed_us[0]
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--libs", type=Path, help="a folder of <unit>.so built elsewhere")
    parser.add_argument(
        "--budget-s", type=float, default=300.0, help="phase B starts no setting after this"
    )
    parser.add_argument("--ops-per-bucket", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=12, help="parallel nvcc builds, if any")
    args = parser.parse_args()
    import torch

    start = time.monotonic()
    phases: dict[str, float] = {}
    spec, cs = load_plan()
    libs = libraries(spec, cs.units, args.libs, args.jobs)
    phases["plan_and_libraries_s"] = time.monotonic() - start
    print(f"{len(libs)}/{len(cs.units)} libraries, {len(cs.runtime_combos)} settings", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [make_case(spec, s, gen) for s in spec_shapes(spec)]
    suite = Suite(spec, cs, libs, cases)
    phases["setup_s"] = time.monotonic() - start
    for case in cases:  # phase A
        suite.time_cublas(case, full=False)
        for uid in suite.units:
            suite.measure(uid, case, suite.own, "A")
    phases["phase_a_s"] = time.monotonic() - start
    print(f"phase A done at {phases['phase_a_s']:.0f} s", flush=True)
    buckets = bucket_shapes(cases)
    chosen = {m: phase_b_ops(suite, cs_, args.ops_per_bucket) for m, cs_ in buckets.items()}
    truncated = False
    for setting in cs.runtime_combos:  # phase B: settings outermost
        if time.monotonic() - start > args.budget_s:
            truncated = True
            break
        for m, bucket in buckets.items():
            for uid in chosen[m]:
                if setting == suite.own:
                    continue  # phase A has it
                for case in bucket:
                    suite.measure(uid, case, setting, "B")
    phases["phase_b_s"] = time.monotonic() - start
    print(f"phase B done at {phases['phase_b_s']:.0f} s (truncated: {truncated})", flush=True)
    screens = [r.__dict__ for r in suite.records]
    args.out.write_text(json.dumps({"partial": True, "cublas": suite.cublas, "records": screens}))
    rows, dispatch = phase_c(suite, buckets)
    phases["phase_c_s"] = time.monotonic() - start
    result = report(suite, rows, dispatch, chosen, truncated, phases, args)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    return 0


def spec_shapes(spec: Any) -> list[tuple[int, int, int]]:
    from kls.tune.space import load_space

    return list(load_space(spec).shapes)


def phase_c(
    suite: Suite, buckets: dict[int, list[Case]]
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Full timing of each shape's sides; the bucket configurations from the screens."""
    times = settle(suite.records)
    dispatch: dict[int, dict[str, Any]] = {}
    by_n: dict[tuple[int, int], dict[str, Any]] = {}  # dispatch = "mn": an N's own, if another
    for m, bucket in buckets.items():
        chosen = screened_best(suite, times, bucket)
        if chosen is None:
            continue
        dispatch[m] = chosen
        for n in sorted({c.shape[1] for c in bucket}):
            of_n = [c for c in bucket if c.shape[1] == n]
            own = screened_best(suite, times, of_n)
            theirs = screened_mean(suite, times, of_n, chosen)
            if own is not None and own["screen_geomean"] > theirs * (1 + N_MARGIN):
                by_n[(m, n)] = own
    rows = []
    for m, bucket in buckets.items():
        for case in bucket:
            suite.time_cublas(case, full=True)
            row: dict[str, Any] = {"shape": case.key, "cublas": suite.cublas[case.key]}
            screened = [
                (per[case.key], key[0], key[1]) for key, per in times.items() if case.key in per
            ]
            sides: dict[str, tuple[str, dict[str, int]]] = {}
            if screened:
                fastest = min(screened)
                sides["best"] = (fastest[1], json.loads(fastest[2]))
            if m in dispatch:
                sides["dispatch"] = (dispatch[m]["unit"], dispatch[m]["vars"])
            if (m, case.shape[1]) in by_n:
                own = by_n[(m, case.shape[1])]
                sides["dispatch_mn"] = (own["unit"], own["vars"])
            current = next((u.id for u in suite.cs.units if u.choice.op == suite.spec.op), "")
            if current in suite.units:
                sides["current"] = (current, suite.own)
            for side, (side_unit, side_setting) in sides.items():
                rec = suite.measure(side_unit, case, side_setting, "C")
                row[side] = rec.__dict__
            if "dispatch" in row and "dispatch_mn" not in row:
                row["dispatch_mn"] = row["dispatch"]  # the M bucket's serves this N
            rows.append(row)
            print(case.key, {k: row[k].get("flushed_us") for k in sides}, flush=True)
    for (m, n), own in by_n.items():
        op = suite.units[own["unit"]].choice.op
        dispatch[m].setdefault("by_n", {})[str(n)] = {**own, "op": op}
    return rows, dispatch


def screened_mean(
    suite: Suite,
    times: dict[tuple[str, str], dict[str, float]],
    cases: list[Case],
    chosen: dict[str, Any],
) -> float:
    """`chosen`'s geometric mean of cuBLAS time / its time over `cases` in the screens."""
    per = times[(chosen["unit"], json.dumps(chosen["vars"], sort_keys=True))]
    return geomean([suite.cublas[c.key]["screen_us"][0] / per[c.key] for c in cases]) or 0.0


def screened_best(
    suite: Suite, times: dict[tuple[str, str], dict[str, float]], cases: list[Case]
) -> dict[str, Any] | None:
    """The screened configuration with the best geometric mean of cuBLAS time / its time over
    `cases`, among those screened on all of them (kls.tune.dispatch's rule)."""
    best, best_mean = None, 0.0
    for (uid, setting), per in times.items():
        if all(c.key in per for c in cases):
            mean = geomean([suite.cublas[c.key]["screen_us"][0] / per[c.key] for c in cases])
            if mean and mean > best_mean:
                best, best_mean = (uid, setting), mean
    if best is None:
        return None
    return {"unit": best[0], "vars": json.loads(best[1]), "screen_geomean": best_mean}


def report(
    suite: Suite,
    rows: list[dict[str, Any]],
    dispatch: dict[int, dict[str, Any]],
    chosen: dict[int, list[str]],
    truncated: bool,
    phases: dict[str, float],
    args: argparse.Namespace,
) -> dict[str, Any]:
    import torch

    def ratio(row: dict[str, Any], side: str, key: str = "flushed_us") -> float | None:
        got = row.get(side) or {}
        if not got.get("ok") or not got.get(key):
            return None
        return float(row["cublas"][key][0] / got[key][0])

    summary: dict[str, Any] = {}
    for side in ("best", "dispatch", "dispatch_mn", "current"):
        for key in ("flushed_us", "warm_us"):
            vals = [ratio(r, side, key) for r in rows]
            got = [v for v in vals if v]
            summary[f"{side} vs cuBLAS, {key} (geomean)"] = geomean(got)
            summary[f"{side} vs cuBLAS, {key} (worst)"] = min(got) if got else None
    for side, what in (("dispatch", "dispatch"), ("dispatch_mn", 'dispatch = "mn"')):
        gaps = {}
        for r in rows:
            best, disp = (r.get(s) or {} for s in ("best", side))
            if best.get("ok") and disp.get("ok"):
                gaps[r["shape"]] = disp["flushed_us"][0] / best["flushed_us"][0] - 1.0
        summary[f"{what} slower than the per-shape best, L2 flushed"] = gaps
    roofline = {}
    for r in rows:
        m, n, k = (int(v) for v in r["shape"].split("x"))
        best = r.get("best") or {}
        if m == 128 and best.get("ok"):
            seconds = 2.0 * (m * k + k * n + m * n) / (HBM_TBS * 1e12)
            roofline[r["shape"]] = seconds * 1e6 / best["flushed_us"][0]
    summary[f"per-shape best, fraction of the HBM roofline at {HBM_TBS} TB/s"] = roofline
    counts = {p: sum(1 for x in suite.records if x.phase == p) for p in "ABC"}
    return {
        "device": torch.cuda.get_device_name(0),
        "method": (
            "kls.bench.graph_timing: CUDA graph replays; L2 flushed = graph of (256 MiB "
            "flush, launch) pairs less a graph of flushes; L2 warm = graph of launches. Phases "
            f"A/B (screens): flushed, {SCREEN['launches']} launches, median of "
            f"{SCREEN['repeats']} replays; phase C: flushed 50 launches, warm 100, median/min/max "
            "of 15 replays. Each configuration verified first (every output element written, "
            f"{SAMPLES} sampled elements within 2e-2 of float64, relative to the largest)."
        ),
        "instance": INSTANCE,
        "ops": len(suite.units),
        "settings": len(suite.cs.runtime_combos),
        "runtime_space": suite.cs.runtime_space,
        "measurements": counts,
        "phase_b_ops": {str(m): [suite.units[u].choice.op for u in us] for m, us in chosen.items()},
        "phase_b_truncated": truncated,
        "budget_s": args.budget_s,
        "phases_s": phases,
        "dispatch": {
            str(m): {**d, "op": suite.units[d["unit"]].choice.op} for m, d in dispatch.items()
        },
        "rows": rows,
        "failed": [r.__dict__ for r in suite.records if not r.ok][:50],
        "summary": summary,
    }


if __name__ == "__main__":
    sys.exit(main())
